"""Every family the compiler knows, by name: lowering, the bench, the checks, golden files,
the dataset and the prior read them here. A family of a user's library (EMMY_LIBRARY_PATH)
with no entry here is still compiled and benched, but not checked."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from xdsl.ir import Operation

import emmy.families
from emmy.base.errors import EmmyError
from emmy.families.family import (
    ChoiceFamily,
    Family,
    Fuses,
    HostCallFamily,
    KernelFamily,
    MeasuredFamily,
    OpSites,
)


def discover(package: ModuleType) -> dict[str, Family]:
    """The entry (`FAMILY`) of each folder of the package, by the folder's name; a kernel
    family's folder also holds its declaration, `<name>.emmy`."""
    entries: dict[str, Family] = {}
    for found in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not found.ispkg:
            continue
        folder = Path(package.__path__[0]) / found.name
        entry = getattr(importlib.import_module(f"{package.__name__}.{found.name}"), "FAMILY", None)
        if not isinstance(entry, Family) or entry.name != found.name:
            raise EmmyError(f"{folder}/__init__.py: FAMILY is not a family named {found.name!r}")
        if isinstance(entry, KernelFamily) and not (folder / f"{found.name}.emmy").exists():
            raise EmmyError(f"{folder}: kernel family {found.name} has no {found.name}.emmy")
        entries[entry.name] = entry
    return entries


FAMILIES: dict[str, Family] = discover(emmy.families)

AnyFamily = TypeVar("AnyFamily", KernelFamily, HostCallFamily, ChoiceFamily, MeasuredFamily)


def registered(name: str) -> Family:
    entry = FAMILIES.get(name)
    if entry is None:
        raise EmmyError(f"family {name!r} has no registry entry (a folder of emmy/families/)")
    return entry


def registered_as(name: str, kind: type[AnyFamily]) -> AnyFamily:
    """The entry of `name`, which must be of this kind."""
    entry = registered(name)
    if not isinstance(entry, kind):
        raise EmmyError(f"family {name!r} is a {type(entry).__name__}, not a {kind.__name__}")
    return entry


def of_kind(kind: type[AnyFamily]) -> dict[str, AnyFamily]:
    return {name: entry for name, entry in FAMILIES.items() if isinstance(entry, kind)}


def implementing(op: Operation) -> OpSites | None:
    """The sites of the family whose sites stand for this graph op."""
    lowers = (entry.lowers for entry in of_kind(MeasuredFamily).values())
    return next((each for each in lowers if each is not None and isinstance(op, each.ops)), None)


def fusing(fuses: Fuses) -> tuple[type[Operation], ...]:
    """The graph ops whose kernels take these chains."""
    return tuple(
        op
        for entry in of_kind(KernelFamily).values()
        if entry.fuses == fuses and entry.lowers is not None
        for op in entry.lowers.ops
    )


def choice_forks() -> dict[str, dict[str, list[str]]]:
    """Per host-level choice family: its forks and their options."""
    return {
        name: {fork: list(options) for fork, options in entry.forks.items()}
        for name, entry in of_kind(ChoiceFamily).items()
    }
