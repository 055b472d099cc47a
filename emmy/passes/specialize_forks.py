"""specialize-forks: applies resolved forks, so that only constants remain in kernels.

Each resolved `fork.knob` becomes an `arith.constant` of its value (a symbol's index), the
chosen region of each kernel-level `fork.alternatives` is inlined in its place, and the
site keeps its config and the provenance of every choice as attributes. Host-level
alternatives (chosen by a site) are left to inline-host-paths, which reads those configs.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i32
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from emmy.base.errors import EmmyError
from emmy.dialects import fork
from emmy.dialects.fold import fold_int


class KnobToConstant(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: fork.KnobOp, rewriter: PatternRewriter) -> None:
        if op.value is None:
            raise EmmyError(f"fork {op.knob_name.data!r} is unresolved: run resolve-forks first")
        encoded = op.encode(fork.option_value(op.value))
        rewriter.replace(op, arith.ConstantOp(IntegerAttr(encoded, i32)))


class InlineChosenAlternative(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: fork.AlternativesOp, rewriter: PatternRewriter) -> None:
        if op.selector is None or isinstance(op.selector.owner, fork.KnobOp):
            return  # chosen by a site (inline-host-paths), or the knob becomes a constant first
        chosen = op.branches[fold_int(op.selector, "the alternatives selector")]
        rewriter.inline_block(chosen.block, InsertPoint.before(op))
        rewriter.erase(op)


def record_config(site: fork.SiteOp) -> None:
    """Keeps on the site the value and the provenance of each of its resolved forks."""
    knobs = site.knobs()
    site.config = fork.ConfigAttr(
        {k.knob_name.data: fork.option_value(k.value) for k in knobs if k.value is not None}
    )
    site.provenance = fork.ProvenanceAttr(
        {k.knob_name.data: k.provenance.data for k in knobs if k.provenance is not None}
    )


@dataclass(frozen=True)
class SpecializeForks(ModulePass):
    name = "specialize-forks"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for site in op.walk():
            if isinstance(site, fork.SiteOp) and site.knobs():
                record_config(site)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([KnobToConstant(), InlineChosenAlternative()])
        ).rewrite_module(op)
