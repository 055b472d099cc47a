"""`emmy campaign plan`: the items of a campaign, from the sites of compiled programs.

A source (an expression, a recipe, a model directory, or each expression of the dataset's
key grid) is compiled for each device kind wanted with the declared defaults and the given
pins, as `emmy run --bench --oracles default` compiles it. Each kernel site of the program
becomes an item (its family, key, buffers and pinned forks), and so does each host-level
choice (with every option's kernels). A site found on several device kinds is one item
naming them all.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from emmy.base.compile_options import CompileOptions, parse_pins
from emmy.base.errors import EmmyError
from emmy.build import build_program
from emmy.campaign import DEFAULT_MAX_ROWS
from emmy.campaign.grid import grid
from emmy.campaign.items import Campaign, Item
from emmy.dsl.library import declaration
from emmy.families.family import ChoiceFamily
from emmy.families.registry import FAMILIES
from emmy.frontend.cache import traced_graph_text
from emmy.measure.bench import program_sites
from emmy.program import Program
from emmy.sites.fork_space import ForkSpace

#: the oracle stack of a planning compile: the pins, else the declared defaults
PLAN_ORACLES = ("pins", "default")

#: (graph text, constants, where, pins, what the plan says the items came from)
Source = tuple[str, Sequence[str], str, str, str]


def parse_configs(text: str) -> object:
    """`--configs` as an item's configs: default, all, sample=N or sweep=FORK[,FORK...]."""
    if text in ("default", "all"):
        return text
    name, equals, value = text.partition("=")
    if equals and name == "sample" and value.isdigit() and int(value) > 0:
        return {"sample": int(value)}
    if equals and name == "sweep" and value:
        return {"sweep": [fork.strip() for fork in value.split(",") if fork.strip()]}
    raise EmmyError(
        f"--configs {text!r}: expected default, all, sample=N (N >= 1) or sweep=FORK[,FORK...]"
    )


def _forks_of(family_name: str) -> set[str]:
    entry = FAMILIES[family_name]
    if isinstance(entry, ChoiceFamily):
        return set(entry.forks)
    return set(ForkSpace.of(declaration(family_name)).names)


def _configs_for(family_name: str, configs: object) -> object:
    """A plan's configs at one family: a sweep keeps the forks the family has (none: its
    default alone)."""
    if not isinstance(configs, dict) or "sweep" not in configs:
        return configs
    forks = [f for f in configs["sweep"] if f in _forks_of(family_name)]
    return {"sweep": forks} if forks else "default"


def program_items(
    program: Program, device: str, configs: object, max_rows: int, source: str
) -> list[Item]:
    """An item per kernel site and per host-level choice of a compiled program."""
    items = []
    for work in program_sites(program):
        items.append(
            Item(
                site=work.site,
                configs=_configs_for(work.site.family, configs),
                devices=(device,),
                inputs=tuple(work.inputs),
                outputs=tuple(work.outputs),
                pinned={name: work.pick[name] for name in sorted(work.pinned)},
                source=source,
                max_rows=max_rows,
            )
        )
    for name, choice in program.choices.items():
        provenance = program.provenance.get(name)
        forks = provenance.forks if provenance is not None else {}
        pinned = {n: v for n, v in choice.config.items() if forks.get(n) == "pin"}
        items.append(
            Item(
                site=choice.site,
                configs=_configs_for(choice.site.family, configs),
                devices=(device,),
                pinned=pinned,
                paths=choice.paths_json(),
                source=source,
                max_rows=max_rows,
            )
        )
    return items


def merged(items: Iterable[Item]) -> list[Item]:
    """One item per site, naming every device kind it was found on, in first-found order."""
    by_site: dict[str, Item] = {}
    for item in items:
        record = item.to_json()
        del record["devices"]
        record.pop("from", None)
        site = json.dumps(record, sort_keys=True)
        known = by_site.get(site)
        if known is None:
            by_site[site] = item
            continue
        devices = tuple(dict.fromkeys([*known.devices, *item.devices]))
        by_site[site] = replace(known, devices=devices)
    return list(by_site.values())


def grid_sources(families: Sequence[str] = (), every: int = 1) -> list[Source]:
    """The expressions of the dataset's key grid (of `families` where given; every Nth key
    of each group)."""
    groups = grid()
    unknown = sorted(set(families) - set(groups))
    if unknown:
        raise EmmyError(f"--family {unknown[0]}: not a group of the grid ({', '.join(groups)})")
    if every < 1:
        raise EmmyError("--every must be 1 or more")
    return [
        (traced_graph_text(expression), (), f"<{expression}>", pins, expression)
        for group, expressions in groups.items()
        if not families or group in families
        for expression, pins in expressions[::every]
    ]


def plan(
    path: Path,
    sources: Iterable[Source] | Callable[[], Iterable[Source]],
    devices: Sequence[str],
    *,
    configs: object = "default",
    max_rows: int = DEFAULT_MAX_ROWS,
    flags: str = "",
    output: str | None = None,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> Campaign:
    """The campaign of every site of the sources' programs on each of `devices`."""
    items: list[Item] = []
    listed = list(sources() if callable(sources) else sources)
    for index, (text, constants, where, pins, source) in enumerate(listed, 1):
        progress(f"[{index}/{len(listed)}] {source}")
        for device in devices:
            options = CompileOptions(
                target=device, pins=parse_pins(pins), oracles=PLAN_ORACLES, db=None
            )
            program = build_program(text, options, constants=list(constants), where=where)
            items += program_items(program, device, configs, max_rows, source)
    campaign = Campaign(path, tuple(merged(items)), flags, tuple(devices), output)
    for item in campaign.items:
        item.wanted_configs()  # a sweep of a fork that no valid config varies is refused here
    return campaign
