"""The frontend for `-c EXPR`: a PyTorch expression traced to an emmy.graph function.

The expression runs once under a dispatch mode that records every ATen call: tensors made
by factories (`torch.randn`, ...) or met without a producer become the function's inputs,
the recorded ops become graph ops, and the expression's value is the function's result.
Under `meta=True` the tensors are meta tensors, so tracing a large expression allocates
nothing; otherwise they are real and the eager result is kept as the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from xdsl.builder import Builder
from xdsl.dialects import func
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Region, SSAValue
from xdsl.rewriter import InsertPoint

from emmy.dialects import graph
from emmy.errors import EmmyError

DTYPES: dict[torch.dtype, Attribute] = {
    torch.float32: Float32Type(),
    torch.float16: Float16Type(),
    torch.bfloat16: BFloat16Type(),
}
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
ALIASES = {"lift_fresh", "clone", "alias", "detach", "contiguous", "_to_copy"}
UNARY = {
    "exp": graph.ExpOp,
    "tanh": graph.TanhOp,
    "silu": graph.SiluOp,
    "relu": graph.ReluOp,
    "neg": graph.NegOp,
}
BINARY = {"add": graph.AddOp, "sub": graph.SubOp, "mul": graph.MulOp, "div": graph.DivOp}


@dataclass
class Traced:
    """A traced expression: its graph, its inputs (real or meta) and its eager result."""

    module: ModuleOp
    inputs: list[torch.Tensor]
    output: torch.Tensor
    ops: list[str] = field(default_factory=list)


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[object, tuple, dict, object]] = []

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


def evaluate(expression: str, meta: bool) -> tuple[torch.Tensor, _Recorder]:
    namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math}
    recorder = _Recorder()
    try:
        code = compile(expression, "<expression>", "eval")
    except SyntaxError as error:
        raise EmmyError(
            f"bad expression: {error.msg} at column {error.offset}: {expression}"
        ) from None
    try:
        with torch.device("meta" if meta else "cpu"), recorder, torch.no_grad():
            result = eval(code, namespace)  # the user's own expression, like python -c
    except EmmyError:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of the user's expression
        raise EmmyError(f"bad expression: {type(error).__name__}: {error}") from None
    if not isinstance(result, torch.Tensor):
        raise EmmyError(f"the expression gives {type(result).__name__}, not a tensor")
    return result, recorder


def tensor_type(tensor: torch.Tensor) -> TensorType:
    if tensor.dtype not in DTYPES:
        raise EmmyError(f"dtype {tensor.dtype} is not supported (use float32, float16 or bfloat16)")
    return TensorType(DTYPES[tensor.dtype], list(tensor.shape))


def trace(expression: str, *, meta: bool = False) -> Traced:
    """Runs `expression` and records it as `func.func @main` over emmy.graph ops."""
    result, recorder = evaluate(expression, meta)
    values: dict[int, SSAValue] = {}
    keep_alive: list[object] = []
    inputs: list[torch.Tensor] = []
    block = Block()
    builder = Builder(InsertPoint.at_end(block))
    names: list[str] = []

    def input_value(tensor: torch.Tensor) -> SSAValue:
        if id(tensor) not in values:
            arg = block.insert_arg(tensor_type(tensor), len(block.args))
            values[id(tensor)] = arg
            inputs.append(tensor)
            keep_alive.append(tensor)
        return values[id(tensor)]

    def operand(value: object, like: torch.Tensor) -> SSAValue:
        if isinstance(value, torch.Tensor):
            if id(value) in values:
                return values[id(value)]
            if value.dim() == 0 and value.device.type == "cpu" and like.device.type == "meta":
                return builder.insert(
                    graph.ConstantOp(float(value.item()), DTYPES[like.dtype])
                ).result
            return input_value(value)
        if isinstance(value, (int, float)):
            return builder.insert(graph.ConstantOp(float(value), DTYPES[like.dtype])).result
        raise EmmyError(f"unsupported operand {value!r}")

    for op, args, kwargs, out in recorder.calls:
        name = op.__name__.split(".")[0] if hasattr(op, "__name__") else str(op)
        base = name.rstrip("_") if name.endswith("_") and name not in FACTORIES else name
        names.append(f"aten.{name}")
        if not isinstance(out, torch.Tensor):
            raise EmmyError(f"unsupported op aten.{name}: it does not give one tensor")
        keep_alive.append(out)
        if name in FACTORIES:
            # an in-place initialiser of a tensor that is already an input changes nothing
            if not (name.endswith("_") and args and id(args[0]) in values):
                input_value(out)
            values[id(out)] = values[id(args[0]) if id(out) not in values else id(out)]
            continue
        if name in ALIASES:
            values[id(out)] = operand(args[0], out)
            continue
        if name.endswith("_"):
            raise EmmyError(f"in-place op aten.{name} is not supported")
        values[id(out)] = _graph_op(builder, base, args, kwargs, out, operand)
    if id(result) not in values:
        raise EmmyError("the expression's result was not computed by any supported op")
    builder.insert(func.ReturnOp(values[id(result)]))
    main = func.FuncOp("main", ([a.type for a in block.args], [tensor_type(result)]), Region(block))
    return Traced(ModuleOp([main]), inputs, result, names)


def _graph_op(builder, name, args, kwargs, out, operand) -> SSAValue:
    out_type = tensor_type(out)
    if name == "_softmax" or name == "softmax":
        return builder.insert(graph.SoftmaxOp(operand(args[0], out), int(args[1]), out_type)).result
    if name in UNARY:
        return builder.insert(UNARY[name](operand(args[0], out))).result
    if name == "gelu":
        approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
        return builder.insert(graph.GeluOp(operand(args[0], out), approximate)).result
    if name == "rsub":
        lhs, rhs = operand(args[1], out), operand(args[0], out)
        return builder.insert(graph.SubOp(lhs, rhs, out_type)).result
    if name in BINARY:
        lhs, rhs = operand(args[0], out), operand(args[1], out)
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if alpha != 1:
            scale = builder.insert(graph.ConstantOp(float(alpha), out_type.element_type)).result
            rhs = builder.insert(graph.MulOp(rhs, scale, rhs.type)).result
        return builder.insert(BINARY[name](lhs, rhs, out_type)).result
    raise EmmyError(f"unsupported op aten.{name} (shape {list(out.shape)}, {out.dtype})")
