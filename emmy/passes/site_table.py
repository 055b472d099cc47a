"""The sites of a module, by name and by (family, problem key): what lower-sites and every
paths pass make their sites through, so that a (family, key) has one site however many
ops meet it.

    fork.site @softmax_0 "softmax" "rows=8,cols=64,T=f32" { ... }
    fork.site @matmul_path_1 "matmul_path" "<the matmul's key>" { fork.knob "matmul" ... }
    func.func @main(...) { ... kernel.call @softmax_0(...) ... }

A new site is named `<family>_<n>`, n counting the table's sites.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import InsertPoint

from emmy.base.problem_key import KeyValue, ProblemKey
from emmy.dialects import fork
from emmy.dsl.keys import problem_key
from emmy.dsl.library import declaration
from emmy.sites.lower import instantiate


@dataclass
class SiteTable:
    """One site per (family, key). A table `of` a module starts with the module's sites
    (the sites lower-sites made serve a choice's options too) and puts a new one before the
    module's first function; an empty table (lower-sites, offer-paths) puts each before
    the function of the op that first meets it."""

    by_name: dict[str, fork.SiteOp] = field(default_factory=dict)
    by_key: dict[tuple[str, ProblemKey], str] = field(default_factory=dict)
    #: where a new site goes: before this op, else before the function of the op meeting it
    before: Operation | None = None

    @classmethod
    def of(cls, module: ModuleOp) -> SiteTable:
        by_name = {s.sym_name.data: s for s in module.ops if isinstance(s, fork.SiteOp)}
        return cls(
            by_name,
            {(s.family.data, s.key.data): name for name, s in by_name.items()},
            next((o for o in module.ops if not isinstance(o, fork.SiteOp)), None),
        )

    def site(
        self,
        rewriter: PatternRewriter,
        family_name: str,
        key: ProblemKey,
        build: Callable[[str], fork.SiteOp],
        meets: Operation | None = None,
    ) -> str:
        """The site of (family, key), made by `build(name)` the first time (`meets`, the
        op that meets it, says where in a table with no fixed place)."""
        name = self.by_key.get((family_name, key))
        if name is not None:
            return name
        name = f"{family_name}_{len(self.by_name)}"
        self.by_name[name] = build(name)
        self.by_key[family_name, key] = name
        where = self.before if self.before is not None else meets and _top_level(meets)
        assert where is not None, "a site made by a call is made before a function"
        rewriter.insert(self.by_name[name], InsertPoint.before(where))
        return name

    def library_site(
        self,
        rewriter: PatternRewriter,
        family_name: str,
        key: Mapping[str, KeyValue],
        meets: Operation | None = None,
    ) -> str:
        """The site of a kernel family of the library at a key, with its forks open."""
        decl = declaration(family_name)
        return self.site(
            rewriter,
            family_name,
            problem_key(decl, key),
            lambda name: instantiate(decl, key, name),
            meets,
        )

    def choice_site(
        self,
        rewriter: PatternRewriter,
        family_name: str,
        knob: str,
        key: ProblemKey,
        options: Sequence[str],
        meets: Operation | None = None,
        default: str | None = None,
    ) -> str:
        """The site of a host-level choice with one knob (its default the first option
        unless named)."""

        def build(name: str) -> fork.SiteOp:
            site = fork.SiteOp(name, family_name, key, kind=fork.SiteKind.CHOICE)
            site.body.block.add_op(fork.KnobOp(knob, options, default or options[0]))
            return site

        return self.site(rewriter, family_name, key, build, meets)

    def host_call_site(
        self,
        rewriter: PatternRewriter,
        family_name: str,
        key: ProblemKey,
        meets: Operation | None = None,
    ) -> str:
        """The site of a host-call family (the vendor library's op) at a key."""
        return self.site(
            rewriter,
            family_name,
            key,
            lambda name: fork.SiteOp(name, family_name, key, kind=fork.SiteKind.HOST_CALL),
            meets,
        )


def _top_level(op: Operation) -> Operation:
    """The op of the module that holds `op` (its function)."""
    while not isinstance(parent := op.parent_op(), ModuleOp):
        assert parent is not None, "the ops that meet sites live in a module"
        op = parent
    return op
