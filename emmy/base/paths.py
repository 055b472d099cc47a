"""Where emmy keeps its on-disk state."""

import os
import tempfile
from functools import cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
INCLUDE_DIR = PACKAGE_DIR / "runtime" / "include"
#: one folder per family: its `.emmy` declaration (a kernel family), its registry entry and
#: reference (`__init__.py`)
FAMILIES_DIR = PACKAGE_DIR / "families"
#: the recipes of the repository emmy is installed from (an editable install)
RECIPES_DIR = PACKAGE_DIR.parent / "recipes"
#: the committed prior (emmy/recall/committed_prior/): its weights and their metadata
PRIOR_DIR = PACKAGE_DIR / "recall" / "committed_prior"
WEIGHTS = "weights.npz"
METADATA = "metadata.json"


def library_dirs() -> tuple[Path, ...]:
    """emmy's kernel library (the folders of its kernel families, by name), then the folders
    of $EMMY_LIBRARY_PATH (os.pathsep-separated)."""
    extra = os.environ.get("EMMY_LIBRARY_PATH", "")
    return (*_family_dirs(), *(Path(p) for p in extra.split(os.pathsep) if p))


@cache
def _family_dirs() -> tuple[Path, ...]:
    return tuple(sorted(d for d in FAMILIES_DIR.iterdir() if d.is_dir() and any(d.glob("*.emmy"))))


def prior_dir() -> Path:
    """Where the prior of a compile is read: $EMMY_PRIOR_DIR, else the committed one."""
    override = os.environ.get("EMMY_PRIOR_DIR")
    return Path(override) if override else PRIOR_DIR


def prior_files() -> list[Path]:
    """The files whose content can change what the prior decides (for caches' stamps)."""
    directory = prior_dir()
    return [directory / WEIGHTS, directory / METADATA]


def cache_dir() -> Path:
    """The cache directory: $EMMY_CACHE_DIR, else ~/.cache/emmy. Created on first use."""
    root = os.environ.get("EMMY_CACHE_DIR")
    path = Path(root) if root else Path.home() / ".cache" / "emmy"
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_db_path() -> Path:
    """Where the tuning database is kept unless a compile or a bench names another."""
    return cache_dir() / "autotune.db"


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` by `data` whole (its folder made if need be): a crash or a concurrent
    reader sees the old file or the new one, never part of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
