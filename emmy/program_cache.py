"""A cache of compiled programs, so a second compile of the same model with the same
knowledge does no work beyond reading a file.

The key is the graph's text, the target, the compile options, and a fingerprint of what a
compile reads to decide: the tuning database's rows, the golden files in scope, the
prior's weights, the kernel library and emmy's own code. A bench that
writes a row, a promoted golden entry or an edited kernel changes the fingerprint, and the
next compile decides afresh.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Iterable
from pathlib import Path

from emmy.paths import PACKAGE_DIR, cache_dir, library_dirs, prior_files, write_atomic
from emmy.program import Program
from emmy.recall.tuning_db import content_stamp, default_db_path
from emmy.version import __version__

#: bumped when Program's fields change, so old pickles are never read
FORMAT = "program-v8"


def _stamp(path: Path) -> str:
    try:
        stat = path.stat()
    except OSError:
        return f"{path}:absent"
    return f"{path}:{stat.st_size}:{stat.st_mtime_ns}"


def _files(directory: Path, pattern: str) -> Iterable[Path]:
    return sorted(directory.rglob(pattern)) if directory.is_dir() else []


def stores_stamp(target: str, db: str, golden: str) -> str:
    """What a compile reads to decide, as text: the tuning database's content stamp and
    the size and time of every file whose content can change a decision or the output."""
    stamps = [] if db == "none" else [content_stamp(Path(db) if db else default_db_path())]
    stamps += [_stamp(path) for path in store_files(target, golden)]
    return "\n".join(stamps)


def store_files(target: str, golden: str) -> list[Path]:
    """Every file besides the database whose content can change a compile."""
    files: list[Path] = []
    files.append(PACKAGE_DIR / "search" / "golden" / f"{target}.json")
    if golden:
        files.append(Path(golden) / "golden" / f"{target}.json")
    files += prior_files()
    for directory in library_dirs():
        files += _files(directory, "*.emmy")
    files += _files(PACKAGE_DIR, "*.py")
    files += _files(PACKAGE_DIR / "runtime" / "include", "*")
    return files


def program_key(graph_text: str, target: str, options: dict[str, object], stores: str) -> str:
    digest = hashlib.sha256()
    for part in (
        FORMAT,
        __version__,
        graph_text,
        target,
        repr(sorted(options.items())),
        stores,
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
