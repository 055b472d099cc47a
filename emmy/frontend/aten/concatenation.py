"""Ops that join tensors along a dim, as graph.cat: cat and stack, a constant pad (the
fills cat on), and a slice or select scatter (the input's parts around the source)."""

from __future__ import annotations

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from emmy.base.errors import ConversionError
from emmy.dialects import graph
from emmy.families.cat import PARTS as CAT_PARTS
from emmy.frontend.aten.arguments import arg_given, arg_int, arg_ints, arg_nodes, arg_str
from emmy.frontend.aten.common import ATEN, _nonempty
from emmy.frontend.function_builder import FunctionBuilder, View
from emmy.frontend.op_registry import op_name


def _slice_scatter_refusal(node: fx.Node) -> str | None:
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    if step != 1:
        return f"slice_scatter with step {step} is not supported"
    return None


@ATEN.handles("aten.slice_scatter.default", accepts=_nonempty(_slice_scatter_refusal))
def _slice_scatter(self: FunctionBuilder, node: fx.Node) -> View:
    """The input with a slice along dim replaced by src: a cat of the input before the
    slice, src, and the input after it."""
    names = ["dim", "start", "end"]
    bound = {"dim": 0} | dict(zip(names, node.args[2:], strict=False)) | dict(node.kwargs)
    view, out = self.view_of(node.args[0]), node.meta["val"]
    dim = bound["dim"] % out.dim()
    size = out.shape[dim]
    start, end = slice(bound.get("start"), bound.get("end")).indices(size)[:2]
    return self.result(_spliced(self, view, dim, start, max(start, end), node.args[1]), out)


@ATEN.handles("aten.select_scatter.default", accepts=_nonempty())
def _select_scatter(self: FunctionBuilder, node: fx.Node) -> View:
    """The input with one index along dim replaced by src (without that dim)."""
    view, out = self.view_of(node.args[0]), node.meta["val"]
    dim = node.args[2] % out.dim()
    index = node.args[3] % out.shape[dim]
    src = self.view_of(node.args[1])
    src = View(src.base, src.meta.unsqueeze(dim))
    return self.result(_spliced(self, view, dim, index, index + 1, src), out)


def _spliced(
    self: FunctionBuilder, view: View, dim: int, start: int, end: int, src: object
) -> SSAValue[TensorType]:
    """`view` with its elements [start, end) along dim replaced by `src`'s (a View, or a
    tensor argument)."""
    size = view.meta.shape[dim]
    inserted = src if isinstance(src, View) else self.view_of(src)
    parts = [] if start == 0 else [View(view.base, view.meta.narrow(dim, 0, start))]
    parts.append(inserted)
    if end < size:
        parts.append(View(view.base, view.meta.narrow(dim, end, size - end)))
    return _cat_of(self, [self.contiguous(p) for p in parts if p.meta.numel()], dim)


def _cat_refusal(node: fx.Node) -> str | None:
    out = node.meta["val"]
    mixed = {arg.meta["val"].dtype for arg in arg_nodes(node, 0)} - {out.dtype}
    if not mixed:
        return None
    names = ", ".join(sorted(map(str, mixed)))
    return f"cat of {names} into {out.dtype} needs a conversion, which is not supported"


def _cat_of(
    self: FunctionBuilder, values: list[SSAValue[TensorType]], dim: int
) -> SSAValue[TensorType]:
    """graph.cat of `values` along dim, in steps of at most PARTS inputs."""
    if len(values) == 1:
        return values[0]
    first, rest = values[:CAT_PARTS], values[CAT_PARTS:]
    while True:
        shape = list(first[0].type.get_shape())
        shape[dim] = sum(v.type.get_shape()[dim] for v in first)
        typ = TensorType(first[0].type.element_type, shape)
        value = self.insert(graph.CatOp(first, dim, typ))
        if not rest:
            return value
        first, rest = [value, *rest[: CAT_PARTS - 1]], rest[CAT_PARTS - 1 :]


@ATEN.handles(
    "aten.cat.default",
    "aten.concat.default",
    "aten.concatenate.default",
    accepts=_nonempty(_cat_refusal),
)
def _cat(self: FunctionBuilder, node: fx.Node) -> View:
    out = node.meta["val"]
    dim = arg_int(node, 1, "dim", 0) % out.dim()
    # torch lets an empty 1-d tensor stand in any cat: it adds nothing
    parts = [arg for arg in arg_nodes(node, 0) if arg.meta["val"].numel()]
    return self.result(_cat_of(self, [self.operand(arg) for arg in parts], dim), out)


@ATEN.handles("aten.stack.default", accepts=_nonempty(_cat_refusal))
def _stack(self: FunctionBuilder, node: fx.Node) -> View:
    """A cat of the inputs, each with a new dim of size 1 at `dim`."""
    out = node.meta["val"]
    dim = arg_int(node, 1, "dim", 0) % out.dim()
    parts = []
    for arg in arg_nodes(node, 0):
        view = self.view_of(arg)
        parts.append(self.contiguous(View(view.base, view.meta.unsqueeze(dim))))
    return self.result(_cat_of(self, parts, dim), out)


def _constant_pad_nd(node: fx.Node) -> bool:
    """Whether a pad is aten.constant_pad_nd (input, pad, value), not aten.pad (input, pad,
    mode, value)."""
    return op_name(node) == "aten.constant_pad_nd.default"


def _pad_fill(node: fx.Node) -> int | float:
    """The value a pad fills with (0 unless given)."""
    fill = arg_given(node, 2 if _constant_pad_nd(node) else 3, "value", None)
    if not isinstance(fill, (int, float, type(None))):
        raise ConversionError(f"{op_name(node)} by a value of {fill!r}")
    return 0 if fill is None else fill


def _pad_refusal(node: fx.Node) -> str | None:
    mode = "constant" if _constant_pad_nd(node) else arg_str(node, 2, "mode", "constant")
    if mode != "constant":
        return f"a pad of mode {mode!r} is not supported"
    return None


@ATEN.handles("aten.constant_pad_nd.default", "aten.pad.default", accepts=_nonempty(_pad_refusal))
def _constant_pad(self: FunctionBuilder, node: fx.Node) -> View:
    """Pads (pairs from the last dim back) as cats of constant fills; a negative pad is a
    slice."""
    view = self.view_of(node.args[0])
    pad, fill = arg_ints(node, 1, "pad"), _pad_fill(node)
    out = node.meta["val"]
    meta = view.meta
    for pair in range(len(pad) // 2):
        dim, before, after = meta.dim() - 1 - pair, pad[2 * pair], pad[2 * pair + 1]
        start, stop = max(0, -before), meta.shape[dim] - max(0, -after)
        meta = meta.narrow(dim, start, stop - start)
    value = self.contiguous(View(view.base, meta))
    for pair in range(len(pad) // 2):
        dim, before, after = meta.dim() - 1 - pair, pad[2 * pair], pad[2 * pair + 1]
        parts = [value]
        for side, width in (("before", before), ("after", after)):
            if width <= 0:
                continue
            shape = list(value.type.get_shape())
            shape[dim] = width
            filled = torch.full(shape, fill, dtype=out.dtype)
            constant = self.constant_arg(f"{node.name}.{side}{dim}", filled)
            parts.insert(0 if side == "before" else len(parts), constant)
        value = _cat_of(self, parts, dim)
    return self.result(value, out)
