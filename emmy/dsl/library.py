"""The kernel library: every kernel family's declaration (emmy/families/*/*.emmy, and the
folders of $EMMY_LIBRARY_PATH), loaded once. A declaration is what the kernel language says
of a family; the family's registry entry (emmy.families.registry) is the rest."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from emmy.base.errors import EmmyError
from emmy.base.paths import library_dirs
from emmy.dsl.ast import KernelDecl
from emmy.dsl.keys import active_params, canonical_key, complete_key
from emmy.dsl.parser import parse_file


def declarations() -> dict[str, KernelDecl]:
    """Every declaration of the library, by its kernel's name."""
    return _declarations(library_dirs())


@cache
def _declarations(directories: tuple[Path, ...]) -> dict[str, KernelDecl]:
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


def declaration(name: str) -> KernelDecl:
    """A family's declaration by name. By convention `<name>.emmy` declares it, so a compile parses only
    the files of the families it uses; any other file is searched after."""
    for directory in library_dirs():
        path = directory / f"{name}.emmy"
        if path.exists():
            for decl in _parse(path, path.stat().st_mtime_ns):
                if decl.name == name:
                    return decl
    decl = declarations().get(name)
    if decl is None:
        raise EmmyError(
            f"unknown kernel family {name!r}; known: {', '.join(sorted(declarations()))}"
        )
    return decl


__all__ = [
    "declarations",
    "declaration",
    "canonical_key",
    "active_params",
    "complete_key",
]
