"""Nodes that compute nothing on a device: a size and a number computed from sizes, one
result of an op that gives several (`getitem`), an op of a tensor's shape and dtype alone
(`zeros_like`, `new_full`, ...), computed at compile time, and ops that leave their input
as it is (dropout in inference, torch.export's metadata checks)."""

from __future__ import annotations

import operator

import torch
from torch import fx

from emmy.frontend.aten.arguments import arg_example
from emmy.frontend.aten.common import ATEN
from emmy.frontend.function_builder import Constant, FunctionBuilder, map_nodes
from emmy.frontend.op_registry import op_name, op_overload

_NUMBERS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)


@ATEN.handles_class(lambda node: isinstance(node.meta.get("val"), _NUMBERS))
def _size(self: FunctionBuilder, node: fx.Node) -> int | float:
    """A size (of a dynamic dim, specialised), or a number computed from sizes (`x.shape[1]
    / 8`), read by views and as scalars: known when the graph is converted."""
    value = node.meta["val"]
    if isinstance(value, (float, torch.SymFloat)):
        return float(value)
    return int(value)


@ATEN.handles_class(lambda node: node.target is operator.getitem)
def _item(self: FunctionBuilder, node: fx.Node) -> object:
    """One result of an op that gives several."""
    results, index = self.value_of(node.args[0]), node.args[1]
    if not isinstance(results, (list, tuple)) or not isinstance(index, int):
        raise self.error(f"getitem {index!r} of {type(results).__name__} is not supported")
    return results[index]


#: ops that read only the shape and dtype of their first argument
SHAPE_ONLY_OPS = (
    "aten.zeros_like.default",
    "aten.ones_like.default",
    "aten.full_like.default",
    "aten.empty_like.default",
    "aten.new_zeros.default",
    "aten.new_ones.default",
    "aten.new_full.default",
    "aten.new_empty.default",
)


def _shape_only_refusal(node: fx.Node) -> str | None:
    if any(not _is_size(arg) for arg in node.all_input_nodes[1:]):
        return f"{op_name(node)} of a tensor fill is not supported"
    return None


def _is_size(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), (int, torch.SymInt))


@ATEN.handles(*SHAPE_ONLY_OPS, accepts=_shape_only_refusal)
def _shape_only(self: FunctionBuilder, node: fx.Node) -> Constant:
    """zeros_like(x), x.new_full(size, v), ...: of x's shape and dtype alone, so computed
    at compile time, on the CPU (any contents are right for an empty one: zeros)."""
    example = arg_example(node, 0)
    args, mapped = map_nodes((node.args[1:], dict(node.kwargs)), lambda n: self.values[n])
    kwargs = dict(mapped)  # fx maps a dict to an immutable one
    if "device" in kwargs:
        kwargs["device"] = "cpu"
    with torch.no_grad():
        value = op_overload(node)(torch.zeros(example.shape, dtype=example.dtype), *args, **kwargs)
    if "empty" in op_name(node):
        value = value.zero_()
    return Constant(f"{node.name}.value", value)


@ATEN.handles("aten.dropout.default", "aten.lift_fresh_copy.default", "aten.lift_fresh.default")
def _identity(self: FunctionBuilder, node: fx.Node) -> object:
    return self.value_of(node.args[0])


# checks torch.export inserts (before each `.to(...)`) of what shapes already fix
@ATEN.handles("aten._assert_tensor_metadata.default")
def _no_op(self: FunctionBuilder, node: fx.Node) -> None:
    return None
