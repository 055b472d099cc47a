"""Pooling of the trailing spatial dims (max, with its indices, and average; windowed and
adaptive) and upsampling (nearest and bilinear) of the last two."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType

from emmy.dialects import graph
from emmy.frontend.aten.arguments import arg_example
from emmy.frontend.aten.common import ATEN, _arguments, _shaped_as, _value
from emmy.frontend.function_builder import FunctionBuilder, View, _numel
from emmy.frontend.op_registry import op_name

#: windowed poolings: (the graph kind, the pooled trailing dims)
POOLS = {
    "aten.max_pool2d.default": (graph.Pooling.MAX, 2),
    "aten.max_pool2d_with_indices.default": (graph.Pooling.MAX, 2),
    "aten.max_pool1d.default": (graph.Pooling.MAX, 1),
    "aten.max_pool1d_with_indices.default": (graph.Pooling.MAX, 1),
    "aten.avg_pool2d.default": (graph.Pooling.AVG, 2),
    "aten.avg_pool1d.default": (graph.Pooling.AVG, 1),
}
#: adaptive poolings: (the graph kind, the pooled trailing dims)
ADAPTIVE_POOLS = {
    "aten.adaptive_avg_pool2d.default": (graph.Pooling.AVG, 2),
    "aten._adaptive_avg_pool2d.default": (graph.Pooling.AVG, 2),
    "aten.adaptive_avg_pool1d.default": (graph.Pooling.AVG, 1),
    "aten.adaptive_max_pool2d.default": (graph.Pooling.MAX, 2),
    "aten.adaptive_max_pool1d.default": (graph.Pooling.MAX, 1),
}
#: upsamplings: their graph mode
RESIZES = {
    "aten.upsample_nearest2d.vec": graph.Resize.NEAREST,
    "aten.upsample_nearest2d.default": graph.Resize.NEAREST,
    "aten.upsample_bilinear2d.vec": graph.Resize.BILINEAR,
    "aten.upsample_bilinear2d.default": graph.Resize.BILINEAR,
}


def _spatial_refusal(node: fx.Node) -> str | None:
    """Refuses a pooling or an upsampling of an empty or non-float tensor, or of fewer dims
    than its spatial ones and one more."""
    name = op_name(node)
    dims = (POOLS | ADAPTIVE_POOLS)[name][1] if name not in RESIZES else 2
    x = arg_example(node, 0)
    if x.dim() < dims + 1 or x.numel() == 0 or _value(node).numel() == 0:
        return f"{name} of {list(x.shape)} is not supported"
    if not x.dtype.is_floating_point:
        return f"{name} of {x.dtype} is not supported"
    return None


def _pair(value: int | Sequence[int], dims: int, height: int = 1) -> tuple[int, int]:
    """A pooling argument (an int, or a list of one per pooled dim) along (h, w); a 1-D
    pooling's h is `height` (its planes' height is 1: a window, stride or dilation of 1, a
    padding of 0)."""
    values = [int(value)] * dims if isinstance(value, int) else [int(v) for v in value]
    values = values * dims if len(values) == 1 else values
    return (values[0], values[1]) if dims == 2 else (height, values[0])


def _read_indices(node: fx.Node) -> bool:
    """Whether a user reads the indices (output 1) of a pooling that gives them."""
    return any(user.target is not operator.getitem or user.args[1] == 1 for user in node.users)


def _pooled(
    self: FunctionBuilder,
    node: fx.Node,
    kind: graph.Pooling,
    dims: int,
    example: torch.Tensor,
    **fields,
) -> View:
    """graph.pool of the node's input (a 1-D pooling's as planes of height 1) to `example`."""
    x = self.operand(node.args[0])
    shape = list(x.type.get_shape())
    out = list(example.shape)
    if dims == 1:
        shape, out = [*shape[:-1], 1, shape[-1]], [*out[:-1], 1, out[-1]]
        x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, shape)))
    element = self.type_of(example).element_type  # the indices' i64, or the input's
    pooled = self.insert(graph.PoolOp(x, kind, TensorType(element, out), **fields))
    return _shaped_as(self, pooled, example)


@ATEN.handles(*POOLS, accepts=_spatial_refusal)
def _pool(self: FunctionBuilder, node: fx.Node) -> object:
    """Max pooling (and its indices where a user reads them) and average pooling: kernel,
    stride (the kernel's where empty), padding, dilation; ceil_mode in the output's size."""
    kind, dims = POOLS[op_name(node)]
    bound = _arguments(node)
    window = _pair(bound["kernel_size"], dims)
    stride = _pair(bound["stride"], dims) if bound["stride"] else window
    fields = {"window": window, "stride": stride, "padding": _pair(bound["padding"], dims, 0)}
    if kind == graph.Pooling.AVG:
        divisor = bound.get("divisor_override")
        fields |= {"count_pad": bool(bound["count_include_pad"]), "divisor": divisor}
        return _pooled(self, node, kind, dims, _value(node), **fields)
    fields["dilation"] = _pair(bound["dilation"], dims)
    values = _pooled(self, node, kind, dims, _value(node), **fields)
    if not isinstance(node.meta["val"], (list, tuple)):
        return values
    index = node.meta["val"][1]
    argmax = graph.Pooling.ARGMAX
    indices = _pooled(self, node, argmax, dims, index, **fields) if _read_indices(node) else None
    return [values, indices]


@ATEN.handles("emmy.max_pool2d_backward.default")
def _max_pool_backward(self: FunctionBuilder, node: fx.Node) -> View:
    """Max pooling's input gradient, by the pooling's indices (an empty window: adaptive
    max pooling's; emmy.frontend.decompositions)."""
    bound = _arguments(node)
    grad, indices = self.operand(bound["grad"]), self.operand(bound["indices"])
    window, stride, padding, dilation = (
        list(bound[name]) for name in ("window", "stride", "padding", "dilation")
    )
    out = node.meta["val"]
    op = graph.PoolBackwardOp(
        grad, indices, self.type_of(out), window or None, stride, padding, dilation
    )
    return self.result(self.insert(op), out)


@ATEN.handles("emmy.avg_pool2d_backward.default")
def _avg_pool_backward(self: FunctionBuilder, node: fx.Node) -> View:
    """Average pooling's input gradient over its counts (an empty window: adaptive average
    pooling's, over its windows' sizes; emmy.frontend.decompositions)."""
    bound = _arguments(node)
    window, stride, padding = (list(bound[name]) for name in ("window", "stride", "padding"))
    out, grad = node.meta["val"], self.operand(bound["grad"])
    if not window:
        op = graph.PoolBackwardOp(grad, None, self.type_of(out), None)
        return self.result(self.insert(op), out)
    divisor = int(bound["divisor"]) or None
    op = graph.PoolBackwardOp(
        grad, None, self.type_of(out), window, stride, padding,
        count_pad=bool(bound["count_include_pad"]), divisor=divisor,
    )  # fmt: skip
    return self.result(self.insert(op), out)


@ATEN.handles(*ADAPTIVE_POOLS, accepts=_spatial_refusal)
def _adaptive_pool(self: FunctionBuilder, node: fx.Node) -> object:
    """Adaptive pooling: output i's window spans floor(i · n / out) to ceil((i + 1) · n /
    out); adaptive max pooling gives its indices too."""
    kind, dims = ADAPTIVE_POOLS[op_name(node)]
    example = _value(node)
    if kind == graph.Pooling.AVG and _numel(example.shape[-dims:]) == 1:
        # a global pool (every classifier head's) is a mean of rows, a block per plane, as
        # torch.compile's decomposition gives it
        x = self.operand(node.args[0])
        shape = list(x.type.get_shape())
        count = _numel(shape[:-dims])
        rows = TensorType(x.type.element_type, [count, _numel(shape[-dims:])])
        x = x if x.type == rows else self.insert(graph.ReshapeOp(x, rows))
        mean = graph.ReduceOp(x, "mean", TensorType(rows.element_type, [count, 1]))
        return _shaped_as(self, self.insert(mean), example)
    values = _pooled(self, node, kind, dims, example)
    if not isinstance(node.meta["val"], (list, tuple)):
        return values
    index = node.meta["val"][1]
    read = _read_indices(node)
    return [values, _pooled(self, node, graph.Pooling.ARGMAX, dims, index) if read else None]


def _resize_scales(node: fx.Node, output: torch.Tensor, input: torch.Tensor) -> tuple[float, float]:
    """The source step per dim torch's upsampling of `input` to `output` takes: the inverse
    of the caller's scale factor where given, else the input's size over the output's."""
    bound = _arguments(node)
    if "scale_factors" in bound:
        factors = bound["scale_factors"] or [None, None]
    else:
        factors = [bound.get("scales_h"), bound.get("scales_w")]
    sizes = zip(input.shape[-2:], output.shape[-2:], strict=True)
    height, width = (
        1.0 / factor if factor else n / o for factor, (n, o) in zip(factors, sizes, strict=True)
    )
    return height, width


@ATEN.handles(*RESIZES, accepts=_spatial_refusal)
def _resize(self: FunctionBuilder, node: fx.Node) -> View:
    """Nearest and bilinear upsampling of the last two dims, by output size or scale factor."""
    return _resized(self, node, graph.ResizeOp, RESIZES[op_name(node)], _value(node))


@ATEN.handles("emmy.upsample2d.default", "emmy.upsample2d_backward.default")
def _upsampling(self: FunctionBuilder, node: fx.Node) -> View:
    """emmy.frontend.interpolations' upsampling, or its input gradient."""
    mode = graph.Resize(str(_arguments(node)["mode"]))
    if node.target is torch.ops.emmy.upsample2d.default:
        return _resized(self, node, graph.ResizeOp, mode, _value(node))
    # the gradient's scales are its forward's: from the input [.., h, w] to dy [.., oh, ow]
    dx = _value(node)
    scales = _resize_scales(node, arg_example(node, 0), dx)
    op = graph.ResizeBackwardOp(
        self.operand(node.args[0]), mode, self.type_of(dx), scales, _corners(node)
    )
    return self.result(self.insert(op), dx)


def _resized(
    self: FunctionBuilder,
    node: fx.Node,
    op_class: type[graph.ResizeBase],
    mode: graph.Resize,
    example: torch.Tensor,
) -> View:
    x = self.operand(node.args[0])
    scales = _resize_scales(node, example, arg_example(node, 0))
    op = op_class(x, mode, self.type_of(example), scales, _corners(node))
    return self.result(self.insert(op), example)


def _corners(node: fx.Node) -> bool:
    return bool(_arguments(node).get("align_corners", False))
