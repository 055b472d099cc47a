"""merge-reshapes: one graph.reshape per value and shape, and reshapes after the
elementwise ops that read them. The frontend reshapes a value for each use that views it
so, and a model's chain often reads a product through a reshape (transformers' Conv1D
views addmm's [tokens, n] as [batch, seq, n]): three reshapes of one product read by
gelu_new, between the matmul's bias add and the rest of the chain, hid from fuse-graph
that the chain alone reads the product.

    %a = graph.reshape %mm : tensor<16x256xf32> -> tensor<2x8x256xf32>
    %b = graph.reshape %mm : tensor<16x256xf32> -> tensor<2x8x256xf32>
    %y = graph.mul %a, %b : ...
  →
    %a = graph.reshape %mm : tensor<16x256xf32> -> tensor<2x8x256xf32>
    %y = graph.mul %a, %a : ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from emmy.dialects import graph
from emmy.families.chains import shape_of


class MergeReshape(RewritePattern):
    """A reshape of a value to a shape an earlier reshape in its block gave it already."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.ReshapeOp):
            return
        block = op.parent_block()
        earlier = [
            use.operation
            for use in op.input.uses
            if isinstance(use.operation, graph.ReshapeOp)
            and use.operation is not op
            and use.operation.parent_block() is block
            and use.operation.result.type == op.result.type
        ]
        if block is None or not earlier:
            return
        first = min(earlier, key=block.get_operation_index)
        if block.get_operation_index(first) < block.get_operation_index(op):
            rewriter.replace(op, [], [first.result])


class SinkReshape(RewritePattern):
    """An elementwise op of reshaped values of one shape (and of single elements), which
    broadcasts none, one of them computed by an elementwise op: the op on the values, then
    the reshape, so that the chains before and after it are one. (A product read through a
    reshape stays so: the chain after it is a row kernel's prologue as it was.)"""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, graph.ElementwiseOp):
            return
        out = op.results[0].type
        reshaped = [v.owner for v in op.operands if isinstance(v.owner, graph.ReshapeOp)]
        if not isinstance(out, TensorType):
            return
        if not any(isinstance(r.input.owner, graph.ElementwiseOp) for r in reshaped):
            return
        source = shape_of(reshaped[0].input)
        found = [_unreshaped(v, source, out) for v in op.operands]
        operands = [v for v in found if v is not None]
        if len(operands) != len(found):
            return
        moved = type(op).create(
            operands=operands,
            result_types=[TensorType(out.element_type, source)],
            properties=dict(op.properties),
            attributes=dict(op.attributes),
        )
        reshape = graph.ReshapeOp(moved.results[0], out)
        rewriter.replace(op, [moved, reshape], [reshape.result])
        for old in reshaped:
            if not old.result.uses and old.parent is not None:
                rewriter.erase(old)


def _unreshaped(value: SSAValue, source: tuple[int, ...], out: TensorType) -> SSAValue | None:
    """What the moved op reads for `value`: a reshape's input of the `source` shape where
    the reshape gives the op's shape, a single element as it is, else None."""
    owner = value.owner
    if isinstance(owner, graph.ReshapeOp) and shape_of(owner.input) == source:
        return owner.input if shape_of(value) == tuple(out.get_shape()) else None
    shape = shape_of(value)
    return value if math.prod(shape) == 1 and len(shape) <= len(source) else None


@dataclass(frozen=True)
class MergeReshapes(ModulePass):
    name = "merge-reshapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        walker = PatternRewriteWalker(
            GreedyRewritePatternApplier([MergeReshape(), SinkReshape()]),
            apply_recursively=True,
        )
        for function in [f for f in op.ops if isinstance(f, func.FuncOp)]:
            walker.rewrite_region(function.body)
