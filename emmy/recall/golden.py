"""Golden files: the configurations committed in the repo, read first by an ordinary compile.

`recipes/<model>/golden/<device>.json` holds a recipe's, `emmy/recall/golden_configs/<device>.json`
the model-agnostic ones. A file is one device and one regime; each entry is one site
(family, problem key) with its config, its measured time and where it was promoted from.

A file is validated whole before anything uses it, so a malformed one is reported (path,
entry, what is wrong) and never half-applied. Files are written sorted and indented, so the
same content is the same bytes and a promotion reads well as a diff.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emmy.base.errors import EmmyError
from emmy.base.identity import is_well_formed
from emmy.base.paths import PACKAGE_DIR, write_atomic
from emmy.recall.tuning_db import Row, TuningDB

GOLDEN_SCHEMA = 1
MODEL_AGNOSTIC_DIR = PACKAGE_DIR / "recall" / "golden_configs"

_REGIME_ID = re.compile(r"r-[0-9a-f]{12}")
_FILE_FIELDS = {"schema", "device", "regime", "regime_words", "entries"}
_ENTRY_FIELDS = {"family", "key", "config", "median_s", "promoted_from"}


@dataclass(frozen=True)
class GoldenEntry:
    family: str
    key: str
    config: dict[str, int | str]
    median_s: float | None = None
    promoted_from: dict = field(default_factory=dict)


@dataclass(frozen=True)
class GoldenFile:
    path: Path
    device: str
    regime: str
    regime_words: str
    entries: tuple[GoldenEntry, ...]

    @functools.cached_property
    def _index(self) -> dict[tuple[str, str], GoldenEntry]:
        return {(e.family, e.key): e for e in self.entries}

    def entry(self, family: str, key: str) -> GoldenEntry | None:
        return self._index.get((family, key))

    def text(self) -> str:
        """The file's canonical text: what `promote` writes."""
        entries = sorted(self.entries, key=lambda e: (e.family, e.key))
        doc = {
            "schema": GOLDEN_SCHEMA,
            "device": self.device,
            "regime": self.regime,
            "regime_words": self.regime_words,
            "entries": [
                {
                    "family": e.family,
                    "key": e.key,
                    "config": e.config,
                    "median_s": e.median_s,
                    "promoted_from": e.promoted_from,
                }
                for e in entries
            ],
        }
        return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    @functools.cached_property
    def sha256(self) -> str:
        """The hash of the content (of its canonical text, so reformatting is no change)."""
        return hashlib.sha256(self.text().encode()).hexdigest()


# --- loading ------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(path: Path, i: int, raw: dict, name: str) -> str:
    value = raw.get(name)
    if value is None:
        raise EmmyError(f"{path}: entry {i}: missing {name!r}")
    if not isinstance(value, str) or not value:
        raise EmmyError(f"{path}: entry {i}: {name} {value!r} is not a non-empty string")
    return value


def _entry(path: Path, i: int, raw: object) -> GoldenEntry:
    if not isinstance(raw, dict):
        raise EmmyError(f"{path}: entry {i}: not an object")
    family, key = (_text(path, i, raw, name) for name in ("family", "key"))
    where = f"{path}: entry {i} ({family}, {key})"
    unknown = sorted(set(raw) - _ENTRY_FIELDS)
    if unknown:
        raise EmmyError(f"{where}: unknown field {unknown[0]!r}")
    if "config" not in raw:
        raise EmmyError(f"{where}: missing 'config'")
    config = raw["config"]
    if not isinstance(config, dict) or not config:
        raise EmmyError(f"{where}: config must be a non-empty object")
    for name, value in config.items():
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise EmmyError(f"{where}: config {name!r}: {value!r} is not an int or a string")
    median = raw.get("median_s")
    if median is not None and not (_is_number(median) and median > 0):
        raise EmmyError(f"{where}: median_s {median!r} is not a positive number")
    promoted = raw.get("promoted_from", {})
    if not isinstance(promoted, dict):
        raise EmmyError(f"{where}: promoted_from must be an object")
    return GoldenEntry(family, key, config, None if median is None else float(median), promoted)


def load_golden(path: Path) -> GoldenFile:
    """Read and validate a golden file whole; EmmyError naming the path (and entry) if bad."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise EmmyError(f"{path}: cannot read the golden file ({e.strerror})") from None
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise EmmyError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise EmmyError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    if not isinstance(doc, dict):
        raise EmmyError(f"{path}: a golden file is a JSON object, not {type(doc).__name__}")
    if "schema" not in doc:
        raise EmmyError(f"{path}: missing 'schema' (the golden file schema version)")
    if type(doc["schema"]) is not int or doc["schema"] != GOLDEN_SCHEMA:
        raise EmmyError(
            f"{path}: schema {doc['schema']!r} is not one this emmy reads"
            f" (golden schema {GOLDEN_SCHEMA})"
        )
    unknown = sorted(set(doc) - _FILE_FIELDS)
    if unknown:
        raise EmmyError(f"{path}: unknown field {unknown[0]!r}")
    for name in ("device", "regime", "regime_words"):
        if name not in doc:
            raise EmmyError(f"{path}: missing {name!r}")
        if not isinstance(doc[name], str):
            raise EmmyError(f"{path}: {name} {doc[name]!r} is not a string")
    device, regime = doc["device"], doc["regime"]
    if not is_well_formed(device):
        raise EmmyError(
            f"{path}: device {device!r} is not a device identity such as 'nvidia-h200-sm90'"
        )
    if device != path.stem:
        raise EmmyError(f"{path}: device {device!r} differs from the file name's {path.stem!r}")
    if not _REGIME_ID.fullmatch(regime):
        raise EmmyError(f"{path}: regime {regime!r} is not a regime id such as 'r-0123456789ab'")
    raw_entries = doc.get("entries")
    if not isinstance(raw_entries, list):
        raise EmmyError(f"{path}: 'entries' must be a list")
    entries: list[GoldenEntry] = []
    seen: dict[tuple[str, str], int] = {}
    for i, raw in enumerate(raw_entries):
        entry = _entry(path, i, raw)
        site = (entry.family, entry.key)
        if site in seen:
            raise EmmyError(
                f"{path}: entry {i} ({entry.family}, {entry.key}): duplicate of entry {seen[site]}"
            )
        seen[site] = i
        entries.append(entry)
    return GoldenFile(path, device, regime, doc["regime_words"], tuple(entries))


def golden_paths(device: str, recipe_dir: Path | None = None) -> list[Path]:
    """The golden files in scope for `device` that exist: the recipe's, then model-agnostic."""
    if not is_well_formed(device):
        raise EmmyError(f"device {device!r} is not a device identity such as 'nvidia-h200-sm90'")
    candidates = [MODEL_AGNOSTIC_DIR / f"{device}.json"]
    if recipe_dir is not None:
        candidates.insert(0, Path(recipe_dir) / "golden" / f"{device}.json")
    return [p for p in candidates if p.is_file()]


# --- the database side --------------------------------------------------------------------


def import_golden(db: TuningDB, golden: GoldenFile) -> int:
    """Copy the file's measured entries into `db` as golden rows, replacing an earlier copy
    of the same file; 0 when this content is already there (the common case: one lookup).

    Entries without a median stay out of the database (they are not clean measurements);
    the golden oracle still reads them from the file.
    """
    source = str(golden.path)
    if db.golden_imported(source, golden.sha256):
        return 0
    return len(db.replace_golden(source, golden.sha256, golden_rows(golden)))


def golden_rows(golden: GoldenFile) -> list[Row]:
    """A golden file's measured entries as the rows a tuning database holds of it."""
    return [
        Row(
            device=golden.device,
            regime=golden.regime,
            regime_words=golden.regime_words,
            compiler="golden",
            family=e.family,
            key=e.key,
            config=e.config,
            origin="golden",
            status="ok",
            median_s=e.median_s,
            bench=str(golden.path),
        )
        for e in golden.entries
        if e.median_s is not None
    ]


def _ratio(slow: float | None, fast: float) -> float | None:
    return None if slow is None else round(slow / fast, 4)


def _promote_site(
    db: TuningDB, device: str, regime: str, family: str, key: str
) -> GoldenEntry | None:
    """The golden entry the measurements of one site make, or None if it has none clean."""
    # golden rows are copies of a file, not evidence: only measured rows compete
    candidates = db.best(device, regime, family, key, origins=("pick", "forced"))
    if not candidates:
        return None
    winner = candidates[0]
    assert winner.median_s is not None  # best() returns clean rows only
    runner_up = candidates[1].median_s if len(candidates) > 1 else None
    picks = [r for r in db.rows(device, regime, family, key) if r.origin == "pick"]
    old = picks[-1] if picks else None
    promoted_from: dict[str, Any] = {
        "benches": sorted({r.bench for r in candidates if r.bench is not None}),
        "row_id": winner.id,
        "compiler": winner.compiler,
        "emmy_version": winner.emmy_version,
        "margin_over_runner_up": _ratio(runner_up, winner.median_s),
        "old_pick": None if old is None else {"config": old.config, "median_s": old.median_s},
        "margin_over_old_pick": _ratio(old.median_s if old else None, winner.median_s),
        "rows_beaten": len(candidates) - 1,
    }
    return GoldenEntry(family, key, winner.config, winner.median_s, promoted_from)


def promote(
    db: TuningDB,
    device: str,
    regime: str,
    regime_words: str,
    path: Path,
    *,
    family: str | None = None,
    key: str | None = None,
) -> list[GoldenEntry]:
    """Make the fastest clean measured config of each site (of `device` under `regime`, or
    only those of `family` / `key`) the golden entry of that site in the file at `path`.

    The file's entries for other sites are kept. Returns the promoted entries.
    """
    path = Path(path)
    if not is_well_formed(device):
        raise EmmyError(f"device {device!r} is not a device identity such as 'nvidia-h200-sm90'")
    if not _REGIME_ID.fullmatch(regime):
        raise EmmyError(f"regime {regime!r} is not a regime id such as 'r-0123456789ab'")
    if path.stem != device:
        raise EmmyError(f"{path}: a golden file for {device!r} must be named {device}.json")
    existing: tuple[GoldenEntry, ...] = ()
    if path.exists():
        old = load_golden(path)  # a malformed file is reported, never overwritten
        if old.regime != regime:
            raise EmmyError(
                f"{path}: holds regime {old.regime} ({old.regime_words}), not {regime}:"
                " a golden file is one regime"
            )
        existing = old.entries
    sites = [
        (f, k)
        for f, k in db.sites(device, regime)
        if (family is None or f == family) and (key is None or k == key)
    ]
    promoted = [e for f, k in sites if (e := _promote_site(db, device, regime, f, k))]
    if not promoted:
        which = "" if family is None and key is None else f" for ({family or '*'}, {key or '*'})"
        raise EmmyError(
            f"nothing to promote{which} on {device} under regime {regime}: {db.path} has no"
            " clean measured row there"
        )
    done = {(e.family, e.key) for e in promoted}
    kept = [e for e in existing if (e.family, e.key) not in done]
    golden = GoldenFile(path, device, regime, regime_words, tuple(kept + promoted))
    write_atomic(path, golden.text().encode())
    return promoted
