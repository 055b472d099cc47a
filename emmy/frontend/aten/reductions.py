"""Reductions over any dims (sum, mean, max, argmax, var, any, ..., and the pairs max.dim,
var_mean, ...), cumsum, softmax and log_softmax."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType, i8
from xdsl.ir import Attribute, SSAValue

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families.reduce_cols import KINDS as COLUMN_KINDS
from emmy.frontend.aten.arguments import arg_example, arg_int
from emmy.frontend.aten.common import ATEN, _arguments, _shaped_as
from emmy.frontend.function_builder import FunctionBuilder, View, _numel
from emmy.frontend.op_registry import op_name

#: each reduction's graph.reduce kind; over the dims `dim` names (all of them where it is
#: None or [], as torch reads it), or all dims for the overloads that take none
REDUCTIONS = {
    **dict.fromkeys(("aten.sum.dim_IntList", "aten.sum.default"), "sum"),
    **dict.fromkeys(("aten.mean.dim", "aten.mean.default"), "mean"),
    **dict.fromkeys(("aten.amax.default", "aten.max.default"), "max"),
    **dict.fromkeys(("aten.amin.default", "aten.min.default"), "min"),
    **dict.fromkeys(("aten.prod.dim_int", "aten.prod.default"), "prod"),
    "aten.logsumexp.default": "logsumexp",
    "aten.argmax.default": "argmax",
    "aten.argmin.default": "argmin",
    **dict.fromkeys(("aten.any.default", "aten.any.dim", "aten.any.dims"), "any"),
    **dict.fromkeys(("aten.all.default", "aten.all.dim", "aten.all.dims"), "all"),
    **dict.fromkeys(("aten.var.correction", "aten.var.dim", "aten.var.default"), "var"),
    **dict.fromkeys(("aten.std.correction", "aten.std.dim", "aten.std.default"), "std"),
}
#: reductions that give two results (a value and its index, a variance and a mean): two
#: reductions of the same rows
PAIRED_REDUCTIONS = {
    "aten.max.dim": ("max", "argmax"),
    "aten.min.dim": ("min", "argmin"),
    "aten.aminmax.default": ("min", "max"),
    **dict.fromkeys(("aten.var_mean.dim", "aten.var_mean.correction"), ("var", "mean")),
    **dict.fromkeys(("aten.std_mean.dim", "aten.std_mean.correction"), ("std", "mean")),
}
#: the longest float row argmax and argmin index exactly (their indices reduce as f32)
ARG_COLS_MAX = 2**24


def _reduction_kinds(node: fx.Node) -> tuple[str, ...]:
    return PAIRED_REDUCTIONS.get(op_name(node)) or (REDUCTIONS[op_name(node)],)


def _reduced(bound: dict[str, Any], rank: int) -> list[int]:
    """The dims a reduction reduces, ascending: all of them where it names none."""
    dims = bound.get("dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if not dims or rank == 0:
        return list(range(rank))
    return sorted({int(d) % rank for d in dims})


def _correction(bound: dict[str, Any]) -> int | float:
    """var's and std's divisor is the count less this (unbiased: 1)."""
    if "correction" in bound:
        return 1 if bound["correction"] is None else bound["correction"]
    return 1 if bound.get("unbiased", True) else 0


def _reduction_refusal(node: fx.Node) -> str | None:
    bound = _arguments(node)
    x = arg_example(node, 0)
    floating = x.dtype.is_floating_point
    if x.numel() == 0:
        return "a reduction of an empty tensor is not supported"
    cols = _numel([int(x.shape[d]) for d in _reduced(bound, x.dim())])
    for kind in _reduction_kinds(node):
        if graph.REDUCE_KINDS[graph.Reduction(kind)][0] == "float" and not floating:
            return f"{kind} of {x.dtype} is not supported"
        if kind in ("any", "all") and floating:
            return f"{kind} of {x.dtype} is not supported: compare it with 0 first"
        if kind in ("argmax", "argmin") and floating and cols >= ARG_COLS_MAX:
            return f"{kind} over {cols} elements: at most {ARG_COLS_MAX - 1} are supported"
    element = _element_type(x.dtype)
    if element is None:
        return f"{op_name(node)} of {x.dtype} is not supported"
    examples = node.meta["val"]
    examples = examples if isinstance(examples, (list, tuple)) else [examples]
    for kind, example in zip(_reduction_kinds(node), examples, strict=True):
        if _element_type(example.dtype) != graph.reduce_result_dtype(kind, element):
            # a `dtype=` that is not the one torch gives anyway
            return f"{op_name(node)} to {example.dtype} (a dtype conversion) is not supported"
    corrected = set(_reduction_kinds(node)) & set(graph.CORRECTED_KINDS)
    if corrected and int(_correction(bound)) != _correction(bound):
        return f"{op_name(node)} with a correction of {_correction(bound)} is not supported"
    return None


@ATEN.handles(*REDUCTIONS, *PAIRED_REDUCTIONS, accepts=_reduction_refusal)
def _reduce(self: FunctionBuilder, node: fx.Node) -> object:
    """A reduction over any dims: read in place where it can be (`_reduce_in_place`), else
    the kept dims in order, then the reduced ones merged into one last dim (a copy where
    they are not last already), reduced as rows; the result is reshaped to torch's
    (keepdim's dims of size 1 move no element)."""
    bound = _arguments(node)
    source = self.view_of(node.args[0])
    rank = source.meta.dim()
    reduced = _reduced(bound, rank)
    examples = node.meta["val"]
    examples = list(examples) if isinstance(examples, (list, tuple)) else [examples]
    kinds = _reduction_kinds(node)
    floating = source.meta.dtype.is_floating_point
    if not floating or _reads_in_place(source, reduced, kinds):
        results = [
            _reduce_in_place(self, source, reduced, k, e)
            for k, e in zip(kinds, examples, strict=True)
        ]
        return results if isinstance(node.meta["val"], (list, tuple)) else results[0]
    kept = [d for d in range(rank) if d not in reduced]
    meta = source.meta.permute(kept + reduced) if rank else source.meta
    x = self.contiguous(View(source.base, meta))
    kept_shape = [int(source.meta.shape[d]) for d in kept]
    cols = x.type.element_count() // max(1, _numel(kept_shape))
    rows_type = TensorType(x.type.element_type, [*kept_shape, cols])
    if x.type != rows_type:
        x = self.insert(graph.ReshapeOp(x, rows_type))
    results = []
    for kind, example in zip(_reduction_kinds(node), examples, strict=True):
        out = self.type_of(example)
        shape = list(out.get_shape())
        reduced_shape = shape if shape in (kept_shape, [*kept_shape, 1]) else kept_shape
        element = graph.reduce_result_dtype(kind, x.type.element_type)
        correction = int(_correction(bound)) if kind in graph.CORRECTED_KINDS else None
        op = graph.ReduceOp(x, kind, TensorType(element, reduced_shape), correction)
        value = self.insert(op)
        if value.type != out:
            value = self.insert(graph.ReshapeOp(value, out))
        results.append(self.result(value, example))
    return results if isinstance(node.meta["val"], (list, tuple)) else results[0]


def _reads_in_place(source: View, reduced: list[int], kinds: tuple[str, ...]) -> bool:
    """Whether a float reduction reads its dims in place (`reduce_cols`, then rows): dims
    of a contiguous tensor not all last already (where moving them last would copy it), by
    kinds that fold in steps; over several runs of adjacent dims in f32 only (a 16-bit
    type would round each step's result)."""
    meta = source.meta
    runs = _runs(reduced)
    return (
        bool(reduced)
        and (runs[0][-1] < meta.dim() - 1 if len(runs) == 1 else meta.dtype == torch.float32)
        and meta.is_contiguous()
        and all(kind in COLUMN_KINDS for kind in kinds)
    )


def _runs(dims: list[int]) -> list[list[int]]:
    """Ascending dims as runs of adjacent ones."""
    runs: list[list[int]] = []
    for d in dims:
        if runs and runs[-1][-1] == d - 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def _reduce_in_place(
    self: FunctionBuilder, source: View, reduced: list[int], kind: str, example: torch.Tensor
) -> View:
    """A reduction read in place: each run of adjacent reduced dims, the last first, is the
    middle dim of [before, run, after] (a kind over several runs reduces in steps: a sum of
    sums, an any of anys; argmax and argmin reduce one dim, or all of them, one run); a
    float run with nothing after it is a row reduction. Integer tensors always reduce so
    (they have no strided copy)."""
    x = self.contiguous(source)
    shape = [int(size) for size in source.meta.shape]
    if not shape:  # a 0-d tensor reduces as one element: its argmax is 0, its any a flag
        x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, [1])))
        shape, reduced = [1], [0]
    floating = source.meta.dtype.is_floating_point
    for run in reversed(_runs(reduced)):
        first, end = run[0], run[-1] + 1
        before, after = _numel(shape[:first]), _numel(shape[end:])
        element = graph.reduce_result_dtype(kind, x.type.element_type)
        if floating and after == 1:
            rows = TensorType(x.type.element_type, [before, _numel(shape[first:end])])
            if x.type != rows:
                x = self.insert(graph.ReshapeOp(x, rows))
            x = self.insert(graph.ReduceOp(x, kind, TensorType(element, [before])))
        else:
            lines = TensorType(x.type.element_type, [before, _numel(shape[first:end]), after])
            if x.type != lines:
                x = self.insert(graph.ReshapeOp(x, lines))
            result = TensorType(element, [before, after])
            x = self.insert(graph.ReduceOp(x, kind, result, dim=1))
        shape = shape[:first] + shape[end:]
    return _shaped_as(self, x, example)


def _cumsum_refusal(node: fx.Node) -> str | None:
    x, out = arg_example(node, 0), node.meta["val"]
    element = _element_type(x.dtype)
    if element is None:
        return f"cumsum of {x.dtype} is not supported"
    if x.numel() == 0:
        return "a cumsum of an empty tensor is not supported"
    if out.dtype == torch.bool or _element_type(out.dtype) is None:
        return f"cumsum to {out.dtype} is not supported"
    return None


@ATEN.handles("aten.cumsum.default", accepts=_cumsum_refusal)
def _cumsum(self: FunctionBuilder, node: fx.Node) -> View:
    """A prefix sum over any dim, read in place. With a `dtype` (`x.cumsum(-1,
    dtype=torch.int32)`) torch converts x to it first and sums in it: so does emmy, the
    scan's own result (an integer's in i64) converted back to it (an i32 sum wraps as
    the low half of the i64 one)."""
    example = node.meta["val"]
    x = self.operand(node.args[0])
    if not x.type.get_shape():
        x = self.insert(graph.ReshapeOp(x, TensorType(x.type.element_type, [1])))
    wanted = _element_type(example.dtype)
    assert wanted is not None, "_cumsum_refusal refuses a sum to a dtype emmy lacks"
    if node.kwargs.get("dtype") is not None and x.type.element_type != wanted:
        x = self.insert(graph.elementwise("convert", [x], TensorType(wanted, x.type.get_shape())))
    rank = len(x.type.get_shape())
    dim = arg_int(node, 1) % rank
    element = graph.reduce_result_dtype("sum", x.type.element_type)
    typ = TensorType(element, x.type.get_shape())
    scan = self.insert(graph.CumsumOp(x, typ, None if dim == rank - 1 else dim))
    if element != wanted:
        scan = self.insert(
            graph.elementwise("convert", [scan], TensorType(wanted, typ.get_shape()))
        )
    return _shaped_as(self, scan, example)


def _element_type(dtype: torch.dtype) -> Attribute | None:
    """The graph's element type of a torch dtype (a bool is i8), None for one it lacks."""
    if dtype == torch.bool:
        return i8
    name = dtypes.torch_dtype_name(dtype)
    return dtypes.xdsl_type(name) if name is not None and name != "i8" else None


def _softmax_refusal(node: fx.Node) -> str | None:
    x = arg_example(node, 0)
    if x.dim() == 0 or x.numel() == 0:
        return f"{op_name(node)} of a tensor of shape {list(x.shape)} is not supported"
    if node.meta["val"].dtype == x.dtype:
        return None
    return f"{op_name(node)} with a dtype conversion is not supported"


@ATEN.handles("aten.softmax.int", "aten._softmax.default", accepts=_softmax_refusal)
def _softmax(self: FunctionBuilder, node: fx.Node) -> View:
    def build(x: SSAValue[TensorType]) -> SSAValue[TensorType]:
        return self.insert(graph.SoftmaxOp(x, -1))

    return self.over_last_dim(node, arg_int(node, 1), build)


def _softmax_backward_refusal(node: fx.Node) -> str | None:
    grad, output = arg_example(node, 0), arg_example(node, 1)
    if output.dim() == 0 or output.numel() == 0:
        return f"{op_name(node)} of a tensor of shape {list(output.shape)} is not supported"
    if grad.dtype != output.dtype or grad.shape != output.shape:
        return f"{op_name(node)} of a gradient unlike the output is not supported"
    return None


@ATEN.handles(
    "aten._softmax_backward_data.default",
    "aten._log_softmax_backward_data.default",
    accepts=_softmax_backward_refusal,
)
def _softmax_backward(self: FunctionBuilder, node: fx.Node) -> View:
    """A (log-)softmax's gradient from its output, over its dim moved last, in the input's
    dtype (a softmax autocast computed in float32)."""
    log = op_name(node) == "aten._log_softmax_backward_data.default"
    wanted = self.type_of(node.meta["val"]).element_type

    def build(grad: SSAValue[TensorType], output: SSAValue[TensorType]) -> SSAValue[TensorType]:
        value = self.insert(graph.SoftmaxBackwardOp(grad, output, log))
        if value.type.element_type == wanted:
            return value
        converted = TensorType(wanted, value.type.get_shape())
        return self.insert(graph.elementwise("convert", [value], converted))

    return self.over_last_dim(node, arg_int(node, 2), build, operands=2)


@ATEN.handles("aten._log_softmax.default", "aten.log_softmax.int", accepts=_softmax_refusal)
def _log_softmax(self: FunctionBuilder, node: fx.Node) -> View:
    """x - logsumexp(x) over a dim: a row reduction, then a subtraction of its column."""

    def build(x: SSAValue[TensorType]) -> SSAValue[TensorType]:
        shape = list(x.type.get_shape())
        lse_type = TensorType(x.type.element_type, [*shape[:-1], 1])
        lse = self.insert(graph.ReduceOp(x, "logsumexp", lse_type))
        return self.insert(graph.elementwise("sub", [x, lse], x.type))

    return self.over_last_dim(node, arg_int(node, 1), build)
