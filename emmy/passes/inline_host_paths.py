"""inline-host-paths: takes the chosen option of every host-level choice.

    %o = fork.alternatives @attention_path_0 ["fused", "unfused"] {
      %a = kernel.call @attention_1(%q, %k, %v) : ...
      fork.yield %a : tensor<1x2x8x16xf32>
    } { ... } : tensor<1x2x8x16xf32>
  → (the choice site's config is {path = "fused"})
    %a = kernel.call @attention_1(%q, %k, %v) : ...

First the choice site keeps, as `paths`, the kernel calls of every option (family, key,
config and tensor types of each), so that a bench can time the options not taken; then
the option its config names replaces each `fork.alternatives`; last, the sites that only
an option not taken called are dropped (kernel sites and host calls alike). It reads the
configs specialize-forks records, so it runs after that pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint, Rewriter

from emmy.base.errors import EmmyError
from emmy.dialects import fork, kernel

#: the module's sites by name, read once: a symbol lookup scans the module
Sites = dict[str, fork.SiteOp]


def path_call(call: kernel.CallOp, sites: Sites) -> fork.PathCallAttr:
    """A kernel call as a path records it: its site's family, key and config (a host call
    has no forks, so no config), and its tensors' types."""
    site = sites[call.site.root_reference.data]
    # kernel.call's operands and results are tensors (its constraints, verified)
    inputs = cast(Sequence[TensorType], call.inputs.types)
    outputs = cast(Sequence[TensorType], call.outputs.types)
    return fork.PathCallAttr(
        site.family,
        site.key,
        site.config or fork.ConfigAttr({}),
        ArrayAttr(inputs),
        ArrayAttr(outputs),
    )


@dataclass(frozen=True)
class RecordPaths(RewritePattern):
    """Keeps on a choice's site the calls of every option, before one is taken."""

    sites: Sites

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: fork.AlternativesOp, rewriter: PatternRewriter) -> None:
        if op.site is None:
            return  # a kernel's own choice: specialize-forks took it
        site = self.sites[op.site.root_reference.data]
        if site.paths is not None:
            return  # another choice of the same key recorded them
        site.paths = fork.PathsAttr(
            {
                name.data: [
                    path_call(c, self.sites) for c in branch.walk() if isinstance(c, kernel.CallOp)
                ]
                for name, branch in zip(op.names, op.branches, strict=True)
            }
        )
        rewriter.notify_op_modified(site)


def chosen_option(site: fork.SiteOp) -> str:
    """The option the config of a choice site names."""
    config = site.config.as_dict() if site.config is not None else {}
    if len(config) != 1:
        raise EmmyError(
            f"the fork of choice site @{site.sym_name.data} is unresolved: "
            "run resolve-forks and specialize-forks first"
        )
    (value,) = config.values()
    return str(value)


@dataclass(frozen=True)
class InlineChosenPath(RewritePattern):
    """Replaces a host-level choice by the ops of the option its site chose."""

    sites: Sites

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: fork.AlternativesOp, rewriter: PatternRewriter) -> None:
        if op.site is None:
            return
        chosen = [n.data for n in op.names].index(
            chosen_option(self.sites[op.site.root_reference.data])
        )
        yielded = op.yielded(chosen)
        assert yielded is not None, "the verifier checks every option yields the results"
        values = list(yielded.values)
        rewriter.erase(yielded)
        rewriter.inline_block(op.branches[chosen].block, InsertPoint.before(op))
        rewriter.replace(op, [], values)


def called_sites(ops: Iterable[Operation]) -> set[str]:
    return {c.site.root_reference.data for c in ops if isinstance(c, kernel.CallOp)}


@dataclass(frozen=True)
class InlineHostPaths(ModulePass):
    name = "inline-host-paths"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # host-level choices live in the host functions: the kernels of the sites (most of
        # the module's ops) need no walk
        functions = [f for f in op.ops if isinstance(f, func.FuncOp)]
        choices = [
            a for f in functions for a in f.walk() if isinstance(a, fork.AlternativesOp) and a.site
        ]
        if not choices:
            return
        # only sites an option named may go: a site nothing called is the user's to keep
        in_options = called_sites(c for choice in choices for c in choice.walk())
        sites = {s.sym_name.data: s for s in op.ops if isinstance(s, fork.SiteOp)}
        record = PatternRewriteWalker(RecordPaths(sites))
        # the applier also erases what is dead once the options not taken are gone
        inline = PatternRewriteWalker(GreedyRewritePatternApplier([InlineChosenPath(sites)]))
        for function in functions:
            record.rewrite_region(function.body)
        for function in functions:
            inline.rewrite_region(function.body)
        not_taken = in_options - called_sites(c for f in functions for c in f.walk())
        for name in not_taken:
            Rewriter.erase_op(sites[name])
