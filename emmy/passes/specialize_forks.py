"""specialize-forks: applies resolved forks, so that only constants remain.

Each resolved `fork.knob` becomes an `arith.constant` of its value (a symbol's index), the
chosen region of each `fork.alternatives` is inlined in its place, and the site keeps its
config and the provenance of every choice as attributes. A host-level alternatives' site
also keeps, as `paths`, the kernel calls of every option (family, key, config and tensor
types of each), so that a bench can time the options not taken; kernel sites that only an
option not taken called are dropped (and so are host calls: the vendor library's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, TensorType, i32
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from emmy.backend.fold import fold_int
from emmy.dialects import fork, kernel
from emmy.dtypes import dtype_name
from emmy.errors import EmmyError
from emmy.passes.choices import HOST_FAMILIES


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
            return  # chosen by a site (see `take_paths`), or the knob becomes a constant first
        chosen = op.branches[fold_int(op.selector, "the alternatives selector")]
        rewriter.inline_block(chosen.block, InsertPoint.before(op))
        rewriter.erase(op)


@dataclass(frozen=True)
class SpecializeForks(ModulePass):
    name = "specialize-forks"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for site in op.walk():
            if isinstance(site, fork.SiteOp) and site.knobs():
                site.attributes["config"] = DictionaryAttr(
                    {k.knob_name.data: k.value for k in site.knobs() if k.value is not None}
                )
                site.attributes["provenance"] = DictionaryAttr(
                    {
                        k.knob_name.data: k.provenance
                        for k in site.knobs()
                        if k.provenance is not None
                    }
                )
        take_paths(op)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([KnobToConstant(), InlineChosenAlternative()])
        ).rewrite_module(op)


def _tensor(value) -> list:
    assert isinstance(value.type, TensorType)
    return [list(value.type.get_shape()), dtype_name(value.type.element_type)]


def _calls(region, sites: dict[str, fork.SiteOp]) -> list[dict]:
    """The kernel calls of one option, each with what a bench needs to run it alone."""
    calls = []
    for call in region.walk():
        if not isinstance(call, kernel.CallOp):
            continue
        site = sites[call.site.root_reference.data]
        config = site.attributes.get("config", DictionaryAttr({}))  # a host call: no forks
        assert isinstance(config, DictionaryAttr)
        calls.append(
            {
                "family": site.family.data,
                "key": site.key.data,
                "config": {k: fork.option_value(v) for k, v in config.data.items()},
                "inputs": [_tensor(v) for v in call.inputs],
                "outputs": [_tensor(v) for v in call.outputs],
            }
        )
    return calls


def take_paths(module: ModuleOp) -> None:
    """Inlines the chosen option of every host-level `fork.alternatives` (its site's knob
    decides), after recording every option's calls on that site."""
    sites = {s.sym_name.data: s for s in module.ops if isinstance(s, fork.SiteOp)}
    choices = [a for a in module.walk() if isinstance(a, fork.AlternativesOp) and a.site]
    if not choices:
        return
    for choice in choices:
        assert choice.site is not None
        name = choice.site.root_reference.data
        site = sites.get(name)
        if site is None or len(site.knobs()) != 1:
            raise EmmyError(
                f"fork.alternatives is chosen by @{name}, which is not a site of one fork"
            )
        (knob,) = site.knobs()
        if knob.value is None:
            raise EmmyError(
                f"fork {knob.knob_name.data!r} of {site.sym_name.data} is unresolved: "
                "run resolve-forks first"
            )
        names = [n.data for n in choice.names]
        if "paths" not in site.attributes:
            paths = {
                name: _calls(region, sites)
                for name, region in zip(names, choice.branches, strict=True)
            }
            site.attributes["paths"] = StringAttr(json.dumps(paths, sort_keys=True))
        chosen = names.index(fork.option_value(knob.value))
        yielded = choice.yielded(chosen)
        assert yielded is not None, "the verifier checks every option yields the results"
        values = list(yielded.values)
        yielded.detach()
        yielded.erase(safe_erase=False)
        block = choice.parent_block()
        assert block is not None
        for inner in list(choice.branches[chosen].block.ops):
            inner.detach()
            block.insert_op_before(inner, choice)
        for result, value in zip(choice.outputs, values, strict=True):
            result.replace_all_uses_with(value)
        choice.detach()
        choice.erase(safe_erase=False)
    called = {c.site.root_reference.data for c in module.walk() if isinstance(c, kernel.CallOp)}
    for name, site in sites.items():
        has_kernel = any(isinstance(o, kernel.FuncOp) for o in site.body.block.ops)
        runs = has_kernel or site.family.data in HOST_FAMILIES
        if runs and name not in called:
            site.detach()
            site.erase(safe_erase=False)
