"""Views, followed as strided views of the tensor they came from
(emmy.frontend.function_builder), and copies: `contiguous`, `clone`, a dtype conversion
(`to`), the functional form of `copy_`."""

from __future__ import annotations

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType

from emmy.dialects import graph
from emmy.frontend.aten.arguments import arg_example, arg_given, arg_list
from emmy.frontend.aten.common import ATEN, _storage_name
from emmy.frontend.function_builder import (
    FunctionBuilder,
    View,
    _numel,
    contiguous_meta,
    map_nodes,
)
from emmy.frontend.op_registry import op_overload


@ATEN.handles(
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    "aten.transpose.int",
    "aten.permute.default",
    "aten.t.default",
    "aten.unsqueeze.default",
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.squeeze.default",
    "aten.flatten.using_ints",
    "aten.unflatten.int",
    "aten.expand.default",
    "aten.slice.Tensor",
    "aten.select.int",
    "aten.narrow.default",
    "aten.alias.default",
    "aten.detach.default",
    "aten.split.Tensor",
    "aten.split_with_sizes.default",
    "aten.chunk.default",
    "aten.unbind.int",
)
def _view(self: FunctionBuilder, node: fx.Node) -> object:
    source, target = self.view_of(node.args[0]), op_overload(node)
    rest = map_nodes(node.args[1:], lambda size: self.values[size])
    try:
        meta = target(source.meta, *rest, **node.kwargs)
    except (RuntimeError, ValueError):
        # not expressible as a view of these strides (a reshape of a permuted tensor):
        # copy to contiguous, then view that
        base = self.contiguous(source)
        meta = target(contiguous_meta(base.type, source.meta.dtype), *rest, **node.kwargs)
        source = View(base, meta)
    if isinstance(meta, (list, tuple)):
        return [View(source.base, m) for m in meta]
    if not meta._is_view() and meta is not source.meta:
        # torch copied (reshape of a non-viewable tensor): so does emmy
        base = self.contiguous(source)
        meta = target(contiguous_meta(base.type, source.meta.dtype), *rest, **node.kwargs)
        return View(base, meta)
    return View(source.base, meta)


def _whole_storage(example: torch.Tensor) -> bool:
    """Whether a tensor is its whole storage, in order (as_strided counts from there)."""
    return (
        example.is_contiguous()
        and example.storage_offset() == 0
        and example.untyped_storage().nbytes() == example.numel() * example.element_size()
    )


def _as_strided_refusal(node: fx.Node) -> str | None:
    if any(not isinstance(arg, (int, fx.Node)) for arg in [*arg_list(node, 1), *arg_list(node, 2)]):
        return "as_strided of sizes that are not ints is not supported"
    return None


@ATEN.handles("aten.as_strided.default", accepts=_as_strided_refusal)
def _as_strided(self: FunctionBuilder, node: fx.Node) -> View:
    """x.as_strided(size, stride, offset): a view of x's storage, which torch counts from
    its start. Where emmy views the same storage the same way as eager (an input, a view of
    one), the view is taken over it; where eager's x is its whole storage, over x copied;
    else eager's storage is one emmy does not hold."""
    source = self.view_of(node.args[0])
    example = arg_example(node, 0)
    size, stride = (map_nodes(node.args[k], lambda n: self.values[n]) for k in (1, 2))
    offset = arg_given(node, 3, "storage_offset", None)
    meta = source.meta
    same = (
        tuple(meta.shape) == tuple(example.shape)
        and tuple(meta.stride()) == tuple(example.stride())
        and meta.storage_offset() == example.storage_offset()
        and _numel(source.base.type.get_shape()) * example.element_size()
        == example.untyped_storage().nbytes()
    )
    if not same:
        if not _whole_storage(example):
            raise self.error("as_strided of a view of a storage emmy does not hold")
        source = View(self.contiguous(source), contiguous_meta(self.type_of(example), meta.dtype))
    if isinstance(offset, fx.Node):
        offset = self.values[offset]  # a size the graph computed, specialised
    if offset is not None and not isinstance(offset, (int, torch.SymInt)):
        raise self.error(f"as_strided at an offset of {offset!r} is not supported")
    start = source.meta.storage_offset() if offset is None else int(offset)
    return View(source.base, source.meta.as_strided(list(size), list(stride), start))


def _copy_refusal(node: fx.Node) -> str | None:
    source, out = arg_example(node, 0).dtype, node.meta["val"].dtype
    for dtype in (source, out):
        if _storage_name(dtype) is None:
            return f"{node.target}: dtype {dtype} is not supported"
    return None


@ATEN.handles(
    "aten.contiguous.default",
    "aten.clone.default",
    "aten._to_copy.default",
    "prims.convert_element_type.default",
    "aten.to.dtype",
    "aten.to.dtype_layout",
    "aten.type_as.default",
    "aten.to.device",  # to the device the program runs on: its tensors are there
    accepts=_copy_refusal,
)
def _copy(self: FunctionBuilder, node: fx.Node) -> View:
    """A copy, contiguous, converted to another dtype where it asks for one."""
    return _copied(self, node.args[0], node.meta["val"])


def _copied(self: FunctionBuilder, source: object, out: torch.Tensor) -> View:
    """`source`, contiguous, in the dtype of `out`."""
    value = self.contiguous(self.view_of(source))
    typ = self.type_of(out)
    if value.type.element_type != typ.element_type:
        value = self.insert(
            graph.elementwise("convert", [value], TensorType(typ.element_type, typ.get_shape()))
        )
    return self.result(value, out)


def _copy_into_refusal(node: fx.Node) -> str | None:
    into, source = arg_example(node, 0), arg_example(node, 1)
    if tuple(into.shape) != tuple(source.shape):
        return f"{node.target}: a copy that broadcasts {list(source.shape)} to {list(into.shape)}"
    for dtype in (source.dtype, into.dtype):
        if _storage_name(dtype) is None:
            return f"{node.target}: dtype {dtype} is not supported"
    return None


@ATEN.handles("aten.copy.default", accepts=_copy_into_refusal)
def _copy_into(self: FunctionBuilder, node: fx.Node) -> View:
    """The functional form of `x.copy_(y)` (a write of y over x, as functionalisation
    spells it): y, contiguous, in x's dtype."""
    return _copied(self, node.args[1], node.meta["val"])
