"""offer-paths: offers each op that has several correct paths as a host-level choice (a
`fork.alternatives` of its options, and a choice site with one knob that resolve-forks
decides like any fork):

- an attention (the fused kernel, the unfused matmul → softmax → matmul, the vendor's SDPA)
  and its gradients (emmy's kernels, the vendor's backward), while they are graph ops:
  their options are graph ops that fuse and lower like any (attention_paths.py);
- a matmul (its kernel, split-K, the vendor library; matmul_paths.py), a convolution and
  its weight gradient (the kernel, splits of the depth, cuDNN; conv_paths.py) and a decode
  attention (one pass, or the cache split; decode_paths.py), once they are kernel calls:
  their options are kernel calls.

The pipeline runs it where each is met: before fuse-graph, and after lower-sites. An op
in an option of a choice is not offered again.

    %c = kernel.call @matmul_tc_0(%a, %b) : ...
  → %c = fork.alternatives @matmul_path_1 ["kernel", "split2", "vendor"] { ... } : ...
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriteWalker,
    RewritePattern,
)

from emmy.passes.attention_paths import OfferAttentionBackwardPaths, OfferAttentionPaths
from emmy.passes.conv_paths import OfferConvPaths
from emmy.passes.decode_paths import OfferSplitKV
from emmy.passes.matmul_paths import OfferMatmulPaths
from emmy.passes.site_table import SiteTable


def _offer(module: ModuleOp, pattern: RewritePattern) -> None:
    """`pattern` over the host functions, once: the choices it makes are not walked again
    (their options are the ops it offered), and what it offers lives in the host functions,
    not in the sites' kernels (most of the module)."""
    walker = PatternRewriteWalker(pattern, apply_recursively=False)
    for function in [f for f in module.ops if isinstance(f, func.FuncOp)]:
        walker.rewrite_region(function.body)


@dataclass(frozen=True)
class OfferPaths(ModulePass):
    name = "offer-paths"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # a table each: each attention family's choice sites are counted on their own
        attentions = [OfferAttentionPaths(SiteTable()), OfferAttentionBackwardPaths(SiteTable())]
        _offer(op, GreedyRewritePatternApplier(attentions))
        # each in turn, each with the module's sites as they are then
        for offer in (OfferMatmulPaths, OfferConvPaths, OfferSplitKV):
            _offer(op, offer(SiteTable.of(op)))
