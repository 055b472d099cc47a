"""A mixture of experts' routing: topk and sort of short rows (by ranks, in the elementwise
and row-reduction kernels) and histc (its picks counted per expert)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType, i8, i64
from xdsl.ir import Attribute, SSAValue

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families.chains import broadcast_kind
from emmy.frontend.aten.arguments import arg_example
from emmy.frontend.aten.common import (
    ATEN,
    _arguments,
    _element,
    _nonempty,
    _shaped_as,
    _storage_name,
    _value,
)
from emmy.frontend.function_builder import (
    INTEGER_DTYPES,
    FunctionBuilder,
    View,
    _numel,
    contiguous_meta,
)
from emmy.frontend.op_registry import op_name


def _broadcast(
    self: FunctionBuilder,
    value: SSAValue[TensorType],
    dtype: torch.dtype,
    dims: Sequence[int],
    shape: Sequence[int],
) -> SSAValue[TensorType]:
    """`value` with its elements laid out as `dims` (its shape with dims of 1 put in),
    as an operand of an elementwise op of `shape`: read in place where a kernel reads
    that broadcast, else expanded by a copy."""
    meta = contiguous_meta(value.type, dtype).reshape(tuple(dims))
    if broadcast_kind(tuple(dims), tuple(shape)) is None:
        return self.contiguous(View(value, meta.expand(tuple(shape))))
    return self.contiguous(View(value, meta))


def _pointwise_of(
    self: FunctionBuilder,
    name: str,
    operands: list[SSAValue[TensorType]],
    element: Attribute,
    shape: Sequence[int],
) -> SSAValue[TensorType]:
    return self.insert(graph.elementwise(name, operands, TensorType(element, list(shape))))


def _iota(self: FunctionBuilder, count: int) -> SSAValue[TensorType]:
    """0, 1, ..., count - 1 (int64): a constant of the program."""
    return self.constant_arg(f"emmy.iota{count}", torch.arange(count))


def _ranked(
    self: FunctionBuilder, x: SSAValue[TensorType], dtype: torch.dtype, k: int, descending: bool
) -> tuple[SSAValue[TensorType], SSAValue[TensorType]]:
    """The first k of each row of x [rows, n] in order (largest first where `descending`)
    and their places, ties in the order of their places: the values [rows, k] and int64
    places [rows, k]. By ranks, in the elementwise and row-reduction kernels: element i's
    rank counts the elements j before it in the order (x_j beyond x_i, or equal with j < i);
    output p sums the elements (and the places) of rank p, exactly one per row. Its work
    is n² per row: routing's rows are short (a token's experts, a batch's picks)."""
    rows, n = x.type.get_shape()
    pairs = (rows, n, n)  # [row, i, j]
    xi = _broadcast(self, x, dtype, (rows, n, 1), pairs)
    xj = _broadcast(self, x, dtype, (rows, 1, n), pairs)
    beyond = _pointwise_of(self, "gt" if descending else "lt", [xj, xi], i8, pairs)
    equal = _pointwise_of(self, "eq", [xj, xi], i8, pairs)
    places = _iota(self, n)
    before = _pointwise_of(
        self,
        "lt",
        [
            _broadcast(self, places, torch.int64, (1, 1, n), pairs),
            _broadcast(self, places, torch.int64, (1, n, 1), pairs),
        ],
        i8,
        pairs,
    )
    tie = _pointwise_of(self, "logical_and", [equal, before], i8, pairs)
    first = _pointwise_of(self, "logical_or", [beyond, tie], i8, pairs)
    count = self.insert(graph.elementwise("convert", [first], TensorType(i64, list(pairs))))
    rank = self.insert(graph.ReduceOp(count, "sum", TensorType(i64, [rows, n])))
    picks = (rows, k, n)  # [row, p, i]
    chosen = _pointwise_of(
        self,
        "eq",
        [
            _broadcast(self, rank, torch.int64, (rows, 1, n), picks),
            _broadcast(self, _iota(self, k) if k != n else places, torch.int64, (1, k, 1), picks),
        ],
        i8,
        picks,
    )

    def pick(
        value: SSAValue[TensorType], value_dtype: torch.dtype, dims: tuple[int, ...]
    ) -> SSAValue[TensorType]:
        value_element = value.type.element_type
        zero = self.insert(graph.ConstantOp(0, value_element))
        spread = _broadcast(self, value, value_dtype, dims, picks)
        kept = _pointwise_of(self, "where", [chosen, spread, zero], value_element, picks)
        summed = graph.reduce_result_dtype("sum", value_element)
        total = self.insert(graph.ReduceOp(kept, "sum", TensorType(summed, [rows, k])))
        if summed != value_element:
            total = self.insert(
                graph.elementwise("convert", [total], TensorType(value_element, [rows, k]))
            )
        return total

    values = pick(x, dtype, (rows, 1, n))
    indices = pick(places, torch.int64, (1, 1, n))
    return values, indices


#: the most pairs (rows · n²) a ranking compares: routing's rows are short
RANKED_PAIRS_MAX = 1 << 24


def _ranking_refusal(node: fx.Node) -> str | None:
    bound = _arguments(node)
    x = arg_example(node, 0)
    if x.dim() == 0 or x.numel() == 0:
        return f"{op_name(node)} of a tensor of shape {list(x.shape)} is not supported"
    if int(bound.get("dim", -1)) % x.dim() != x.dim() - 1:
        return f"{op_name(node)} along other than the last dim is not supported"
    if x.dtype not in (*INTEGER_DTYPES, torch.float32, torch.float16, torch.bfloat16):
        return f"{op_name(node)} of {x.dtype} is not supported"
    if op_name(node) == "aten.topk.default" and not x.dtype.is_floating_point:
        # integers tie often, and torch's topk places equal values in an order of its own
        return f"topk of {x.dtype} is not supported: torch orders equal values its own way"
    n = x.shape[-1]
    if x.numel() * n > RANKED_PAIRS_MAX:
        return f"{op_name(node)} of rows of {n}: at most {RANKED_PAIRS_MAX} pairs are compared"
    return None


def _ranked_node(self: FunctionBuilder, node: fx.Node, k: int, descending: bool) -> list[View]:
    x = arg_example(node, 0)
    n = x.shape[-1]
    rows = self.operand(node.args[0])
    flat = TensorType(rows.type.element_type, [x.numel() // n, n])
    rows = self.insert(graph.ReshapeOp(rows, flat))
    values, indices = _ranked(self, rows, x.dtype, k, descending)
    examples = node.meta["val"]
    return [_shaped_as(self, values, examples[0]), _shaped_as(self, indices, examples[1])]


@ATEN.handles("aten.topk.default", accepts=_nonempty(_ranking_refusal))
def _topk(self: FunctionBuilder, node: fx.Node) -> list[View]:
    """The k largest (or smallest) of the last dim and their places, in order: a mixture
    of experts' router picking each token's experts."""
    bound = _arguments(node)
    return _ranked_node(self, node, int(bound["k"]), bool(bound.get("largest", True)))


@ATEN.handles("aten.sort.default", "aten.sort.stable", accepts=_nonempty(_ranking_refusal))
def _sort(self: FunctionBuilder, node: fx.Node) -> list[View]:
    """The last dim sorted, and the places its elements came from: a mixture of experts'
    picks ordered by expert. Ties keep their order (a stable sort; torch's default sort
    leaves their order unspecified)."""
    bound = _arguments(node)
    n = arg_example(node, 0).shape[-1]
    return _ranked_node(self, node, n, bool(bound.get("descending", False)))


def _histc_refusal(node: fx.Node) -> str | None:
    bound = _arguments(node)
    x = arg_example(node, 0)
    if not dtypes.is_float(_storage_name(x.dtype)) or x.numel() == 0:
        return f"histc of {x.dtype} {list(x.shape)} is not supported"
    low, high = float(bound.get("min", 0)), float(bound.get("max", 0))
    if not low < high:
        return "histc over the data's own range (min >= max) is not supported"
    if x.numel() * int(bound.get("bins", 100)) > RANKED_PAIRS_MAX:
        return f"histc of {x.numel()} elements: at most {RANKED_PAIRS_MAX} pairs are compared"
    return None


@ATEN.handles("aten.histc.default", accepts=_histc_refusal)
def _histc(self: FunctionBuilder, node: fx.Node) -> View:
    """Counts of the elements in `bins` equal bins over [min, max] (the last bin closed, an
    element outside counted nowhere), as torch bins them: a mixture of experts' picks per
    expert. Bin b counts the elements whose bin is b: a comparison of every element with
    every bin and a row sum, in the elementwise and row-reduction kernels."""
    bound = _arguments(node)
    bins, low, high = int(bound.get("bins", 100)), float(bound["min"]), float(bound["max"])
    out = _value(node)
    x = self.operand(node.args[0])
    n = _numel(x.type.get_shape())
    x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, [n])))
    if x.type.element_type != dtypes.xdsl_type("f32"):
        x = self.insert(graph.elementwise("convert", [x], TensorType(dtypes.xdsl_type("f32"), [n])))
    f32 = x.type.element_type

    def number(value: float, element: Attribute) -> SSAValue[TensorType]:
        return self.insert(graph.ConstantOp(value, element))

    # torch's bin: (x - min) * bins / (max - min), truncated; max itself in the last bin
    scaled = _pointwise_of(self, "sub", [x, number(low, f32)], f32, [n])
    scaled = _pointwise_of(self, "mul", [scaled, number(bins, f32)], f32, [n])
    scaled = _pointwise_of(self, "div", [scaled, number(high - low, f32)], f32, [n])
    place = self.insert(
        graph.elementwise(
            "convert", [_pointwise_of(self, "trunc", [scaled], f32, [n])], TensorType(i64, [n])
        )
    )
    place = _pointwise_of(self, "minimum", [place, number(bins - 1, i64)], i64, [n])
    above = _pointwise_of(self, "ge", [x, number(low, f32)], i8, [n])
    below = _pointwise_of(self, "le", [x, number(high, f32)], i8, [n])
    inside = _pointwise_of(self, "logical_and", [above, below], i8, [n])
    pairs = (bins, n)
    hit = _pointwise_of(
        self,
        "eq",
        [
            _broadcast(self, place, torch.int64, (1, n), pairs),
            _broadcast(self, _iota(self, bins), torch.int64, (bins, 1), pairs),
        ],
        i8,
        pairs,
    )
    hit = _pointwise_of(
        self, "logical_and", [hit, _broadcast(self, inside, torch.bool, (1, n), pairs)], i8, pairs
    )
    ones = self.insert(graph.elementwise("convert", [hit], TensorType(f32, list(pairs))))
    counts = self.insert(graph.ReduceOp(ones, "sum", TensorType(f32, [bins])))
    element = _element(out.dtype)
    if element != f32:
        counts = self.insert(graph.elementwise("convert", [counts], TensorType(element, [bins])))
    return self.result(counts, out)
