"""The torch side the families' references and checks share: chains evaluated in float64,
a fused kernel's extra inputs broadcast by their kind, random inputs. Only references and
checks import this module (when called), so torch stays off the compile path."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from emmy.base import dtypes
from emmy.base.dtypes import torch_dtype
from emmy.base.pointwise_ops import BOOL, BY_CALL, CONVERT_TARGETS, PARAM
from emmy.base.problem_key import parse_input_kinds
from emmy.dsl import ast
from emmy.dsl.keys import chain_tree

_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "exp": torch.exp,
    "tanh": torch.tanh,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
}
_BINARY = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div}
_NAMED_FLOATS = {"inf": math.inf, "nan": math.nan}


def _chain(node: ast.Expr, inputs: dict[str, torch.Tensor]):
    match node:
        case ast.FloatLit() | ast.IntLit():
            return node.value
        case ast.Name(name):
            return _NAMED_FLOATS[name] if name in _NAMED_FLOATS else inputs[name]
        case ast.Neg(operand):
            return -_chain(operand, inputs)
        case ast.Call(name, args):
            values = [_chain(arg, inputs) for arg in args]
            if name in _FUNCTIONS:
                return _FUNCTIONS[name](as_tensor(values[0]))
            return _pointwise(name, values)
        case ast.Infix(first, rest):
            value = _chain(first, inputs)
            for op, rhs in rest:
                value = _BINARY[op](as_tensor(value), _chain(rhs, inputs))
            return value
    raise TypeError(f"a chain's {type(node).__name__} where an operation should be")


def _pointwise(name: str, args: list) -> torch.Tensor:
    """An op of the pointwise table by its ATen op, on float64 (or integer, or bool) values;
    a conversion rounds to its target and is float64 again where that is a float."""
    target = CONVERT_TARGETS.get(name)
    if target is not None:
        converted = as_tensor(args[0]).to(torch.bool if target == BOOL else torch_dtype(target))
        return converted.double() if converted.is_floating_point() else converted
    entry = BY_CALL[name]
    form = entry.aten[0]
    _, op, overload = form.names[0].split(".")
    packet = getattr(torch.ops.aten, op)
    schema = getattr(packet, overload)._schema
    keyword = {a.name for a in schema.arguments if a.kwarg_only}
    values = [
        arg if role == PARAM or isinstance(arg, torch.Tensor) else as_tensor(arg)
        for role, arg in zip(entry.roles, args, strict=True)
    ]
    named = dict(zip(form.args, values, strict=True))
    positional = [v for n, v in named.items() if n not in keyword]
    return packet(*positional, **{n: v for n, v in named.items() if n in keyword})


def exact(tensor: torch.Tensor) -> torch.Tensor:
    """An input of a reference: floats in float64, integers as they are, a bool's byte
    (i8, as a bench's buffers hold it) as a bool."""
    if tensor.dtype == torch.int8:
        return tensor.bool()
    return tensor.double() if tensor.is_floating_point() else tensor


def random_of(shape, dtype: str, generator: torch.Generator) -> torch.Tensor:
    """Random values of a storage type: normal floats, small integers, even bools (i8)."""
    if dtypes.is_float(dtype):
        return randn(shape, dtype, generator)
    if dtype == BOOL:
        return torch.rand(shape, generator=generator) < 0.5
    return torch.randint(-8, 9, shape, generator=generator, dtype=torch_dtype(dtype))


def as_tensor(value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(value, dtype=torch.int64 if isinstance(value, int) else torch.float64)


def evaluate_chain(text: str, named: dict[str, torch.Tensor]) -> torch.Tensor:
    """A chain of the kernel language (a key's `fn` or `epilogue`) over named tensors."""
    return as_tensor(_chain(chain_tree(text), named))


def epilogue_inputs(key: dict, inputs: list[torch.Tensor], shape: tuple[int, ...]) -> dict:
    """The extra inputs of a fused epilogue, broadcast to the output `shape` by their kind:
    `full` has the output's elements, `row` one per column, `col` one per row, `scalar` one."""
    kinds = parse_input_kinds(str(key.get("inputs") or ""))
    views = {
        "full": lambda flat: flat.reshape(shape),
        "row": lambda flat: flat.expand(*shape[:-1], -1),
        "col": lambda flat: flat.reshape(*shape[:-1], 1),
        "scalar": lambda flat: flat[0],
    }
    return {
        f"in{i}": views[kind](tensor.double().reshape(-1))
        for i, (kind, tensor) in enumerate(zip(kinds, inputs, strict=True))
    }


def with_epilogue(key: dict, accumulator: torch.Tensor, extra: list[torch.Tensor]) -> torch.Tensor:
    """The key's `epilogue` chain over `acc` and the extra inputs of its kinds."""
    named = epilogue_inputs(key, extra, tuple(accumulator.shape))
    named["acc"] = accumulator
    return evaluate_chain(str(key["epilogue"]), named)


def fused_rows(
    key: dict,
    inputs: list[torch.Tensor],
    params: int,
    normalise: Callable,
    statistics: Callable | None = None,
):
    """A row kernel (softmax, a norm with `params` weights) whose x is the key's chain `fn`
    over its inputs, followed by the `epilogue` chain; with `store = yes`, x itself is the
    next output, and with `stats = yes` the `statistics` of x's rows (a mean, an rstd)."""
    ins = inputs[: len(inputs) - params]
    weights = [t.double() for t in inputs[len(inputs) - params :]]
    shape = (int(key["rows"]), int(key["cols"]))
    named = epilogue_inputs({"inputs": key.get("inputs", "full")}, ins, shape)
    x = evaluate_chain(str(key.get("fn", "in0")), named).expand(shape)
    named["acc"] = normalise(x, *weights)
    outputs = [evaluate_chain(str(key.get("epilogue", "acc")), named)]
    if str(key.get("store", "no")) == "yes":
        outputs.append(x)
    if statistics is not None and str(key.get("stats", "no")) == "yes":
        outputs.extend(statistics(x))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def randn(shape, dtype: str, generator: torch.Generator, scale: float = 1.0, shift: float = 0.0):
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * scale + shift
    return values.to(dtypes.torch_dtype(dtype))


def randint(shape, dtype: str, generator: torch.Generator) -> torch.Tensor:
    """Random integers of an integer storage type: 0 or 1 for i8 (a mask); for i32 over its
    range and for i64 over ±2⁵⁰ (past 32 bits, so that a copy that narrows them shows, and
    exact in the float64 a check compares in)."""
    torch_dtype = dtypes.torch_dtype(dtype)
    if dtype == "i8":
        return torch.randint(0, 2, shape, generator=generator, dtype=torch_dtype)
    bound = 2**50 if dtype == "i64" else 2**31 - 1
    return torch.randint(-bound, bound, shape, generator=generator, dtype=torch_dtype)


def random_epilogue_inputs(key: dict, dtype: str, generator: torch.Generator) -> list[torch.Tensor]:
    """Random extra inputs of a matmul's epilogue, each with the shape its kind reads."""
    rows, cols = key["batch"] * key["m"], key["n"]
    sizes = {"full": rows * cols, "row": cols, "col": rows, "scalar": 1}
    kinds = parse_input_kinds(str(key["inputs"]))
    return [randn((sizes[kind],), dtype, generator) for kind in kinds]


def row_inputs(key: dict, dtype: str, generator: torch.Generator, params: int) -> list:
    """The inputs of a (fused) row kernel's chain, each with the shape its kind reads (the
    first shifted and scaled, so that a mean and a variance matter), then a norm's weight
    (and bias)."""
    rows, cols = key["rows"], key["cols"]
    shapes = {"full": (rows, cols), "row": (cols,), "col": (rows, 1), "scalar": (1,)}
    kinds = parse_input_kinds(str(key.get("inputs", "full")))
    ins = [randn(shapes[kind], dtype, generator) for kind in kinds]
    ins[0] = randn(shapes[kinds[0]], dtype, generator, 2.0, 0.5)
    return ins + [randn((cols,), dtype, generator) for _ in range(params)]
