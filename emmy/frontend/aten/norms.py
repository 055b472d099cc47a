"""Norms: layer_norm and rms_norm over trailing dims, inference batch_norm and group_norm
per channel."""

from __future__ import annotations

import operator

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from emmy.dialects import graph
from emmy.frontend.aten.arguments import (
    arg_example,
    arg_float,
    arg_int,
    arg_list,
    arg_optional_float,
    arg_optional_node,
)
from emmy.frontend.aten.common import ATEN, _shaped_as, _value
from emmy.frontend.function_builder import Constant, FunctionBuilder, View, _numel
from emmy.frontend.op_registry import Refusal, op_name
from emmy.frontend.rms_norms import default_eps


def _norm_refusal(norm: str) -> Refusal:
    """Refuses a norm over no dims (its normalized_shape, args[1]) or of an empty tensor."""

    def refusal(node: fx.Node) -> str | None:
        x, dims = arg_example(node, 0), arg_list(node, 1)
        if not dims or x.numel() == 0:
            return f"{norm} of {list(x.shape)} over {dims} is not supported"
        return None

    return refusal


def _norm_rows(self: FunctionBuilder, x_arg: object, dims: int) -> SSAValue[TensorType]:
    """x with its `dims` normalised trailing dims merged into one (no element moves)."""
    x = self.operand(x_arg)
    shape = list(x.type.get_shape())
    rows = TensorType(x.type.element_type, [*shape[: len(shape) - dims], _numel(shape[-dims:])])
    return x if x.type == rows else self.insert(graph.ReshapeOp(x, rows))


def _norm_param(
    self: FunctionBuilder, node: fx.Node, arg: object, size: int, like: torch.Tensor, fill: float
) -> SSAValue[TensorType]:
    """A norm's weight or bias flattened to [size]; an absent one is ones or zeros."""
    if arg is None:
        return _filled(self, node, size, like, fill)
    param = self.operand(arg)
    flat = TensorType(param.type.element_type, [size])
    return param if param.type == flat else self.insert(graph.ReshapeOp(param, flat))


@ATEN.handles("aten.layer_norm.default", accepts=_norm_refusal("layer_norm"))
def _layer_norm(self: FunctionBuilder, node: fx.Node) -> View:
    op = _layer_norm_op(self, node, statistics=False)
    return _shaped_as(self, self.insert(op), _value(node))


def _layer_norm_op(self: FunctionBuilder, node: fx.Node, statistics: bool) -> graph.LayerNormOp:
    x_arg, shape = node.args[0], arg_list(node, 1)
    weight, bias = arg_optional_node(node, 2), arg_optional_node(node, 3)
    eps = arg_float(node, 4, default=1e-5)
    x = _norm_rows(self, x_arg, len(shape))
    example = _value(node)
    size = x.type.get_shape()[-1]
    w = _norm_param(self, node, weight, size, example, 1.0)
    b = _norm_param(self, node, bias, size, example, 0.0)
    return graph.LayerNormOp(x, w, b, eps, statistics)


@ATEN.handles("aten.native_layer_norm.default", accepts=_norm_refusal("layer_norm"))
def _native_layer_norm(self: FunctionBuilder, node: fx.Node) -> list:
    """LayerNorm's output, and the mean and rstd a training step's backward reads (None
    where nothing reads them, as in inference), written by the same kernel."""
    if not _used_results(node) & {1, 2}:
        return [_layer_norm(self, node), None, None]
    op = _layer_norm_op(self, node, statistics=True)
    y = _shaped_as(self, self.insert(op), _value(node))
    examples = node.meta["val"][1:]
    statistics = [SSAValue.get(s, type=TensorType) for s in op.statistics]
    return [y, *(_in_dtype_of(self, s, e) for s, e in zip(statistics, examples, strict=True))]


def _in_dtype_of(self: FunctionBuilder, value: SSAValue[TensorType], example: torch.Tensor) -> View:
    """`value` in the example's dtype and shape."""
    element = self.type_of(example).element_type
    if value.type.element_type != element:
        converted = TensorType(element, value.type.get_shape())
        value = self.insert(graph.elementwise("convert", [value], converted))
    return _shaped_as(self, value, example)


@ATEN.handles("emmy.layer_norm_backward.default")
def _layer_norm_backward(self: FunctionBuilder, node: fx.Node) -> View:
    """A LayerNorm's input gradient over rows (emmy.frontend.decompositions)."""
    grad, x, mean, rstd, weight = (self.operand(arg) for arg in node.args)
    value = self.insert(graph.LayerNormBackwardOp(grad, x, mean, rstd, weight))
    return self.result(value, _value(node))


@ATEN.handles("emmy.batch_norm_stats.default", "emmy.batch_norm_backward_sums.default")
def _batch_norm_stats(self: FunctionBuilder, node: fx.Node) -> View:
    """A training BatchNorm's per-channel sums, the forward's or the backward's
    (emmy.frontend.decompositions)."""
    if len(node.args) == 1:
        op = graph.BatchNormStatsOp(self.operand(node.args[0]))
    else:
        grad, input, mean = (self.operand(arg) for arg in node.args)
        op = graph.BatchNormStatsOp(input, grad, mean)
    return self.result(self.insert(op), _value(node))


def _used_results(node: fx.Node) -> set[int]:
    """The indices of a multi-result node's results that some node reads."""
    return {arg_int(user, 1) for user in node.users if user.target is operator.getitem}


def _statistics_of_rows(
    self: FunctionBuilder, node: fx.Node, x: SSAValue[TensorType], eps: float
) -> tuple[View, View]:
    """The mean and the rstd of each row of x [rows, cols], in the dtype and the shape of
    the node's second and third results."""
    mean_example, rstd_example = node.meta["val"][1], node.meta["val"][2]
    stats = self.type_of(mean_example).element_type
    if x.type.element_type != stats:
        x = self.insert(graph.elementwise("convert", [x], TensorType(stats, x.type.get_shape())))
    column = TensorType(stats, [*x.type.get_shape()[:-1], 1])
    mean = self.insert(graph.ReduceOp(x, "mean", column))
    variance = self.insert(graph.ReduceOp(x, "var", column, correction=0))
    shifted = self.insert(graph.elementwise("add", [variance, self.scalar(eps, variance)], column))
    rstd = self.insert(graph.elementwise("rsqrt", [shifted], column))
    return _shaped_as(self, mean, mean_example), _shaped_as(self, rstd, rstd_example)


@ATEN.handles("aten.rms_norm.default", accepts=_norm_refusal("rms_norm"))
def _rms_norm(self: FunctionBuilder, node: fx.Node) -> View:
    eps = arg_optional_float(node, 3)
    if eps is None:
        eps = default_eps(_value(node).dtype)
    dims = len(arg_list(node, 1))
    return _rms_normed(self, node, dims, arg_optional_node(node, 2), eps)


@ATEN.handles("emmy.rms_norm.default")
def _emmy_rms_norm(self: FunctionBuilder, node: fx.Node) -> View:
    """An RMSNorm over the last dim that emmy.frontend.rms_norms found in a model."""
    return _rms_normed(self, node, 1, node.args[1], arg_float(node, 2))


def _rms_normed(
    self: FunctionBuilder, node: fx.Node, dims: int, weight: object, eps: float
) -> View:
    """The node's x (args[0]) normalised over its `dims` trailing dims, by `weight`."""
    example = _value(node)
    x = _norm_rows(self, node.args[0], dims)
    w = _norm_param(self, node, weight, x.type.get_shape()[-1], example, 1.0)
    return _shaped_as(self, self.insert(graph.RmsNormOp(x, w, eps)), example)


@ATEN.handles("emmy.rms_norm_backward.default")
def _rms_norm_backward(self: FunctionBuilder, node: fx.Node) -> list:
    """An RMSNorm's input gradient over rows, and each row's rstd (emmy.frontend.ops)."""
    grad, x, weight = (self.operand(arg) for arg in node.args[:3])
    op = graph.RmsNormBackwardOp(grad, x, weight, arg_float(node, 3))
    dx, rstd = self.insert(op), SSAValue.get(op.rstd, type=TensorType)
    dx_example, rstd_example = node.meta["val"]
    return [self.result(dx, dx_example), self.result(rstd, rstd_example)]


@ATEN.handles("aten._fused_rms_norm.default", accepts=_norm_refusal("rms_norm"))
def _fused_rms_norm(self: FunctionBuilder, node: fx.Node) -> list:
    """RMSNorm's output (what rms_norm is below autograd); its saved rstd has no user."""
    return [_rms_norm(self, node), None]


def _filled(
    self: FunctionBuilder, node: fx.Node, size: int, like: torch.Tensor, fill: float
) -> SSAValue[TensorType]:
    """A norm's absent weight (ones) or bias (zeros), as a constant."""
    tensor = torch.full((size,), fill, dtype=like.dtype)
    return self.constant_arg(f"{node.name}.{'weight' if fill else 'bias'}", tensor)


#: inference batch norms: (the index of `training` in the arguments or None, of eps)
BATCH_NORMS = {
    "aten.batch_norm.default": (5, 7),
    "aten.native_batch_norm.default": (5, 7),
    "aten._native_batch_norm_legit_no_training.default": (None, 6),
}


def _batch_norm_refusal(node: fx.Node) -> str | None:
    training, _ = BATCH_NORMS[op_name(node)]
    x = arg_example(node, 0)
    if training is not None and node.args[training]:
        return "batch_norm in training mode (batch statistics) is not supported"
    if x.dim() < 2 or x.numel() == 0 or not x.dtype.is_floating_point:
        return f"batch_norm of {x.dtype}{list(x.shape)} is not supported"
    for arg in node.args[1:5]:
        if arg is not None and not (
            isinstance(arg, fx.Node) and isinstance(arg.meta.get("val"), torch.Tensor)
        ):
            return "batch_norm with a parameter that is not a tensor is not supported"
    return None


@ATEN.handles(*BATCH_NORMS, accepts=_batch_norm_refusal)
def _batch_norm(self: FunctionBuilder, node: fx.Node) -> object:
    """(x - mean) · rsqrt(var + eps) · w + b with the running statistics, as x · scale +
    shift per channel (dim 1), folded at compile time from the weights: x is read as rows
    [batch · channels, the rest], the scale and shift as a column of one value per row."""
    folded = self.folded_norms.get(node)
    if folded is not None:  # into the convolution before it
        return [folded, None, None] if isinstance(node.meta["val"], (list, tuple)) else folded
    _, eps_index = BATCH_NORMS[op_name(node)]
    x_arg, weight, bias, mean, var = node.args[:5]
    eps = arg_float(node, eps_index)
    stats = [self.value_of(a) if a is not None else None for a in (weight, bias, mean, var)]
    constants = [s for s in stats if s is None or isinstance(s, Constant)]
    if len(constants) != len(stats):
        raise self.error("batch_norm with statistics or parameters that are not weights")
    w, b, m, v = (s.tensor.double() if s is not None else None for s in constants)
    channels = int(arg_example(node, 0).shape[1])
    scale = torch.rsqrt(v + eps) if v is not None else torch.ones(channels, dtype=torch.float64)
    scale = scale * w if w is not None else scale
    shift = -m * scale if m is not None else torch.zeros(channels, dtype=torch.float64)
    shift = shift + b if b is not None else shift
    example = _value(node)
    x = self.operand(x_arg)
    shape = list(x.type.get_shape())
    rows = TensorType(x.type.element_type, [shape[0] * channels, _numel(shape[2:])])
    x = self.insert(graph.ReshapeOp(x, rows))
    columns = [
        self.constant_arg(
            f"{node.name}.{name}", t.repeat(shape[0]).reshape(-1, 1).to(example.dtype)
        )
        for name, t in (("scale", scale), ("shift", shift))
    ]
    y = self.insert(graph.elementwise("mul", [x, columns[0]], rows))
    y = _shaped_as(self, self.insert(graph.elementwise("add", [y, columns[1]], rows)), example)
    return [y, None, None] if isinstance(node.meta["val"], (list, tuple)) else y


#: group norms: the index of (weight, bias, the group count, eps) in their arguments
GROUP_NORMS = {
    "aten.group_norm.default": (2, 3, 1, 4),
    "aten.native_group_norm.default": (1, 2, 6, 7),
}


def _group_norm_refusal(node: fx.Node) -> str | None:
    x = arg_example(node, 0)
    groups = arg_int(node, GROUP_NORMS[op_name(node)][2])
    if x.dim() < 2 or x.numel() == 0 or not x.dtype.is_floating_point:
        return f"group_norm of {x.dtype}{list(x.shape)} is not supported"
    if x.shape[1] % groups:
        return f"group_norm of {x.shape[1]} channels in {groups} groups"
    return None


def _channel_column(
    self: FunctionBuilder, node: fx.Node, arg: fx.Node, batch: int, name: str
) -> SSAValue[TensorType]:
    """A per-channel parameter [C] as a column of one value per row [batch · C, 1] (a
    weight's folded at compile time, another's broadcast by a copy)."""
    value = self.values[arg]
    channels = int(arg.meta["val"].shape[0])
    dtype = _value(node).dtype
    if isinstance(value, Constant):
        column = value.tensor.detach().repeat(batch).reshape(-1, 1).to(dtype)
        return self.constant_arg(f"{node.name}.{name}", column)
    view = self.view(value)
    expanded = view.meta.reshape(1, channels, 1).expand(batch, channels, 1)
    copy = self.contiguous(View(view.base, expanded))
    typ = TensorType(copy.type.element_type, [batch * channels, 1])
    return self.insert(graph.ReshapeOp(copy, typ))


@ATEN.handles(*GROUP_NORMS, accepts=_group_norm_refusal)
def _group_norm(self: FunctionBuilder, node: fx.Node) -> object:
    """GroupNorm: the rows [N · G, C / G · the rest] normalised (a layer norm without
    affine), then the per-channel weight and bias over the rows [N · C, the rest] as
    columns, as batch_norm's; and each group's mean and rstd where a training step's
    backward reads them."""
    weight_at, bias_at, groups_at, eps_at = GROUP_NORMS[op_name(node)]
    weight, bias = arg_optional_node(node, weight_at), arg_optional_node(node, bias_at)
    groups, eps = arg_int(node, groups_at), arg_optional_float(node, eps_at)
    eps = 1e-5 if eps is None else eps
    example = _value(node)
    x = self.operand(node.args[0])
    shape = list(x.type.get_shape())
    batch, channels, rest = shape[0], shape[1], _numel(shape[2:])
    element = x.type.element_type
    rows = TensorType(element, [batch * groups, channels // groups * rest])
    cols = rows.get_shape()[1]
    x = self.insert(graph.ReshapeOp(x, rows))
    ones, zeros = (_filled(self, node, cols, example, fill) for fill in (1.0, 0.0))
    y = self.insert(graph.LayerNormOp(x, ones, zeros, eps))
    if weight is not None or bias is not None:
        planes = TensorType(element, [batch * channels, rest])
        y = self.insert(graph.ReshapeOp(y, planes))
        if weight is not None:
            column = _channel_column(self, node, weight, batch, "scale")
            y = self.insert(graph.elementwise("mul", [y, column], planes))
        if bias is not None:
            y = self.insert(
                graph.elementwise(
                    "add", [y, _channel_column(self, node, bias, batch, "shift")], planes
                )
            )
    y = _shaped_as(self, y, example)
    if not isinstance(node.meta["val"], (list, tuple)):
        return y
    if not _used_results(node) & {1, 2}:
        return [y, None, None]
    # a training step's backward reads each group's mean and rstd [N, G]
    return [y, *_statistics_of_rows(self, node, x, eps)]
