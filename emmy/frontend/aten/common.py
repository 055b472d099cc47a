"""What the handlers of emmy.frontend.aten share: the registry they register in, and the
readings of a node (its example, its arguments by name, a dtype's storage type) and the
refusal that several classes of ops use; its arguments by place are read by
emmy.frontend.aten.arguments."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from emmy.base import dtypes
from emmy.base.pointwise_ops import BOOL
from emmy.dialects import graph
from emmy.frontend.function_builder import FunctionBuilder, View
from emmy.frontend.op_registry import OpRegistry, Refusal, op_name, op_overload

#: the ops the converter takes, each by one entry: filled as the modules of
#: emmy.frontend.aten are imported, which importing that package does
ATEN = OpRegistry()


def _value(node: fx.Node) -> torch.Tensor:
    """The node's example tensor: its first, for ops that give several (their others, the
    statistics saved for a backward pass, have no user in inference)."""
    value = node.meta["val"]
    return value[0] if isinstance(value, (list, tuple)) else value


def _storage_name(dtype: torch.dtype) -> str | None:
    """The storage type of a torch dtype (a bool is i8), None where emmy stores none."""
    return BOOL if dtype == torch.bool else dtypes.torch_dtype_name(dtype)


def _element(dtype: torch.dtype) -> Attribute:
    name = _storage_name(dtype)
    assert name is not None, f"{dtype} has no storage type"
    return dtypes.xdsl_type(name)


def _nonempty(refusal: Refusal | None = None) -> Refusal:
    """`refusal`, after refusing an op whose result has no element (no kernel launches
    for one)."""

    def refuses(node: fx.Node) -> str | None:
        reason = refusal(node) if refusal is not None else None
        if reason is not None:
            return reason
        shape = _value(node).shape
        # sizes of dims left dynamic are known once the graph is specialised
        if all(isinstance(n, int) for n in shape) and 0 in shape:
            return f"{op_name(node)} giving an empty tensor is not supported"
        return None

    return refuses


def _arguments(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by the names of its op's schema, defaults filled in."""
    schema = op_overload(node)._schema
    bound = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    bound |= dict(zip((a.name for a in schema.arguments), node.args, strict=False))
    return bound | dict(node.kwargs)


def _shaped_as(self: FunctionBuilder, value: SSAValue[TensorType], example: torch.Tensor) -> View:
    """`value` reshaped to the example's shape (the elements in the same order)."""
    out = self.type_of(example)
    if value.type != out:
        value = self.insert(graph.ReshapeOp(value, out))
    return self.result(value, example)
