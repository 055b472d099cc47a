"""Elementwise ops: the pointwise table's (emmy.base.pointwise_ops), their operands
promoted as torch promotes them, and glu, gelu, triu and tril."""

from __future__ import annotations

import torch
from torch import fx
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from xdsl.dialects.builtin import TensorType, i8

from emmy.base import dtypes
from emmy.base.pointwise_ops import (
    BY_ATEN,
    CONDITION,
    POINTWISE,
    VALUE,
    Gives,
    PointwiseOp,
    Promotion,
)
from emmy.dialects import graph
from emmy.frontend.aten.arguments import arg_example, arg_float, arg_int, arg_str, kwarg_number
from emmy.frontend.aten.common import ATEN, _element, _nonempty, _storage_name
from emmy.frontend.function_builder import FunctionBuilder, View
from emmy.frontend.op_registry import op_name, op_overload


def _operands(node: fx.Node) -> tuple[PointwiseOp, list[object]]:
    """The pointwise op of a node and its operands (fx nodes or numbers), bound by torch's
    schema; an optional operand left None picks the op without it (clamp → clamp_min)."""
    entry, form = BY_ATEN[op_name(node)]
    schema = op_overload(node)._schema
    given = {arg.name: value for arg, value in zip(schema.arguments, node.args, strict=False)}
    given |= node.kwargs
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    operands: list[object] = [given.get(name, defaults.get(name)) for name in form.args]
    for index, name in entry.partial:
        if operands[index] is None:
            entry = POINTWISE[name]
            operands = operands[:index] + operands[index + 1 :]
            break
    return entry, operands


def _example(arg: object) -> object:
    """An operand's example: a tensor, or a number (a size the graph computed, specialised)."""
    if not isinstance(arg, fx.Node):
        return arg
    value = arg.meta["val"]
    return value if isinstance(value, torch.Tensor) else int(value)


def _values_dtype(entry: PointwiseOp, operands: list[object], out: torch.Tensor) -> torch.dtype:
    """The dtype the op's values compute in: torch's promotion of them by the op's kind
    (a comparison's by the default kind: its values meet in their common dtype)."""
    values = [_example(o) for role, o in zip(entry.roles, operands, strict=True) if role == VALUE]
    if not values:
        return torch.bool
    kind = Promotion.DEFAULT if entry.gives == Gives.BOOL else entry.promotion
    _, promoted = elementwise_dtypes(
        *values, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND[kind.value]
    )
    return promoted


def _pointwise_refusal(node: fx.Node) -> str | None:
    entry, operands = _operands(node)
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor):
        return f"{op_name(node)} does not give a tensor"
    if any(o is None for o in operands):
        return f"{op_name(node)} without all of its operands is not supported"
    examples = [out, *(_example(o) for o in operands)]
    tensors = [t for t in examples if isinstance(t, torch.Tensor)]
    unstored = [t.dtype for t in tensors if _storage_name(t.dtype) is None]
    if unstored:
        return f"{op_name(node)} of {unstored[0]} is not supported"
    common = _values_dtype(entry, operands, out)
    if entry.gives == Gives.SAME and common != out.dtype:
        return f"{op_name(node)}: torch gives {out.dtype}, its promotion {common}"
    if not entry.takes(_storage_name(common) or ""):
        return f"{op_name(node)} of {common} is not supported"
    return None


@ATEN.handles_class(
    lambda node: op_name(node) in BY_ATEN, members=list(BY_ATEN), accepts=_pointwise_refusal
)
def _pointwise(self: FunctionBuilder, node: fx.Node) -> View:
    """An op of the pointwise table: its values promoted to one dtype, its conditions
    bools, its parameters constants; `alpha` (add, sub) scales its operand first."""
    entry, operands = _operands(node)
    out = node.meta["val"]
    shape = list(out.shape)
    common = _element(_values_dtype(entry, operands, out))
    unexpand = self.unexpanded_operands(operands, shape)
    args = [
        self.tensor_or_scalar(arg, i8 if role == CONDITION else common, shape, unexpand)
        for role, arg in zip(entry.roles, operands, strict=True)
    ]
    _, form = BY_ATEN[op_name(node)]
    alpha = kwarg_number(node, "alpha", 1)
    if form.alpha is not None and alpha != 1:
        scaled = form.args.index(form.alpha)
        factor = self.insert(graph.ConstantOp(alpha, common))
        args[scaled] = self.insert(
            graph.elementwise("mul", [args[scaled], factor], args[scaled].type)
        )
    return self.result(self.insert(graph.elementwise(entry.name, args, self.type_of(out))), out)


def _fma_refusal(node: fx.Node) -> str | None:
    out = node.meta["val"]
    tensors = [e for e in map(_example, node.args) if isinstance(e, torch.Tensor)]
    if dtypes.is_float(_storage_name(out.dtype)) and all(t.dtype == out.dtype for t in tensors):
        return None
    return f"fma of {[t.dtype for t in tensors]} giving {out.dtype} is not supported"


@ATEN.handles("prims.fma.default", accepts=_fma_refusal)
def _fma(self: FunctionBuilder, node: fx.Node) -> View:
    """Inductor's fused multiply-add (dynamo's form of Adam's lerp): a · b + c, one chain
    the elementwise kernel fuses."""
    out = node.meta["val"]
    typ = self.type_of(out)
    a, b, c = (self.tensor_or_scalar(arg, typ.element_type, list(out.shape)) for arg in node.args)
    product = self.insert(graph.elementwise("mul", [a, b], typ))
    return self.result(self.insert(graph.elementwise("add", [product, c], typ)), out)


def _dropout_refusal(node: fx.Node) -> str | None:
    x, p = arg_example(node, 0), node.args[1]
    if not dtypes.is_float(_storage_name(x.dtype)):
        return f"dropout of {x.dtype} is not supported"
    if not isinstance(p, (int, float)) or not 0 <= p < 1:
        return f"dropout with p={p!r} is not supported"
    if not node.args[2]:  # F.dropout outside training calls no native_dropout
        return "native_dropout outside training is not supported"
    return None


@ATEN.handles("aten.native_dropout.default", accepts=_dropout_refusal)
def _native_dropout(self: FunctionBuilder, node: fx.Node) -> list:
    """Dropout in training: x · mask / (1 - p) and the mask, whose random numbers torch
    draws for each call as eager draws them (FunctionBuilder.random_mask)."""
    out, kept = node.meta["val"]
    p = arg_float(node, 1)
    x = self.operand(node.args[0])
    mask = self.random_mask(f"{node.name}.mask", out, 1.0 - p)
    dropped = self.insert(graph.elementwise("mul", [x, mask], x.type))
    scale = self.insert(graph.ConstantOp(1.0 / (1.0 - p), x.type.element_type))
    y = self.insert(graph.elementwise("mul", [dropped, scale], x.type))
    as_bool = self.insert(graph.elementwise("convert", [mask], TensorType(i8, x.type.get_shape())))
    return [self.result(y, out), self.result(as_bool, kept)]


def _glu_refusal(node: fx.Node) -> str | None:
    if dtypes.is_float(_storage_name(node.meta["val"].dtype)):
        return None
    return f"glu of {node.meta['val'].dtype} is not supported"


@ATEN.handles("aten.glu.default", accepts=_glu_refusal)
def _glu(self: FunctionBuilder, node: fx.Node) -> View:
    """glu(x, dim): the first half of x along dim times the sigmoid of the second."""
    x = self.view_of(node.args[0])
    dim = arg_int(node, 1, "dim", -1)
    half = x.meta.shape[dim] // 2
    a = self.contiguous(View(x.base, x.meta.narrow(dim, 0, half)))
    b = self.contiguous(View(x.base, x.meta.narrow(dim, half, half)))
    gate = self.insert(graph.elementwise("sigmoid", [b], b.type))
    return self.result(self.insert(graph.elementwise("mul", [a, gate], a.type)), node.meta["val"])


def _gelu_refusal(node: fx.Node) -> str | None:
    if dtypes.is_float(_storage_name(node.meta["val"].dtype)):
        return None
    return f"gelu of {node.meta['val'].dtype} is not supported"


@ATEN.handles("aten.gelu.default", accepts=_gelu_refusal)
def _gelu(self: FunctionBuilder, node: fx.Node) -> View:
    approximate = arg_str(node, 1, "approximate", "none")
    x = self.operand(node.args[0])
    return self.result(self.insert(graph.GeluOp(x, approximate)), node.meta["val"])


def _triangle_refusal(node: fx.Node) -> str | None:
    value = arg_example(node, 0)
    if not dtypes.is_float(dtypes.torch_dtype_name(value.dtype)):
        return f"{op_name(node)} of {value.dtype} values is not supported"
    return None


TRIANGLES = {"aten.triu.default": graph.Triangle.UPPER, "aten.tril.default": graph.Triangle.LOWER}


@ATEN.handles(*TRIANGLES, accepts=_nonempty(_triangle_refusal))
def _triangle(self: FunctionBuilder, node: fx.Node) -> View:
    x = self.operand(node.args[0])
    diagonal = arg_int(node, 1, "diagonal", 0)
    op = graph.TriangleOp(x, TRIANGLES[op_name(node)], diagonal)
    return self.result(self.insert(op), node.meta["val"])
