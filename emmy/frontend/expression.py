"""The frontend for `-c EXPR`: a PyTorch expression traced to an emmy.graph function.

The expression runs once under a dispatch mode that records every ATen call: tensors made
by factories (`torch.randn`, ...) or met without a producer become the function's inputs,
and the recorded calls become an fx graph of ATen ops that the model frontend
(emmy.frontend.converter) converts, the same converter torch.export's graphs go through.
Under `meta=True` the tensors are meta tensors, so tracing a large expression allocates
nothing; otherwise they are real and the eager result is kept as the reference.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.fx.node import Argument
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from xdsl.dialects.builtin import ModuleOp

from emmy.base.errors import EmmyError
from emmy.frontend import ops
from emmy.frontend.converter import Converter

FACTORIES = {
    "randn",
    "rand",
    "randint",
    "zeros",
    "ones",
    "full",
    "empty",
    "arange",
    "normal_",
    "uniform_",
    "fill_",
    "zero_",
    "scalar_tensor",
    "empty_like",
    "randn_like",
    "rand_like",
}


@dataclass
class Traced:
    """A traced expression: its graph, its inputs (real or meta), its eager result and the
    constants its graph's trailing arguments are bound to (an index a roll reads)."""

    module: ModuleOp
    inputs: list[torch.Tensor]
    output: torch.Tensor
    ops: list[str] = field(default_factory=list)
    constants: dict[str, torch.Tensor] = field(default_factory=dict)


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        #: each ATen call: its op, arguments, keyword arguments and result
        self.calls: list[
            tuple[torch._ops.OpOverload, tuple[Argument, ...], dict[str, Argument], object]
        ] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append((func, args, kwargs, out))
        return out


# torch wraps every dispatch mode in torch._dynamo.disable, importing dynamo (~2 s) on the
# first op; a trace never runs under dynamo, so mark the raw handler as already disabled.
_raw_dispatch = getattr(_Recorder.__torch_dispatch__, "__wrapped__", None)
if _raw_dispatch is not None:
    _raw_dispatch.__dynamo_disable = _raw_dispatch


class _WholeOps(TorchFunctionMode):
    """Records the functions below as one ATen op each, as torch.export keeps them: below
    autograd they decompose into pieces (SDPA on meta tensors into its math form) that
    no longer read as the op."""

    WHOLE = {
        torch.nn.functional.scaled_dot_product_attention: "scaled_dot_product_attention",
        torch.nn.functional.rms_norm: "rms_norm",
    }

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = self.WHOLE.get(func)
        if name is None:
            return func(*args, **kwargs)
        with _disable_current_modes():
            out = func(*args, **kwargs)
        self.recorder.calls.append((getattr(torch.ops.aten, name).default, args, kwargs, out))
        return out


def evaluate(expression: str, meta: bool) -> tuple[torch.Tensor, _Recorder]:
    # `emmy.rope(...)`, `emmy.cached_attention(...)`: the ops models call (emmy.frontend.ops)
    namespace = {
        "torch": torch,
        "nn": torch.nn,
        "F": torch.nn.functional,
        "math": math,
        "emmy": ops,
    }
    recorder = _Recorder()
    try:
        code = compile(expression, "<expression>", "eval")
    except SyntaxError as error:
        raise EmmyError(
            f"bad expression: {error.msg} at column {error.offset}: {expression}"
        ) from None
    try:
        device = torch.device("meta" if meta else "cpu")
        with device, recorder, _WholeOps(recorder), torch.no_grad():
            result = eval(code, namespace)  # the user's own expression, like python -c
    except EmmyError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of the user's expression
        raise EmmyError(f"bad expression: {type(error).__name__}: {error}") from None
    if not isinstance(result, torch.Tensor):
        raise EmmyError(f"the expression gives {type(result).__name__}, not a tensor")
    return result, recorder


def _wrapped_number(tensor: torch.Tensor) -> bool:
    """Whether torch made the tensor of a Python number (the 2 of `x * 2`)."""
    # a method of every tensor that torch's stub for Tensor leaves out
    return tensor._is_wrapped_number()  # pyright: ignore[reportAttributeAccessIssue]


def trace(expression: str, *, meta: bool = False, fallback: bool = True) -> Traced:
    """Runs `expression` and records it as `func.func @main` over emmy.graph ops (what emmy
    has no kernel for as torch ops, or an error without `fallback`)."""
    result, recorder = evaluate(expression, meta)
    fx_graph = fx.Graph()
    nodes: dict[int, fx.Node] = {}
    keep_alive: list[object] = []  # ids stay unique while the tensors live
    inputs: list[torch.Tensor] = []
    names: list[str] = []

    def placeholder(tensor: torch.Tensor) -> fx.Node:
        if id(tensor) not in nodes:
            node = fx_graph.placeholder(f"in{len(inputs)}")
            node.meta["val"] = tensor
            nodes[id(tensor)] = node
            inputs.append(tensor)
            keep_alive.append(tensor)
        return nodes[id(tensor)]

    def argument(value: Argument) -> Argument:
        if isinstance(value, (list, tuple)):
            return type(value)(argument(v) for v in value)
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) in nodes:
            return nodes[id(value)]
        if value.dim() == 0 and value.device.type == "cpu" and (meta or _wrapped_number(value)):
            return float(value.item())  # a Python scalar torch wrapped as a tensor
        return placeholder(value)

    for op, args, kwargs, out in recorder.calls:
        name = op.__name__.split(".")[0] if hasattr(op, "__name__") else str(op)
        names.append(f"aten.{name}")
        keep_alive.append(out)
        if name in FACTORIES:
            # an in-place initialiser of a tensor that is already an input changes nothing
            if name.endswith("_") and args and id(args[0]) in nodes:
                nodes[id(out)] = nodes[id(args[0])]
            elif isinstance(out, torch.Tensor):
                placeholder(out)
            continue
        if name.endswith("_"):
            raise EmmyError(f"in-place op aten.{name} is not supported")
        node = fx_graph.call_function(
            op, tuple(argument(a) for a in args), {k: argument(v) for k, v in kwargs.items()}
        )
        node.meta["val"] = out
        if isinstance(out, torch.Tensor):
            nodes[id(out)] = node
            continue
        for index, item in enumerate(out if isinstance(out, (list, tuple)) else ()):
            if isinstance(item, torch.Tensor):
                getter = fx_graph.call_function(operator.getitem, (node, index))
                getter.meta["val"] = item
                nodes[id(item)] = getter
    if id(result) not in nodes:
        raise EmmyError("the expression's result was not computed by any supported op")
    fx_graph.output((nodes[id(result)],))
    model = Converter(fx_graph, {}, fallback=fallback).convert()
    return Traced(model.module, inputs, result, names, model.constants)
