"""An attention's paths (offer-paths, before fuse-graph): each attention becomes an
`alternatives` fork between the fused kernel, the unfused path built from the other families
(matmul → scaled causal softmax → matmul) and the vendor library (torch's SDPA, a host
call), decided like any fork by the `path` knob of an `attention_path` site.

    %o = graph.attention %q, %k, %v {scale = 0.125 : f64, causal} : ...
  →
    fork.site @attention_path_0 "attention_path" "<the attention's key>" {
      %path = fork.knob "path" ["fused", "unfused", "sdpa"] default "fused"
    }
    %o = fork.alternatives @attention_path_0 ["fused", "unfused", "sdpa"] {
      %a = graph.attention %q, %k, %v {scale = 0.125 : f64, causal} : ...
      fork.yield %a : ...
    } {
      %s = graph.matmul %q', %k' {transpose_b} ...    // [b·kv_heads, group·q_len, kv_len]
      %p = graph.softmax (%s' * 0.125) {dim = -1, causal} ...
      %r = graph.matmul %p', %v' ...
      fork.yield %r' : ...
    } {
      %l = graph.attention %q, %k, %v {scale = 0.125 : f64, causal, library} : ...
      fork.yield %l : ...
    } : ...

The primes are reshapes (no data moves): grouped-query heads are folded into the rows of
their key/value head. Attentions with the same key share one site, so the layers of a
model take one decision. An attention with a padding mask has no unfused path: the mask
is read per batch, a broadcast the softmax's prologue does not have.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType, f32
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.dialects import fork, graph
from emmy.dsl.keys import problem_key
from emmy.dsl.library import declaration
from emmy.families import attention, attention_backward_path, attention_path
from emmy.families.attention import attention_key
from emmy.families.chains import shape_of
from emmy.passes.host_choices import offer_choice
from emmy.passes.site_table import SiteTable


def library_path(op: graph.AttentionOp) -> list[Operation]:
    """The attention as the vendor library runs it (a host call once lowered)."""
    mask = op.mask
    library = graph.AttentionOp(
        op.q, op.k, op.v, op.scale.value.data, op.causal is not None, mask, library=True
    )
    return [library]


def unfused_path(op: graph.AttentionOp) -> list[Operation]:
    """The ops of softmax(q kᵀ · scale) v from matmuls and a softmax, the last one's result
    shaped like the attention's."""
    batch, heads, q_len, d = shape_of(op.q)
    _, kv_heads, kv_len, _ = shape_of(op.k)
    assert isinstance(op.q.type, TensorType)
    element = op.q.type.element_type
    rows = (heads // kv_heads) * q_len
    ops: list[Operation] = []

    def add(new: Operation) -> SSAValue:
        ops.append(new)
        return new.results[0]

    def reshape(value: SSAValue, *shape: int) -> SSAValue:
        return add(graph.ReshapeOp(value, TensorType(element, list(shape))))

    q = reshape(op.q, batch * kv_heads, rows, d)
    k = reshape(op.k, batch * kv_heads, kv_len, d)
    v = reshape(op.v, batch * kv_heads, kv_len, d)
    scores_type = TensorType(element, [batch * kv_heads, rows, kv_len])
    # k read in place as B [n, k], by the tensor-core family too
    scores = add(graph.MatmulOp(q, k, scores_type, transpose_b=True))
    scores = reshape(scores, batch, heads, q_len, kv_len)
    scale = op.scale.value.data
    if scale != 1.0:
        factor = add(graph.ConstantOp(scale, element))
        scores = add(graph.elementwise("mul", [scores, factor], scores.type))
    probabilities = add(graph.SoftmaxOp(scores, -1, causal=op.causal is not None))
    probabilities = reshape(probabilities, batch * kv_heads, rows, kv_len)
    out_type = TensorType(element, [batch * kv_heads, rows, d])
    out = add(graph.MatmulOp(probabilities, v, out_type, transpose_b=False))
    reshape(out, batch, heads, q_len, d)
    return ops


def _region(ops: list[Operation]) -> Region:
    return _region_of(ops, [ops[-1].results[0]])


def _region_of(ops: list[Operation], yielded: list[SSAValue]) -> Region:
    block = Block(ops)
    block.add_op(fork.YieldOp(yielded))
    return Region(block)


@dataclass(frozen=True)
class OfferAttentionPaths(RewritePattern):
    """An attention becomes the fused option of a choice whose other options are the
    unfused path and the vendor library."""

    sites: SiteTable

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.AttentionOp, rewriter: PatternRewriter) -> None:
        if op.library is not None or isinstance(op.parent_op(), fork.AlternativesOp):
            return  # already an option of a choice
        family_name, key = attention_key(op)
        paths = attention_path.paths_for(op)
        site_key = problem_key(declaration(family_name), key)
        knob = attention_path.KNOB
        site = self.sites.choice_site(rewriter, attention_path.NAME, knob, site_key, paths, op)
        builders = {"unfused": unfused_path, "sdpa": library_path}
        offer_choice(rewriter, op, site, paths, [_region(builders[p](op)) for p in paths[1:]])


def fused_gradients(op: graph.AttentionGradientsOp) -> tuple[list[Operation], list[SSAValue]]:
    """The gradients by emmy's kernels: each query's statistics, then the gradients of q, k
    and v from them; the ops, and the gradients."""
    scale, causal = op.scale.value.data, op.causal is not None
    qkv = (op.q, op.k, op.v)
    batch, heads, q_len, _ = shape_of(op.q)

    def part(aux: SSAValue, gradient: graph.AttentionGradient, typ: Attribute) -> Operation:
        return graph.AttentionBackwardOp(qkv, op.grad, aux, gradient, typ, scale, causal, op.mask)

    stats = part(op.out, graph.AttentionGradient.STATS, TensorType(f32, [batch, heads, q_len, 2]))
    gradients = [
        part(stats.results[0], gradient, value.type)
        for gradient, value in zip(GRADIENTS, qkv, strict=True)
    ]
    return [stats, *gradients], [g.results[0] for g in gradients]


#: the parts of graph.attention_backward that give the gradients of q, k and v
GRADIENTS = (
    graph.AttentionGradient.QUERY,
    graph.AttentionGradient.KEY,
    graph.AttentionGradient.VALUE,
)


def library_gradients(
    op: graph.AttentionGradientsOp,
) -> tuple[list[Operation], list[SSAValue]]:
    """The gradients as the vendor library computes them (a host call once lowered); the
    op, and the gradients."""
    scale, causal = op.scale.value.data, op.causal is not None
    qkv = (op.q, op.k, op.v)
    library = graph.AttentionGradientsOp(qkv, op.grad, op.out, scale, causal, op.mask, library=True)
    return [library], list(library.results)


@dataclass(frozen=True)
class OfferAttentionBackwardPaths(RewritePattern):
    """An attention's gradients become a choice between emmy's kernels and the vendor
    library's backward."""

    sites: SiteTable

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.AttentionGradientsOp, rewriter: PatternRewriter) -> None:
        if op.library is not None:
            return  # already an option of a choice
        scale, causal = op.scale.value.data, op.causal is not None
        key = attention.problem_of(op.q, op.k, op.mask, scale, causal)
        site_key = problem_key(declaration("attention_dq"), key)
        paths: list[str] = list(attention_backward_path.PATHS)
        name, knob = attention_backward_path.NAME, attention_backward_path.KNOB
        site = self.sites.choice_site(rewriter, name, knob, site_key, paths, op)
        regions = [
            _region_of(ops, yielded)
            for ops, yielded in (fused_gradients(op), library_gradients(op))
        ]
        choice = fork.AlternativesOp(site, paths, regions, [r.type for r in op.results])
        rewriter.replace(op, choice)
