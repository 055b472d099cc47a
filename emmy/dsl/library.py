"""The kernel library: every family declared in emmy/families/*/*.emmy, loaded once."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path

from emmy.base.errors import EmmyError
from emmy.base.paths import library_dirs
from emmy.base.problem_key import KeyValue
from emmy.dialects import fork
from emmy.dsl.keys import active_params, canonical_key, complete_key
from emmy.dsl.lower import Lowering
from emmy.dsl.parser import KernelDecl, parse_file


def families() -> dict[str, KernelDecl]:
    return _families(library_dirs())


@cache
def _families(directories: tuple[Path, ...]) -> dict[str, KernelDecl]:
    decls: dict[str, KernelDecl] = {}
    for directory in directories:
        for path in sorted(directory.glob("*.emmy")):
            for decl in _parse(path, path.stat().st_mtime_ns):
                if decl.name in decls:
                    raise EmmyError(f"{path}:{decl.line}:1: family {decl.name} is declared twice")
                decls[decl.name] = decl
    return decls


@cache
def _parse(path: Path, mtime_ns: int) -> tuple[KernelDecl, ...]:
    return tuple(parse_file(path))


def family(name: str) -> KernelDecl:
    """A family by name. By convention `<name>.emmy` declares it, so a compile parses only
    the files of the families it uses; any other file is searched after."""
    for directory in library_dirs():
        path = directory / f"{name}.emmy"
        if path.exists():
            for decl in _parse(path, path.stat().st_mtime_ns):
                if decl.name == name:
                    return decl
    decl = families().get(name)
    if decl is None:
        raise EmmyError(f"unknown kernel family {name!r}; known: {', '.join(sorted(families()))}")
    return decl


def instantiate(decl: KernelDecl, key: Mapping[str, KeyValue], site_name: str) -> fork.SiteOp:
    """The site of `decl` for one problem key, with all its forks unresolved."""
    return Lowering(decl, key, site_name).site()


__all__ = [
    "families",
    "family",
    "instantiate",
    "canonical_key",
    "active_params",
    "complete_key",
]
