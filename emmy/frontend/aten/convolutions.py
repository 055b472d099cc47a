"""Convolutions, 1-D and 2-D, transposed or not, an inference batch norm that alone reads one folded into its
weights."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from emmy.base.errors import ConversionError
from emmy.dialects import graph
from emmy.frontend.aten.arguments import arg_example, arg_float, arg_node
from emmy.frontend.aten.common import ATEN, _arguments, _shaped_as, _value
from emmy.frontend.aten.norms import BATCH_NORMS, _batch_norm_refusal
from emmy.frontend.aten.products import _operands_refusal
from emmy.frontend.function_builder import UNKNOWN, FunctionBuilder, View
from emmy.frontend.op_registry import op_name

#: the convolution ops, by name: their arguments in order
_CONV_ARGUMENTS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
CONVOLUTIONS = {
    **{
        f"aten.conv{d}d.{overload}": _CONV_ARGUMENTS
        for d in (1, 2)
        for overload in ("default", "padding")
    },
    # torch names conv_transpose1d's one overload `default`, conv_transpose2d's `input`
    **{
        name: (*_CONV_ARGUMENTS[:5], "output_padding", "groups", "dilation")
        for name in ("aten.conv_transpose1d.default", "aten.conv_transpose2d.input")
    },
    "aten.convolution.default": (*_CONV_ARGUMENTS[:6], "transposed", "output_padding", "groups"),
}
_CONV_DEFAULTS = {
    "bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0,
}  # fmt: skip


def _transposed(node: fx.Node) -> bool:
    """Whether the convolution is a transposed one (ConvTranspose's)."""
    if op_name(node) == "aten.convolution.default":
        return bool(_conv_argument(node, "transposed"))
    return op_name(node).startswith("aten.conv_transpose")


def _conv_argument(node: fx.Node, name: str) -> object:
    """An argument of a convolution by name, at its default where torch.export dropped it."""
    index = CONVOLUTIONS[op_name(node)].index(name)
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, _CONV_DEFAULTS[name])


def _conv_ints(node: fx.Node, name: str) -> list[int]:
    """A convolution's stride, padding, dilation (an int, or one per spatial dim) or groups
    (an int), as a list."""
    value = _conv_argument(node, name)
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    ints = [int(item) for item in items if isinstance(item, (int, torch.SymInt))]
    if len(ints) != len(items):
        raise ConversionError(f"{op_name(node)} takes ints as {name}, not {value!r}")
    return ints


def _per_spatial_dim(node: fx.Node, name: str, spatial: int) -> list[int]:
    """A convolution's stride, padding or dilation as one value per spatial dim."""
    values = _conv_ints(node, name)
    values = values * spatial if len(values) == 1 else values
    return values


def _conv_padding(node: fx.Node, weight: torch.Tensor) -> list[int] | None:
    """The zero padding per spatial dim; "same" as the symmetric padding it is for odd
    dilated filter sizes (None where torch pads one side more)."""
    spatial = weight.dim() - 2
    padding = _conv_argument(node, "padding")
    if padding == "valid":
        return [0] * spatial
    if padding != "same":
        return _per_spatial_dim(node, "padding", spatial)
    dilation = _per_spatial_dim(node, "dilation", spatial)
    total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:], strict=True)]
    if any(t % 2 for t in total):
        return None
    return [t // 2 for t in total]


def _conv_refusal(node: fx.Node) -> str | None:
    x, weight = arg_example(node, 0), arg_example(node, 1)
    if weight.dim() not in (3, 4):
        return f"a convolution of {weight.dim() - 2} spatial dims is not supported"
    if x.dim() not in (weight.dim() - 1, weight.dim()):
        return f"a convolution of an input of shape {list(x.shape)} is not supported"
    if _conv_padding(node, weight) is None:
        return "a 'same' convolution padded more on one side is not supported"
    return _operands_refusal(x, weight)


def _as_2d(
    self: FunctionBuilder, value: SSAValue[TensorType], shape: Sequence[int]
) -> SSAValue[TensorType]:
    """A 1-D convolution's operand [..., length] as a 2-D one [..., 1, length]."""
    typ = TensorType(value.type.element_type, list(shape))
    return value if value.type == typ else self.insert(graph.ReshapeOp(value, typ))


@ATEN.handles(*CONVOLUTIONS, accepts=_conv_refusal)
def _convolution(self: FunctionBuilder, node: fx.Node) -> View:
    """A convolution, or a transposed one, (1-D as 2-D of height 1; an unbatched input as a
    batch of one); an inference batch norm that alone reads a convolution, of constant
    statistics, is folded into its constant weights and bias."""
    x_arg, w_arg = arg_node(node, 0), arg_node(node, 1)
    bias_arg = _conv_argument(node, "bias")
    weight = w_arg.meta["val"]
    spatial = weight.dim() - 2
    example = _value(node)
    unit = [1] if spatial == 1 else []
    stride = unit + _per_spatial_dim(node, "stride", spatial)
    same_padding = _conv_padding(node, weight)
    assert same_padding is not None, "_conv_refusal refuses a padding of one side more"
    padding = [0] * len(unit) + same_padding
    dilation = unit + _per_spatial_dim(node, "dilation", spatial)
    (groups,) = _conv_ints(node, "groups")
    x_shape = list(x_arg.meta["val"].shape)
    batched = x_shape if len(x_shape) == weight.dim() else [1, *x_shape]
    x = _as_2d(self, self.operand(x_arg), [*batched[:2], *unit, *batched[2:]])
    w_shape = [*weight.shape[:2], *unit, *weight.shape[2:]]
    transposed = _transposed(node)
    folded = None if transposed else _folded_batch_norm(self, node)
    if folded is not None:
        w = self.constant_arg(f"{node.name}.folded_weight", folded[0].reshape(w_shape))
        bias = self.constant_arg(f"{node.name}.folded_bias", folded[1])
    else:
        w = _as_2d(self, self.operand(w_arg), w_shape)
        bias = self.operand(bias_arg) if bias_arg is not None else None
    out_shape = [*example.shape] if example.dim() == weight.dim() else [1, *example.shape]
    out_2d = [*out_shape[:2], *unit, *out_shape[2:]]
    typ = TensorType(x.type.element_type, out_2d)
    convolution = graph.ConvTransposeOp if transposed else graph.ConvOp
    value = self.insert(convolution(x, w, bias, typ, stride, padding, dilation, groups))
    result = _shaped_as(self, value, example)
    if folded is not None:
        (norm,) = node.users
        self.folded_norms[norm] = result
    return result


def _folded_batch_norm(self: FunctionBuilder, conv: fx.Node) -> tuple[torch.Tensor, ...] | None:
    """The weight and bias of `conv` with the inference batch norm that alone reads it
    folded in (w · scale per filter, (b - mean) · scale + shift), where the weight, the
    bias and the norm's statistics and parameters are constants; None otherwise."""
    if len(conv.users) != 1:
        return None
    (norm,) = conv.users
    if op_name(norm) not in BATCH_NORMS or _batch_norm_refusal(norm) or norm.args[0] is not conv:
        return None
    bias = _conv_argument(conv, "bias")

    def constant(arg: object) -> object:
        """The tensor `arg` is at compile time (None for None), or UNKNOWN."""
        if arg is None:
            return None
        return self.known(self.values.get(arg, UNKNOWN)) if isinstance(arg, fx.Node) else UNKNOWN

    known = [constant(arg) for arg in (conv.args[1], bias, *norm.args[1:5])]
    if any(value is UNKNOWN or isinstance(value, list) for value in known):
        return None
    weight, bias, gamma, beta, mean, var = (
        value.double() if isinstance(value, torch.Tensor) else None for value in known
    )
    if weight is None or mean is None or var is None:
        return None
    _, eps_index = BATCH_NORMS[op_name(norm)]
    scale = torch.rsqrt(var + arg_float(norm, eps_index))
    scale = scale * gamma if gamma is not None else scale
    shift = beta if beta is not None else torch.zeros_like(scale)
    bias = bias if bias is not None else torch.zeros_like(scale)
    dtype = arg_example(conv, 1).dtype
    folded_weight = weight * scale.reshape(-1, *[1] * (weight.dim() - 1))
    return folded_weight.to(dtype), ((bias - mean) * scale + shift).to(dtype)


@ATEN.handles("emmy.conv2d_weight_gradient.default")
def _weight_gradient(self: FunctionBuilder, node: fx.Node) -> View:
    """A 2-D convolution's weight gradient (emmy.frontend.decompositions)."""
    bound = _arguments(node)
    grad, input = self.operand(bound["grad"]), self.operand(bound["input"])
    stride, padding, dilation = (list(bound[name]) for name in ("stride", "padding", "dilation"))
    out = node.meta["val"]
    op = graph.ConvWeightGradientOp(
        grad, input, self.type_of(out), stride, padding, dilation, int(bound["groups"])
    )
    return self.result(self.insert(op), out)
