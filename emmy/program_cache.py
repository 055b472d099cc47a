"""A cache of compiled programs, so a second compile of the same model with the same
knowledge does no work beyond reading a file.

The key is the graph's text, its constants' names, the compile's options (their canonical
form: target, pins, oracles, stores, flags), and a fingerprint of what a compile reads to
decide: the tuning database's rows, the golden files in scope, the
prior's weights, the kernel library and emmy's own code. A bench that
writes a row, a promoted golden entry or an edited kernel changes the fingerprint, and the
next compile decides afresh.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path

from emmy.base.compile_options import CompileOptions
from emmy.base.paths import PACKAGE_DIR, cache_dir, library_dirs, prior_files, write_atomic
from emmy.base.version import __version__
from emmy.program import Program
from emmy.recall.golden import MODEL_AGNOSTIC_DIR
from emmy.recall.tuning_db import content_stamp

#: bumped when Program's fields or the key's parts change, so old pickles are never read
FORMAT = "program-v9"


def _stamp(path: Path) -> str:
    try:
        stat = path.stat()
    except OSError:
        return f"{path}:absent"
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def _files(directory: Path, pattern: str) -> Iterable[Path]:
    return sorted(directory.rglob(pattern)) if directory.is_dir() else []


def stores_stamp(options: CompileOptions) -> str:
    """What a compile reads to decide, as text: the tuning database's content stamp and
    the size and time of every file whose content can change a decision or the output."""
    stamps = [] if options.db is None else [content_stamp(options.db)]
    stamps += [_stamp(path) for path in store_files(options)]
    return "\n".join(stamps)


def store_files(options: CompileOptions) -> list[Path]:
    """Every file besides the database whose content can change a compile."""
    golden = f"{options.target}.json"
    files = [MODEL_AGNOSTIC_DIR / golden]
    files += [directory / "golden" / golden for directory in options.golden]
    files += prior_files()
    for directory in library_dirs():
        files += _files(directory, "*.emmy")
    files += _files(PACKAGE_DIR, "*.py")
    files += _files(PACKAGE_DIR / "runtime" / "include", "*")
    return files


def program_key(graph_text: str, options: CompileOptions, constants: Sequence[str]) -> str:
    """The key of a compile of `graph_text` (its last arguments the constants named) as
    `options` say, with the stores as they are now."""
    digest = hashlib.sha256()
    for part in (
        FORMAT,
        __version__,
        graph_text,
        repr(tuple(constants)),
        options.canonical(),
        stores_stamp(options),
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / "programs" / f"{key}.pickle"


def load(key: str) -> Program | None:
    path = _path(key)
    if not path.exists():
        return None
    try:
        with path.open("rb") as file:
            program = pickle.load(file)  # our own cache directory, written by save()
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None  # a damaged or stale entry is a miss
    return program if isinstance(program, Program) else None


def save(key: str, program: Program) -> None:
    """Keeps the program for the next compile; a cache that cannot be written (a full or
    read-only disk) costs that compile's speed, never this one's result."""
    path = _path(key)
    try:
        write_atomic(path, pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError:
        return
