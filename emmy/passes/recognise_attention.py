"""recognise-attention: `softmax(q · kᵀ · scale) · v` written out as two matmuls and a
softmax becomes one `graph.attention`, which the library runs as a fused kernel.

    %s = graph.matmul %q, %k {transpose_b} ...      // [b, h, n, d] x [b, h, m, d]
    %t = graph.mul %s, %c ...                       // optional: a constant scale (or div)
    %p = graph.softmax %t {dim = -1} ...            // or {dim = -1, causal}
    %o = graph.matmul %p, %v ...                    // [b, h, n, m] x [b, h, m, d]
  →
    %o = graph.attention %q, %k, %v {scale = c}     // {scale = c, causal} from a causal softmax

Only where the scores and probabilities have no other use (nothing else reads the
[n, m] matrices) and q, k, v are batched like attention's [batch, heads, len, dim].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.dialects import graph
from emmy.families.chains import shape_of

OpT = TypeVar("OpT", bound=Operation)


def _only_use(value: SSAValue, kind: type[OpT]) -> OpT | None:
    """The producer of `value` if it is a `kind` whose result nothing else reads."""
    producer = value.owner
    if isinstance(producer, kind) and value.has_one_use():
        return producer
    return None


def _scaling_of(value: SSAValue) -> tuple[graph.BinaryOp, float] | None:
    """The graph.mul or graph.div by a scalar constant that computes `value`, read nowhere
    else, and the constant factor it applies."""
    op = value.owner
    if not value.has_one_use() or not isinstance(op, graph.BinaryOp):
        return None
    if not isinstance(op, (graph.MulOp, graph.DivOp)):
        return None
    constant = op.rhs.owner
    if not isinstance(constant, graph.ConstantOp):
        return None
    factor = float(constant.value.value.data)
    if isinstance(op, graph.DivOp):
        return None if factor == 0 else (op, 1.0 / factor)
    return op, factor


class AttentionFromMatmuls(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.MatmulOp, rewriter: PatternRewriter) -> None:
        if op.transpose_b is not None or op.transpose_a is not None:
            return
        softmax = _only_use(op.lhs, graph.SoftmaxOp)
        if softmax is None or softmax.dim.value.data not in (-1, len(shape_of(op.lhs)) - 1):
            return
        scores, scale = softmax.input, 1.0
        scaling = _scaling_of(scores)
        if scaling is not None:
            scores, scale = scaling[0].lhs, scaling[1]
        product = _only_use(scores, graph.MatmulOp)
        if product is None or product.transpose_b is None or product.transpose_a is not None:
            return
        q, k, v = product.lhs, product.rhs, op.rhs
        shapes = [shape_of(x) for x in (q, k, v)]
        if (
            any(len(s) != 4 for s in shapes)
            or shapes[1] != shapes[2]
            or shapes[0][:2] != shapes[1][:2]
        ):
            return
        # graph.softmax's causal hides column j of row i where j > i, and the rows of these
        # scores are the queries: the attention kernels' causal (key j hidden from query i
        # where j > i, top-left aligned at any q_len and kv_len) is the same mask
        causal = softmax.causal is not None
        attention = graph.AttentionOp(q, k, v, scale, causal)
        dead = [softmax, *([scaling[0]] if scaling is not None else []), product]
        rewriter.replace(op, attention)
        for victim in dead:
            rewriter.erase(victim)


@dataclass(frozen=True)
class RecogniseAttention(ModulePass):
    name = "recognise-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(AttentionFromMatmuls(), apply_recursively=False).rewrite_module(op)
