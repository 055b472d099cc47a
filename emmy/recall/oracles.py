"""The oracle stack: who decides a site's config, in order, and with what evidence.

Each oracle answers one question, `decide(query) -> Decision | None`: the config of a site
(family, problem key) among its valid configs, or nothing. The default stack is

    pins → golden (recipe, then model-agnostic) → tuning database → prior → target → default

`target` is the target default: what a site with no evidence takes on this class of
device before the declared default (on a GPU, the vendor library for matmuls and
attentions, so that a freshly rented machine never starts below torch); the emulator keeps
the declared defaults.

A user reorders or trims it with `--oracles`, and a package adds oracles through the
`emmy.oracles` entry point group (name → a class taking an `OracleContext`). Only rows and
golden entries of the compile's own device and deployable regime are ever read.

`oracle_stack` builds the stack of a compile from its CompileOptions (emmy.base.compile_options,
which parses and checks the oracles' names); the compiler (and emmy-opt) hands it to
resolve-forks, and runs `OracleStack.import_golden_rows` first, as a step of its own: the
database oracle weighs the golden files' measured entries beside the benches' rows.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from emmy.base.compile_options import DEFAULT_ORACLES, ORACLE_ENTRY_POINTS, CompileOptions
from emmy.base.errors import EmmyError
from emmy.base.identity import device_class
from emmy.base.problem_key import SiteRef
from emmy.base.regime import Regime, regime_for
from emmy.dialects import evidence
from emmy.dsl.library import declarations
from emmy.families.family import ChoiceFamily
from emmy.families.registry import FAMILIES, choice_forks
from emmy.recall.golden import GoldenFile, golden_paths, import_golden, load_golden
from emmy.recall.prior import load_prior
from emmy.recall.query import Decision, SiteQuery
from emmy.recall.tuning_db import Row, TuningDB
from emmy.sites.fork_space import ForkSpace, nearest_config


@dataclass
class OracleContext:
    """What oracles may consult: the device, its deployable regime, the stores in scope."""

    device: str
    regime: Regime
    db_path: Path | None
    golden_paths: list[Path]

    @cached_property
    def db(self) -> TuningDB | None:
        """The tuning database, opened when an oracle first reads it."""
        return None if self.db_path is None else TuningDB(self.db_path)

    @cached_property
    def golden(self) -> list[GoldenFile]:
        """Golden files in scope whose regime is this compile's; others are set aside."""
        files = []
        for path in self.golden_paths:
            golden = load_golden(path)
            if golden.device != self.device:
                raise EmmyError(f"{path}: golden file for {golden.device}, not {self.device}")
            check_against_library(golden)
            if golden.regime != self.regime.id:
                print(
                    f"emmy: warning: {path} was measured under regime {golden.regime}, not "
                    f"{self.regime.id} ({self.regime.words}): not read",
                    file=sys.stderr,
                )
                continue
            files.append(golden)
        return files


def check_against_library(golden: GoldenFile) -> None:
    """Every entry names a known family and a config of its forks' options; otherwise the
    whole file is refused, naming the entry, before anything of it is used."""
    known = {
        name: {f.name: list(f.options) for f in decl.forks} for name, decl in declarations().items()
    }
    known |= choice_forks()
    for i, entry in enumerate(golden.entries):
        where = f"{golden.path}: entry {i} ({entry.family}, {entry.key})"
        forks = known.get(entry.family)
        if forks is None:
            raise EmmyError(f"{where}: unknown family {entry.family!r}")
        if set(entry.config) != set(forks):
            raise EmmyError(
                f"{where}: config names forks {sorted(entry.config)}, the family has {sorted(forks)}"
            )
        for name, value in entry.config.items():
            if value not in forks[name]:
                raise EmmyError(
                    f"{where}: {name}={value!r} is not an option of fork {name} {forks[name]}"
                )


class Oracle(Protocol):
    name: str

    def decide(self, query: SiteQuery) -> Decision | None: ...


class PinsOracle:
    """Decides when the pins name every fork; partial pins only narrow the others' choice."""

    name = "pins"

    def __init__(self, context: OracleContext):
        self.context = context

    def decide(self, query: SiteQuery) -> Decision | None:
        if set(query.pins) != set(query.default):
            return None
        if not query.is_valid(query.pins):
            return None
        return Decision(dict(query.pins), self.name, evidence.PinsEvidence(query.pins))


class GoldenOracle:
    """The entry of the first golden file in scope (recipe, then model-agnostic) for the key."""

    name = "golden"

    def __init__(self, context: OracleContext):
        self.context = context

    def decide(self, query: SiteQuery) -> Decision | None:
        for golden in self.context.golden:
            entry = golden.entry(query.site.family, str(query.site.key))
            if entry is None:
                continue
            if not query.allows(entry.config):
                continue  # e.g. pins that disagree with the golden entry
            found = evidence.GoldenEvidence(str(golden.path), entry.median_s)
            return Decision(dict(entry.config), self.name, found)
        return None


class DatabaseOracle:
    """The fastest clean measurement of an allowed config (golden rows included)."""

    name = "db"

    def __init__(self, context: OracleContext):
        self.context = context

    def decide(self, query: SiteQuery) -> Decision | None:
        db = self.context.db
        if db is None:
            return None
        device, regime = self.context.device, self.context.regime.id
        rows = db.best(device, regime, query.site.family, str(query.site.key))
        # fastest first: the first two allowed rows are the pick and its runner-up
        allowed = list(itertools.islice((row for row in rows if query.allows(row.config)), 2))
        if not allowed:
            return None
        stored = [_stored(row) for row in allowed]  # (id, median), the pick's first
        ids = [row_id for row_id, _ in stored]
        measured = evidence.DatabaseEvidence(ids, stored[0][1], allowed[0].origin, len(rows))
        runner_up = None
        if len(allowed) > 1:
            second_id, second_s = stored[1]
            runner_up = evidence.MeasuredRunnerUp(allowed[1].config, second_s, second_id)
        return Decision(dict(allowed[0].config), self.name, measured, runner_up)


def _stored(row: Row) -> tuple[int, float]:
    """A stored clean row's id and median (TuningDB.best reads only those)."""
    if row.id is None or row.median_s is None:
        raise EmmyError(f"the tuning database gave a row with no id or no median: {row}")
    return row.id, row.median_s


class PriorOracle:
    """The learned prior's predicted-fastest config, where a fitted prior is committed."""

    name = "prior"

    def __init__(self, context: OracleContext):
        self.context = context
        self.prior = load_prior(context.device)

    def decide(self, query: SiteQuery) -> Decision | None:
        if self.prior is None:
            return None
        return self.prior.decide(query)


class TargetDefaultOracle:
    """The options the site's family declares for this class of device (its
    `target_defaults`), the other forks at their declared defaults, the pins over both."""

    name = "target"

    def __init__(self, context: OracleContext):
        self.context = context
        self.device_class = device_class(context.device)

    def decide(self, query: SiteQuery) -> Decision | None:
        entry = FAMILIES.get(query.site.family)
        target = (
            entry.target_defaults.get(self.device_class)
            if isinstance(entry, ChoiceFamily)
            else None
        )
        if not target:
            return None
        wanted = {**query.default, **target, **query.pins}
        if not query.allows(wanted):
            return None  # e.g. a pin or the key rules the target's option out
        return Decision(wanted, self.name, evidence.TargetEvidence(self.device_class, target))


class DefaultOracle:
    """The kernel's declared default, or the allowed config nearest to it: fewest forks
    moved, then the smallest moves along their option lists, then the declared order."""

    name = "default"

    def __init__(self, context: OracleContext):
        self.context = context

    def decide(self, query: SiteQuery) -> Decision | None:
        wanted = {**query.default, **query.pins}
        nearest = nearest_config(wanted, query.options, query.allows, fixed=query.pins)
        if nearest is None:
            return None
        if nearest == wanted:
            return Decision(wanted, self.name, evidence.DefaultEvidence())
        moved = sorted(n for n in wanted if nearest[n] != wanted[n])
        return Decision(nearest, self.name, evidence.DefaultEvidence(moved_by_constraints=moved))


#: the built-in oracles by name, in the default stack's order (DEFAULT_ORACLES, which the
#: options' parser checks names against without importing the oracles)
BUILTIN_ORACLES: dict[str, type] = {
    oracle.name: oracle
    for oracle in (
        PinsOracle,
        GoldenOracle,
        DatabaseOracle,
        PriorOracle,
        TargetDefaultOracle,
        DefaultOracle,
    )
}
assert tuple(BUILTIN_ORACLES) == DEFAULT_ORACLES, "the default stack is every built-in oracle"


def oracle_classes() -> dict[str, type]:
    classes = dict(BUILTIN_ORACLES)
    for entry in entry_points(group=ORACLE_ENTRY_POINTS):
        classes.setdefault(entry.name, entry.load())
    return classes


class OracleStack:
    """The oracles of a compile, asked in order: the first to answer decides a site."""

    def __init__(self, context: OracleContext, names: tuple[str, ...] = DEFAULT_ORACLES):
        classes = oracle_classes()
        self.context = context
        self.names = names
        self.oracles: list[Oracle] = [classes[name](context) for name in names]

    def import_golden_rows(self) -> list[str]:
        """Copies the measured entries of the golden files in scope into the tuning database
        as golden rows, where the db oracle weighs them with the benches' rows (a plugin
        oracle may read the database too). One line per file, saying what was done."""
        reads_db = any(name == "db" or name not in BUILTIN_ORACLES for name in self.names)
        if not reads_db or self.context.db_path is None or not self.context.golden:
            return []
        db = self.context.db
        assert db is not None  # it has a path
        lines = []
        for golden in self.context.golden:
            if db.golden_imported(str(golden.path), golden.sha256):
                lines.append(f"golden rows of {golden.path} already in {db.path}")
                continue
            count = import_golden(db, golden)
            lines.append(f"imported {count} golden rows from {golden.path} into {db.path}")
        return lines

    def decide(self, query: SiteQuery) -> Decision:
        for oracle in self.oracles:
            decision = oracle.decide(query)
            if decision is not None:
                return decision
        pinned = ", ".join(f"{n}={v}" for n, v in query.pins.items())
        raise EmmyError(
            f"no oracle decided site {query.name} ({query.site.family}, {query.site.key})"
            + (f": no valid config with {pinned}" if pinned else "")
        )


def oracle_stack(options: CompileOptions) -> OracleStack:
    """The oracle stack of a compile: its oracles, its tuning database and the golden files
    of its recipe folders before the model-agnostic one, for its target."""
    paths: list[Path] = []
    for directory in options.golden or [None]:
        paths += [p for p in golden_paths(options.target, directory) if p not in paths]
    context = OracleContext(options.target, regime_for(options.target), options.db, paths)
    return OracleStack(context, options.oracles)


def site_query(site: SiteRef, fallback: Sequence[dict] = ()) -> SiteQuery:
    """The SiteQuery a compile would make for a site with no pins, from the library; for a
    family the library does not know, a query over `fallback` configs."""
    decl = declarations().get(site.family)
    values = site.key
    if decl is None:
        listed = [dict(c) for c in fallback]
        return SiteQuery(
            name=f"{site.family}_0",
            site=site,
            default=dict(listed[0]) if listed else {},
            pins={},
            is_valid=lambda c: c in listed,
            enumerate_valid=lambda: iter(listed),
        )
    space = ForkSpace.of(decl)
    return SiteQuery(
        name=f"{site.family}_0",
        site=site,
        default=dict(space.declared),
        pins={},
        is_valid=lambda c: space.is_valid(values, c),
        enumerate_valid=lambda: space.configs(values),
        options={name: list(options) for name, options in space.options.items()},
    )


def default_pick(query) -> dict | None:
    if not query.default:
        return None
    decision = DefaultOracle(None).decide(query)  # type: ignore[arg-type]
    return None if decision is None else decision.config
