"""Ops that pick elements by index, each one graph.gather (or a strided copy): an
embedding's rows, index_select, gather, advanced indexing (`x[a, b]`, and `_unsafe_index`,
as upsampling decomposes), flip, roll, repeat and repeat_interleave; and the writes by
index, index_copy and index_put, as graph.index_copy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType, i8
from xdsl.ir import SSAValue

from emmy.dialects import graph
from emmy.families.gather import INDICES
from emmy.frontend.aten.arguments import (
    arg_example,
    arg_float,
    arg_given,
    arg_int,
    arg_ints,
    arg_list,
    arg_node,
    arg_optional_int,
    arg_optional_nodes,
)
from emmy.frontend.aten.common import ATEN, _arguments, _nonempty, _shaped_as, _value
from emmy.frontend.function_builder import (
    INTEGER_DTYPES,
    FunctionBuilder,
    View,
    contiguous_meta,
)
from emmy.frontend.op_registry import op_name

#: the index tensors one gather reads (emmy/families/gather/)
INDEX_TENSORS = INDICES


@ATEN.handles("aten.embedding.default")
def _embedding(self: FunctionBuilder, node: fx.Node) -> View:
    """Rows of the table by id. padding_idx, scale_grad_by_freq and sparse shape only the
    gradient: the forward pass reads the padding row like any other."""
    out = node.meta["val"]
    if not out.is_floating_point():
        return _rows(self, node)
    table = self.operand(node.args[0])
    ids = self.operand(node.args[1])
    return self.result(self.insert(graph.EmbeddingOp(table, ids, self.type_of(out))), out)


@ATEN.handles("emmy.embedding_backward.default")
def _embedding_backward(self: FunctionBuilder, node: fx.Node) -> View:
    """An embedding's weight gradient, summed by id (emmy.frontend.decompositions)."""
    out = node.meta["val"]
    grad = self.operand(node.args[0])
    ids = self.operand(node.args[1])
    bound = _arguments(node)
    scaled = bool(bound.get("scale_grad_by_freq", False))
    value = self.insert(graph.EmbeddingBackwardOp(grad, ids, self.type_of(out), scaled))
    return self.result(value, out)


@dataclass
class Pick:
    """An index tensor of a gather: each output element reads it at Σ o_d · strides[d] (of
    `base`'s elements) and picks that element of a dim of `size` elements, `step` apart."""

    base: SSAValue
    strides: list[int]
    size: int
    step: int


def _gather(
    self: FunctionBuilder,
    source: View,
    out: torch.Tensor,
    strides: list[int],
    offset: int | torch.SymInt,
    picks: Sequence[Pick] = (),
) -> View:
    """A gather of `out`'s shape from `source`'s base: strides and offset over its elements."""
    indices = [(p.base, p.strides, p.size, p.step) for p in picks]
    op = graph.GatherOp(source.base, self.type_of(out), strides, int(offset), indices)
    return self.result(self.insert(op), out)


def _index_base(
    self: FunctionBuilder, view: View, shape: Sequence[int]
) -> tuple[SSAValue, list[int]]:
    """An index tensor broadcast to `shape`, as a graph value and its strides over it."""
    meta = view.meta.reshape((1,) * (len(shape) - view.meta.dim()) + tuple(view.meta.shape))
    if meta.storage_offset() != 0:
        base = self.contiguous(view)
        meta = contiguous_meta(base.type, view.meta.dtype).reshape(meta.shape)
        return base, list(meta.expand(*shape).stride())
    return view.base, list(meta.expand(*shape).stride())


def _index_dtype_refusal(node: fx.Node, index: fx.Node) -> str | None:
    dtype = index.meta["val"].dtype
    if dtype in (torch.bool, torch.uint8):
        return f"{op_name(node)} by a boolean mask: its output shape depends on the data"
    if dtype not in INTEGER_DTYPES:
        return f"{op_name(node)} by {dtype} indices is not supported"
    return None


def _index_select_refusal(node: fx.Node) -> str | None:
    if arg_example(node, 0).dim() == 0:
        return "index_select of a 0-dim tensor is not supported"
    return _index_dtype_refusal(node, arg_node(node, 2))


@ATEN.handles("aten.index_select.default", accepts=_nonempty(_index_select_refusal))
def _index_select(self: FunctionBuilder, node: fx.Node) -> View:
    source = self.view_of(node.args[0])
    meta, dim = source.meta, arg_int(node, 1) % source.meta.dim()
    out = node.meta["val"]
    index, index_strides = _index_base(self, self.view_of(node.args[2]), [-1])
    strides = list(meta.stride())
    strides[dim] = 0
    along = [0] * meta.dim()
    along[dim] = index_strides[0]
    pick = Pick(index, along, meta.shape[dim], meta.stride(dim))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


def _index_copy_refusal(node: fx.Node) -> str | None:
    x, index, source = (arg_example(node, k) for k in (0, 2, 3))
    if index.dim() > 1 or index.dtype not in (torch.int32, torch.int64):
        return "index_copy by an index that is not a 0-d or 1-d tensor of int32/int64"
    if source.dim() != x.dim():
        return "index_copy of a source with fewer dims than its input is not supported"
    return None


@ATEN.handles("aten.index_copy.default", accepts=_nonempty(_index_copy_refusal))
def _index_copy(self: FunctionBuilder, node: fx.Node) -> View:
    """A static KV cache's update: the input with the rows at the positions replaced."""
    out = node.meta["val"]
    x, index, source = (self.operand(node.args[k]) for k in (0, 2, 3))
    op = graph.IndexCopyOp(x, arg_int(node, 1) % out.dim(), index, source)
    return self.result(self.insert(op), out)


def _scatter_refusal(node: fx.Node) -> str | None:
    x, index = arg_example(node, 0), arg_example(node, 2)
    if x.dim() == 0 or index.dim() != x.dim():
        return "scatter of a 0-dim tensor or by an index of another rank is not supported"
    dim = arg_int(node, 1) % x.dim()
    others = [d for d in range(x.dim()) if d != dim]
    if index.shape[dim] != 1 or any(index.shape[d] != x.shape[d] for d in others):
        return "scatter of more than one index per row along its dim is not supported"
    if node.kwargs.get("reduce") is not None:
        return "scatter with a reduce is not supported"
    source = node.args[3]
    if isinstance(source, fx.Node) and source.meta["val"].shape != index.shape:
        return "scatter of a source of another shape than its index is not supported"
    return _index_dtype_refusal(node, arg_node(node, 2))


@ATEN.handles("aten.scatter.value", "aten.scatter.src", accepts=_nonempty(_scatter_refusal))
def _scatter_one_per_row(self: FunctionBuilder, node: fx.Node) -> View:
    """scatter of one index per row along dim (nll_loss's gradient, a one-hot): the input
    where the dim's position is not the row's index, the value (or the source's) where it
    is; one elementwise kernel, where(iota == index, value, x), over the dim moved last
    (the iota a row, the index and the source columns)."""
    out = node.meta["val"]
    rank = out.dim()
    dim = arg_int(node, 1) % rank

    def dim_last(arg: object) -> SSAValue[TensorType]:
        view = self.view_of(arg)
        return self.contiguous(View(view.base, view.meta.transpose(dim, rank - 1)))

    x, index = dim_last(node.args[0]), dim_last(node.args[2])
    positions = torch.arange(out.shape[dim], dtype=arg_example(node, 2).dtype)
    iota = self.constant_arg(f"{node.name}.positions", positions)
    shape = x.type.get_shape()
    at_index = self.insert(graph.elementwise("eq", [iota, index], TensorType(i8, shape)))
    source = node.args[3]
    if isinstance(source, fx.Node):
        value = dim_last(source)
    else:
        value = self.insert(graph.ConstantOp(arg_float(node, 3), x.type.element_type))
    picked = self.insert(graph.elementwise("where", [at_index, value, x], x.type))
    result = self.result(picked, out)
    return View(result.base, result.meta.transpose(dim, rank - 1))


def _gather_refusal(node: fx.Node) -> str | None:
    if arg_example(node, 0).dim() == 0:
        return "gather of a 0-dim tensor is not supported"
    return _index_dtype_refusal(node, arg_node(node, 2))


@ATEN.handles("aten.gather.default", accepts=_nonempty(_gather_refusal))
def _gather_along(self: FunctionBuilder, node: fx.Node) -> View:
    """torch.gather: out[..., j, ...] = x[..., index[..., j, ...], ...] along dim."""
    source = self.view_of(node.args[0])
    meta, dim = source.meta, arg_int(node, 1) % source.meta.dim()
    out = node.meta["val"]
    index, index_strides = _index_base(self, self.view_of(node.args[2]), out.shape)
    strides = list(meta.stride())
    strides[dim] = 0
    pick = Pick(index, index_strides, meta.shape[dim], meta.stride(dim))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


def _advanced_index_refusal(node: fx.Node) -> str | None:
    indices = [i for i in arg_optional_nodes(node, 1) if i is not None]
    for index in indices:
        refusal = _index_dtype_refusal(node, index)
        if refusal is not None:
            return refusal
    if len(indices) > INDEX_TENSORS:
        return f"indexing by {len(indices)} index tensors: at most {INDEX_TENSORS} are supported"
    return None


@ATEN.handles("aten.index.Tensor", accepts=_nonempty(_advanced_index_refusal))
def _advanced_index(self: FunctionBuilder, node: fx.Node) -> View:
    """x[..., a, b, ...] by integer index tensors (None entries take a whole dim): the
    indexed dims become the broadcast shape of the indices, in their place when they are
    adjacent and first otherwise, as torch does it."""
    source = self.view_of(node.args[0])
    meta, out = source.meta, node.meta["val"]
    given = arg_optional_nodes(node, 1)
    entries = given + [None] * (meta.dim() - len(given))
    indexed = [d for d, entry in enumerate(entries) if entry is not None]
    views = [self.view_of(entries[d]) for d in indexed]
    broadcast = list(torch.broadcast_shapes(*(v.meta.shape for v in views)))
    kept = [d for d in range(meta.dim()) if d not in indexed]
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    # each output dim: ("x", a dim of x) or ("index", a dim of the broadcast indices)
    at = indexed[0] if adjacent else 0
    layout = [("x", d) for d in kept[:at] if adjacent]
    layout += [("index", b) for b in range(len(broadcast))]
    layout += [("x", d) for d in (kept[at:] if adjacent else kept)]
    strides = [meta.stride(d) if kind == "x" else 0 for kind, d in layout]
    picks = []
    for d, view in zip(indexed, views, strict=True):
        base, index_strides = _index_base(self, view, broadcast)
        along = [index_strides[b] if kind == "index" else 0 for kind, b in layout]
        picks.append(Pick(base, along, meta.shape[d], meta.stride(d)))
    return _gather(self, source, out, strides, meta.storage_offset(), picks)


def _rows(self: FunctionBuilder, node: fx.Node) -> View:
    """Rows of a table (args[0]) by ids of any shape (args[1]): an embedding of a table
    the embedding family does not take."""
    source = self.view_of(node.args[0])
    ids = self.view_of(node.args[1])
    meta, out = source.meta, node.meta["val"]
    index, index_strides = _index_base(self, ids, ids.meta.shape)
    strides = [0] * ids.meta.dim() + [meta.stride(1)]
    pick = Pick(index, [*index_strides, 0], meta.shape[0], meta.stride(0))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


@ATEN.handles("aten.flip.default", accepts=_nonempty())
def _flip(self: FunctionBuilder, node: fx.Node) -> View:
    """Reads each flipped dim backwards: a negative stride from its last element."""
    source = self.view_of(node.args[0])
    meta = source.meta
    strides, offset = list(meta.stride()), meta.storage_offset()
    for dim in {d % max(1, meta.dim()) for d in arg_ints(node, 1)}:
        offset += (meta.shape[dim] - 1) * strides[dim]
        strides[dim] = -strides[dim]
    return _gather(self, source, node.meta["val"], strides, offset)


def _roll_refusal(node: fx.Node) -> str | None:
    shifts = arg_list(node, 1)
    if len(shifts) > INDEX_TENSORS:
        return f"roll over {len(shifts)} dims: at most {INDEX_TENSORS} are supported"
    return None


@ATEN.handles("aten.roll.default", accepts=_nonempty(_roll_refusal))
def _roll(self: FunctionBuilder, node: fx.Node) -> View:
    """Each rolled dim read through a constant index, (j - shift) mod its size: a roll of
    no dims rolls the flattened tensor."""
    source = self.view_of(node.args[0])
    shifts, dims = arg_ints(node, 1), arg_ints(node, 2, "dims", [])
    out = node.meta["val"]
    if not dims:
        flat = self.contiguous(source)
        flat = self.insert(graph.ReshapeOp(flat, TensorType(flat.type.element_type, [out.numel()])))
        source, dims = View(flat, torch.empty(out.numel(), dtype=out.dtype, device="meta")), [0]
    meta = source.meta
    strides, picks = list(meta.stride()), []
    for t, (shift, dim) in enumerate(zip(shifts, dims, strict=True)):
        dim %= meta.dim()
        size = meta.shape[dim]
        index = (torch.arange(size) - int(shift)) % max(1, size)
        along = [0] * meta.dim()
        along[dim] = 1
        base = self.constant_arg(f"{node.name}.index{t}", index)
        picks.append(Pick(base, along, size, strides[dim]))
        strides[dim] = 0
    rolled = _gather(self, source, meta, strides, meta.storage_offset(), picks)
    if list(meta.shape) == list(out.shape):
        return self.result(rolled.base, out)
    return self.result(self.insert(graph.ReshapeOp(rolled.base, self.type_of(out))), out)


@ATEN.handles("aten.repeat.default", accepts=_nonempty())
def _repeat(self: FunctionBuilder, node: fx.Node) -> View:
    """A copy of the input broadcast along a new dim before each of its own, one per
    repeat: [r0, n0, r1, n1, ...] read with strides [0, s0, 0, s1, ...]."""
    source = self.view_of(node.args[0])
    repeats = arg_ints(node, 1)
    meta, out = source.meta, node.meta["val"]
    lead = len(repeats) - meta.dim()
    sizes = [1] * lead + list(meta.shape)
    steps = [0] * lead + list(meta.stride())
    shape = [n for r, size in zip(repeats, sizes, strict=True) for n in (r, size)]
    strides = [s for step in steps for s in (0, step)]
    tiled = meta.as_strided(shape, strides, meta.storage_offset())
    value = self.contiguous(View(source.base, tiled))
    return self.result(self.insert(graph.ReshapeOp(value, self.type_of(out))), out)


def _repeat_interleave_refusal(node: fx.Node) -> str | None:
    repeats = node.args[1]
    if isinstance(repeats, fx.Node) and not isinstance(repeats.meta.get("val"), torch.Tensor):
        return None  # a size the graph computed: known once the graph is specialised
    if isinstance(repeats, fx.Node) and repeats.meta["val"].dim() > 1:
        return "repeat_interleave by repeats of more than one dim is not supported"
    return None


@ATEN.handles(
    "aten.repeat_interleave.self_int",
    "aten.repeat_interleave.self_Tensor",
    accepts=_nonempty(_repeat_interleave_refusal),
)
def _repeat_interleave(self: FunctionBuilder, node: fx.Node) -> View:
    """Each element (along `dim`, or of the flattened input without one) `repeats` times:
    for one count, the input read with a broadcast dim after `dim` and reshaped; for counts
    of each element known at compile time, a gather of the elements they pick."""
    source = self.view_of(node.args[0])
    out = node.meta["val"]
    dim = arg_optional_int(node, 2, "dim")
    repeats = node.args[1]
    count = self.values[repeats] if isinstance(repeats, fx.Node) else repeats
    meta = source.meta if dim is not None else source.meta.reshape(-1)
    if not meta._is_view() and meta is not source.meta:
        # a flattened view torch copies (a permuted input): emmy copies it too
        base = self.contiguous(source)
        meta = contiguous_meta(base.type, source.meta.dtype).reshape(-1)
        source = View(base, meta)
    dim = 0 if dim is None else dim % meta.dim()
    if not isinstance(count, int):
        counts = self.known(count)
        if not isinstance(counts, torch.Tensor):
            raise self.error("repeat_interleave by counts known only when the model runs")
        if counts.numel() != 1:
            return _picked_repeats(self, node, View(source.base, meta), dim, counts, out)
        count = int(counts.reshape(()))
    shape = list(meta.shape)
    strides = list(meta.stride())
    shape.insert(dim + 1, count)
    strides.insert(dim + 1, 0)
    value = self.contiguous(
        View(source.base, meta.as_strided(shape, strides, meta.storage_offset()))
    )
    return _shaped_as(self, value, out)


def _picked_repeats(
    self: FunctionBuilder,
    node: fx.Node,
    source: View,
    dim: int,
    counts: torch.Tensor,
    out: torch.Tensor,
) -> View:
    """repeat_interleave by a count per element: a gather along `dim` of the elements
    torch.repeat_interleave(arange(n), counts) picks, a constant index."""
    meta = source.meta
    picked = torch.repeat_interleave(torch.arange(meta.shape[dim]), counts.long())
    index = self.constant_arg(f"{node.name}.index", picked)
    strides = list(meta.stride())
    strides[dim] = 0
    along = [0] * meta.dim()
    along[dim] = 1
    pick = Pick(index, along, meta.shape[dim], meta.stride(dim))
    return _gather(self, source, out, strides, meta.storage_offset(), [pick])


@ATEN.handles("aten._unsafe_index.Tensor", accepts=_nonempty(_advanced_index_refusal))
def _unsafe_index(self: FunctionBuilder, node: fx.Node) -> View:
    """Indexing without bounds checks (upsampling's decomposition under torch.compile, by
    indices it computes from aranges): a gather, as x[a, b]."""
    return _advanced_index(self, node)


def _index_put_refusal(node: fx.Node) -> str | None:
    x, values = arg_example(node, 0), arg_example(node, 2)
    indices = arg_optional_nodes(node, 1)
    accumulate = arg_given(node, 3, "accumulate", False)
    if accumulate:
        return f"{op_name(node)} with accumulate=True is not supported"
    if len(indices) != 1 or indices[0] is None or x.dim() == 0:
        return f"{op_name(node)} by other than one index tensor on the first dim"
    index = _value(indices[0])
    if index.dim() != 1 or index.dtype not in INTEGER_DTYPES:
        return f"{op_name(node)} by an index that is not a 1-d tensor of int32/int64"
    if tuple(values.shape) != (index.shape[0], *x.shape[1:]) or values.dtype != x.dtype:
        return f"{op_name(node)} of values {list(values.shape)} {values.dtype} (not broadcast)"
    return None


@ATEN.handles("aten.index_put.default", accepts=_nonempty(_index_put_refusal))
def _index_put(self: FunctionBuilder, node: fx.Node) -> View:
    """x[index] = values by one index tensor on the first dim: an index_copy along it (a
    mixture of experts' inverse permutation)."""
    out = _value(node)
    index_arg = arg_optional_nodes(node, 1)[0]
    x, index, values = (self.operand(a) for a in (node.args[0], index_arg, node.args[2]))
    return self.result(self.insert(graph.IndexCopyOp(x, 0, index, values)), out)
