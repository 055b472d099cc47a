"""resolve-forks: decides every fork of every site through the oracle stack.

    resolve-forks{pin="vec=2" target="emu" oracles="pins,golden,db,prior,target,default" db=""}

    fork.site @s "f" "n=6,T=f32" {
      %vec = fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0"
    }
  → (no pin, no row: the declared default, moved to the nearest valid option)
    fork.site @s "f" "n=6,T=f32" attributes {decision = #fork.decision<oracle = "default", evidence = #evidence.default<declared = false, moved_by_constraints = ["vec"]>>} {
      %vec = fork.knob "vec" [1, 2, 4] default 4 where "n % vec == 0" = 2 by "default"
    }

Pins narrow each site's configs to those that agree with them; the oracles then decide in
order (pins, golden files, the tuning database, the prior, the target default, the
declared default). Every
knob records which oracle set it (or "pin"), and the site keeps the decision's evidence
and runner-up. Same stores in, same choices out: every tie is broken by a fixed order.

Its options are the compile's, as text (`ResolveForks.of(options)`): emmy-opt spells the
pass a compile runs, and the compile runs the pass emmy-opt parses (emmy.passes.pipeline).
A Python caller may hand its own oracle stack (`stack`) instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
    op_type_rewrite_pattern,
)

from emmy.base.compile_options import CompileOptions
from emmy.base.errors import EmmyError
from emmy.base.identity import EMU
from emmy.dialects import fork
from emmy.recall.oracles import oracle_stack
from emmy.recall.query import Decider, Decision, SiteQuery
from emmy.sites.fork_space import ForkSpace

#: the module attribute resolve-forks records the golden imports' lines in
GOLDEN_IMPORTS = "golden_imports"


def _applies(pin: str, site: fork.SiteOp) -> str | None:
    """The fork a pin names in this site, if the pin is meant for it."""
    scope, _, fork_name = pin.rpartition(".")
    if scope and scope not in (site.family.data, site.sym_name.data):
        return None
    return fork_name


def site_pins(
    site: fork.SiteOp, options: dict[str, list], pins: dict[str, fork.Option]
) -> dict[str, fork.Option]:
    """The pins that apply to a site: its fork, and a value among that fork's options."""
    applied = {}
    for pin, value in pins.items():
        name = _applies(pin, site)
        if name in options and value in options[name]:
            applied[name] = value
    return applied


def check_pins(module: ModuleOp, pins: dict[str, fork.Option]) -> None:
    """Every pin must name a fork of some site and one of that fork's options."""
    sites = [op for op in module.ops if isinstance(op, fork.SiteOp)]
    for pin, value in pins.items():
        matching = [k for s in sites for k in s.knobs() if k.knob_name.data == _applies(pin, s)]
        if not matching:
            known = sorted({k.knob_name.data for s in sites for k in s.knobs()})
            raise EmmyError(
                f"bad pin {pin}={value}: no fork named {pin!r} (forks: {', '.join(known)})"
            )
        if not any(value in k.option_values for k in matching):
            raise EmmyError(
                f"bad pin {pin}={value}: not an option of fork {pin!r} {matching[0].option_values}"
            )


def site_query(site: fork.SiteOp, pins: dict[str, fork.Option]) -> SiteQuery:
    space = ForkSpace.of_site(site)
    key = site.key.data
    options = {name: list(values) for name, values in space.options.items()}
    return SiteQuery(
        name=site.sym_name.data,
        site=site.ref,
        default=dict(space.declared),
        pins=site_pins(site, options, pins),
        is_valid=lambda config: space.is_valid(key, config),
        enumerate_valid=lambda: space.configs(key),
        options=options,
    )


def record(site: fork.SiteOp, decision: Decision, pinned: set[str]) -> None:
    """Writes a decision into the site: each knob's value and source, the evidence."""
    for knob in site.knobs():
        name = knob.knob_name.data
        source = "pin" if name in pinned else decision.oracle
        knob.resolve(decision.config[name], source)
    site.decision = fork.DecisionAttr(decision.oracle, decision.evidence, decision.runner_up)


@dataclass(frozen=True)
class DecideSite(RewritePattern):
    """Asks the oracle stack for a site's config, and records it in the site."""

    stack: Decider
    pins: dict[str, fork.Option]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: fork.SiteOp, rewriter: PatternRewriter) -> None:
        query = site_query(op, self.pins)
        record(op, self.stack.decide(query), set(query.pins))
        for knob in op.knobs():
            rewriter.notify_op_modified(knob)
        rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class ResolveForks(ModulePass):
    """Chooses a value for every fork, and records where each choice came from. Its options
    are a compile's (CompileOptions.parse reads them as the `emmy` command's flags): the
    oracle stack is built from them, and the golden rows in scope imported into the
    database first, the lines saying so recorded on the module (`golden_imports`)."""

    name = "resolve-forks"

    #: pins, `fork=value` comma-separated (`family.fork` for one family's)
    pin: str = ""
    #: the device identity compiled for: only its measurements and golden files are read
    target: str = EMU
    #: the oracle stack, comma-separated ("" for the default one)
    oracles: str = ""
    #: the tuning database ("" for the default path, "none" for no database)
    db: str = ""
    #: recipe folders, comma-separated, whose golden/ files come before the model-agnostic
    #: ones
    golden: str = ""
    #: what decides each site in place of the stack the options build (a caller's own)
    stack: Decider | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, options: CompileOptions) -> ResolveForks:
        """The pass of a compile told `options`, its options spelled as text."""
        return cls(
            pin=str(options.pins),
            target=options.target,
            oracles=",".join(options.oracles),
            db="none" if options.db is None else str(options.db),
            golden=",".join(str(path) for path in options.golden),
        )

    def options(self) -> CompileOptions:
        return CompileOptions.parse(
            target=self.target, pins=self.pin, oracles=self.oracles, db=self.db, golden=self.golden
        )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        options = self.options()
        pins = dict(options.pins)
        check_pins(op, pins)
        stack = self.stack
        if stack is None:
            built = oracle_stack(options)
            imported = built.import_golden_rows()
            op.attributes[GOLDEN_IMPORTS] = ArrayAttr([StringAttr(line) for line in imported])
            stack = built
        # sites are the module's top-level ops: their kernels (most of its ops) need no walk;
        # each is decided once, in order
        decide = DecideSite(stack, pins)
        for site in [s for s in op.ops if isinstance(s, fork.SiteOp)]:
            decide.match_and_rewrite(site, PatternRewriter(site))


def golden_imports(module: ModuleOp) -> list[str]:
    """What resolve-forks said of the golden rows it imported (none where it was handed a
    stack)."""
    lines = module.attributes.get(GOLDEN_IMPORTS)
    if not isinstance(lines, ArrayAttr):
        return []
    return [line.data for line in lines if isinstance(line, StringAttr)]
