"""The dataset side of the stores: freezes, the dataset database and its export.

- A *freeze* (`emmy db freeze`) is a content-hashed snapshot of measurement rows: a JSON lines
  file `freeze-<sha256[:12]>.jsonl`, named by the sha256 of its bytes. Its first line is a
  header, then one row per line, every object with sorted keys, the rows in an order fixed
  by their content. The header's `created` is when the newest of its rows was recorded, so
  the same rows frozen from the same database make the same bytes, the same name.
- `emmy db import` reads freezes, golden files and tuning databases into a dataset database
  (the tuning database's tables, in another file, never read by a compile): a row is stored
  once however many sources hold it (`Row.digest`), each row keeps links to the sources it
  was found in, and a source whose content was imported before is skipped. Every source is
  read and validated whole before anything is written, and everything is written in one
  transaction, so a malformed source leaves the database as it was.
- `emmy db export` writes the dataset read by `emmy fit` and `emmy eval`: `manifest.json`
  and one matrix file per pool (one family on one device under one regime), a row per
  problem key and a column per config (see `export`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from emmy.base.errors import EmmyError
from emmy.base.paths import write_atomic
from emmy.base.problem_key import parse_key
from emmy.recall.golden import golden_rows, load_golden
from emmy.recall.tuning_db import (
    LATER_FIELDS,
    STATUSES,
    ReadOnlyDB,
    Row,
    TuningDB,
    _problem,
    canonical_config,
)

FREEZE_FORMAT = "emmy-freeze"
FREEZE_SCHEMA = 1
EXPORT_SCHEMA = 1
#: the codes of an exported `status` matrix: code i means STATUS_CODES[i]
STATUS_CODES = ("missing", *STATUSES)

_SQLITE_MAGIC = b"SQLite format 3\x00"
_FREEZE_NAME = re.compile(r"freeze-([0-9a-f]{12})\.jsonl")
_HEADER_FIELDS = {"format", "schema", "created", "source", "filters", "rows"}
# a frozen row: every field of a Row but its id (local to the database it came from)
_ROW_FIELDS = {f.name for f in fields(Row)} - {"id"}

Progress = Callable[[str], None]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")


def pool_id(family: str, device: str, regime: str) -> str:
    return f"{family}__{device}__{regime}"


# --- freezing -----------------------------------------------------------------------------


def _record(row: Row) -> dict[str, Any]:
    # a later field at the value of the rows from before it is left out: their freezes stay
    record = {name: getattr(row, name) for name in _ROW_FIELDS}
    for name, (_, before) in LATER_FIELDS.items():
        if record[name] == before:
            del record[name]
    return record


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: what a row measured: (device, regime, family, key, canonical config)
Cell = tuple[str, str, str, str, str]


def cell(device: str, regime: str, family: str, key: str, config: Mapping[str, int | str]) -> Cell:
    """The cell of one config of a site on a device under a regime; a freeze's rows are in
    the order of their cells."""
    return (device, regime, family, key, canonical_config(config))


def row_cell(row: Row) -> Cell:
    """The cell a row measured."""
    return cell(row.device, row.regime, row.family, row.key, row.config)


def frozen_line(row: Row) -> str:
    """A row's line in a freeze."""
    return _line(_record(row))


def _row_lines(rows: Iterable[Row]) -> list[str]:
    """The frozen text of `rows`, one line each, in an order fixed by their content."""
    keyed = sorted((row_cell(row), frozen_line(row)) for row in rows)
    return [line for _, line in keyed]


@dataclass(frozen=True)
class Freeze:
    path: Path
    sha256: str
    rows: int
    written: bool  # False: the same file was already there


def freeze(
    db_path: Path,
    out_dir: Path,
    *,
    devices: Collection[str] = (),
    regimes: Collection[str] = (),
    families: Collection[str] = (),
) -> Freeze:
    """Snapshot the rows of `db_path` (of the given devices, regimes, families where given)
    into `out_dir/freeze-<hash12>.jsonl`; the same rows give the same file."""
    with ReadOnlyDB(db_path) as db:
        rows = db.rows(devices=devices, regimes=regimes, families=families)
    filters = {
        "device": sorted(set(devices)),
        "family": sorted(set(families)),
        "regime": sorted(set(regimes)),
    }
    if not rows:
        chosen = "; ".join(f"{k} {', '.join(v)}" for k, v in filters.items() if v)
        raise EmmyError(f"{db_path}: no rows to freeze" + (f" ({chosen})" if chosen else ""))
    return write_freeze(out_dir, freeze_bytes(rows, str(db_path), filters))


def freeze_bytes(
    rows: Sequence[Row], source: str, filters: dict[str, list[str]] | None = None
) -> bytes:
    """The bytes of a freeze of `rows` (at least one), read from `source`."""
    return assemble_freeze(_row_lines(rows), max(r.created for r in rows), source, filters)


def assemble_freeze(
    lines: Sequence[str],
    created: float,
    source: str,
    filters: dict[str, list[str]] | None = None,
) -> bytes:
    """The bytes of a freeze of rows already frozen (`frozen_line`, in `row_cell` order),
    the newest of them recorded at `created`."""
    header = {
        "format": FREEZE_FORMAT,
        "schema": FREEZE_SCHEMA,
        "created": _iso(created),
        "source": source,
        "filters": filters or {"device": [], "family": [], "regime": []},
        "rows": len(lines),
    }
    return "\n".join([_line(header), *lines]).encode() + b"\n"


def write_freeze(out_dir: Path, data: bytes) -> Freeze:
    """Writes a freeze's bytes into `out_dir` under its content's name, freeze-<sha256[:12]>
    .jsonl, atomically (a file of the same content already there is kept)."""
    sha256 = hashlib.sha256(data).hexdigest()
    rows = data.count(b"\n") - 1
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise EmmyError(f"{out_dir}: not a directory")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"freeze-{sha256[:12]}.jsonl"
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256:
            return Freeze(path, sha256, rows, written=False)
        write_atomic(path, data)
    except OSError as e:
        raise EmmyError(f"{out_dir}: cannot write the freeze ({e.strerror or e})") from None
    return Freeze(path, sha256, rows, written=True)


# --- reading sources ----------------------------------------------------------------------


@dataclass
class Source:
    """A file to import, read and validated whole."""

    path: Path
    kind: str  # freeze, golden, db
    sha256: str
    rows: list[Row] = field(default_factory=list)


def _check_fields(record: dict, fields: set[str], missing_text: str, unknown_text: str) -> None:
    """The first field a record lacks, or has beyond `fields`, as one line."""
    missing = sorted(fields - set(record))
    if missing:
        raise EmmyError(f"{missing_text} {missing[0]!r}")
    unknown = sorted(set(record) - fields)
    if unknown:
        raise EmmyError(f"{unknown_text} {unknown[0]!r}")


def _row_from_record(where: str, record: object) -> Row:
    if not isinstance(record, dict):
        raise EmmyError(f"{where}: a row is a JSON object, not {type(record).__name__}")
    record = {**{n: before for n, (_, before) in LATER_FIELDS.items()}, **record}
    _check_fields(record, _ROW_FIELDS, f"{where}: missing field", f"{where}: unknown field")
    for name in ("message", "kernel_hash", "bench"):
        if record[name] is not None and not isinstance(record[name], str):
            raise EmmyError(f"{where}: {name} {record[name]!r} is not a string or null")
    if record["resources"] is not None and not isinstance(record["resources"], dict):
        raise EmmyError(f"{where}: resources must be an object or null")
    created = record["created"]
    if isinstance(created, bool) or not isinstance(created, int | float):
        raise EmmyError(f"{where}: created {created!r} is not a number")
    if not isinstance(record["config"], dict):
        raise EmmyError(f"{where}: config must be an object")
    row = Row(**{**record, "created": float(created)})
    problem = _problem(row)
    if problem is not None:
        raise EmmyError(f"{where}: {problem}")
    return row


def _load_freeze(path: Path, data: bytes, sha256: str) -> Source:
    name = _FREEZE_NAME.fullmatch(path.name)
    if name and not sha256.startswith(name.group(1)):
        raise EmmyError(
            f"{path}: its content (sha256 {sha256[:12]}) does not match its name: the freeze"
            " was changed after it was written"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise EmmyError(f"{path}: not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise EmmyError(f"{path}:{number}:{e.colno}: invalid JSON: {e.msg}") from None
    if not records or not isinstance(records[0], dict):
        raise EmmyError(f"{path}:1: not a freeze header (a JSON object)")
    header = records[0]
    if header.get("format") != FREEZE_FORMAT:
        raise EmmyError(f"{path}:1: not an emmy freeze (format {header.get('format')!r})")
    if type(header.get("schema")) is not int or header["schema"] != FREEZE_SCHEMA:
        raise EmmyError(
            f"{path}:1: schema {header.get('schema')!r} is not one this emmy reads"
            f" (freeze schema {FREEZE_SCHEMA})"
        )
    _check_fields(
        header, _HEADER_FIELDS, f"{path}:1: header is missing", f"{path}:1: unknown header field"
    )
    count = header["rows"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise EmmyError(f"{path}:1: rows {count!r} is not a count")
    if count != len(records) - 1:
        raise EmmyError(
            f"{path}: the header says {count} rows but the file holds {len(records) - 1}"
            " (a truncated or edited freeze)"
        )
    rows = [_row_from_record(f"{path}:{i}", r) for i, r in enumerate(records[1:], start=2)]
    return Source(path, "freeze", sha256, rows)


def read_freeze(path: Path) -> list[Row]:
    """The rows of the freeze at `path`, read and validated whole."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise EmmyError(f"{path}: cannot read it ({e.strerror or e})") from None
    return _load_freeze(Path(path), data, hashlib.sha256(data).hexdigest()).rows


def _load_golden(path: Path) -> Source:
    golden = load_golden(path)
    # the rows a compile imports from this file into a tuning database, so that a tuning
    # database holding them and this file deduplicate
    rows = golden_rows(golden)
    return Source(path, "golden", golden.sha256, rows)


def _load_db(path: Path) -> Source:
    with ReadOnlyDB(path) as db:
        rows = db.rows()
    for row in rows:
        problem = _problem(row)
        if problem is not None:
            raise EmmyError(f"{path}: row {row.id} ({row.family}, {row.key}): {problem}")
    # its content: the text a freeze of all its rows would hold, whatever their ids
    sha256 = hashlib.sha256("\n".join(_row_lines(rows)).encode()).hexdigest()
    return Source(path, "db", sha256, rows)


def _is_freeze(path: Path, data: bytes) -> bool:
    """A .jsonl file, or one whose first line is a freeze header."""
    if path.suffix == ".jsonl":
        return True
    try:
        header = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return False
    return isinstance(header, dict) and header.get("format") == FREEZE_FORMAT


def source_files(paths: Sequence[Path]) -> list[Path]:
    """The files named, a folder standing for its freezes, golden files and databases."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(
                p
                for p in path.iterdir()
                if p.is_file() and p.suffix in (".jsonl", ".json", ".db") and p.name[0] != "."
            )
            if not found:
                raise EmmyError(f"{path}: holds no freeze (.jsonl), golden file (.json) or .db")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise EmmyError(f"{path}: no such file or directory")
    return files


def load_source(path: Path, known: Collection[str] = ()) -> Source:
    """Read and validate the source at `path` whole; EmmyError naming it if it is malformed.
    A freeze whose hash is in `known` is not parsed (its rows stay empty)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
        if head.startswith(_SQLITE_MAGIC):
            return _load_db(path)
        data = path.read_bytes()
    except OSError as e:
        raise EmmyError(f"{path}: cannot read it ({e.strerror or e})") from None
    if _is_freeze(path, data):
        sha256 = hashlib.sha256(data).hexdigest()
        if sha256 in known:
            return Source(path, "freeze", sha256)
        return _load_freeze(path, data, sha256)
    return _load_golden(path)


# --- importing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Imported:
    path: Path
    kind: str
    sha256: str
    rows: int
    added: int
    skipped_as: str | None = None  # the path of the same content imported before


def import_sources(
    db_path: Path, paths: Sequence[Path], progress: Progress = _stderr
) -> list[Imported]:
    """Import every source into the dataset database at `db_path`: all or nothing."""
    files = source_files(paths)
    known: dict[str, str] = {}
    if Path(db_path).is_file():
        with ReadOnlyDB(db_path) as db:
            known = {s["sha256"]: s["path"] for s in db.sources()}
    sources: list[Source] = []
    counts: list[tuple[int, int] | None] = []
    imported: dict[str, str] = {}
    results: dict[int, Imported] = {}
    seen: dict[str, str] = dict(known)
    for i, path in enumerate(files):
        progress(f"[{i + 1}/{len(files)}] reading {path}")
        source = load_source(path, known)
        if source.sha256 in seen:
            results[i] = Imported(path, source.kind, source.sha256, 0, 0, seen[source.sha256])
            continue
        seen[source.sha256] = str(path)
        sources.append(source)
    if sources:
        total = sum(len(s.rows) for s in sources)
        progress(f"writing {total} rows of {len(sources)} source(s) into {db_path}")
        with TuningDB(db_path) as db:
            counts = db.import_sources([(str(s.path), s.kind, s.sha256, s.rows) for s in sources])
            # another import may have taken a source since it was read
            imported = {s["sha256"]: s["path"] for s in db.sources()}
    done = iter(zip(sources, counts, strict=True))
    for i, path in enumerate(files):
        if i in results:
            continue
        source, count = next(done)
        if count is None:
            results[i] = Imported(path, source.kind, source.sha256, 0, 0, imported[source.sha256])
        else:
            results[i] = Imported(path, source.kind, source.sha256, count[0], count[1])
    return [results[i] for i in range(len(files))]


# --- reading the dataset ------------------------------------------------------------------


@dataclass
class Pool:
    family: str
    device: str
    regime: str
    rows: list[Row] = field(default_factory=list)

    @property
    def id(self) -> str:
        return pool_id(self.family, self.device, self.regime)

    @property
    def regime_words(self) -> str:
        # every row of a regime says the same; the most common, then the first, otherwise
        counts = Counter(r.regime_words for r in self.rows)
        return min(counts, key=lambda w: (-counts[w], w))


def _pools(rows: Iterable[Row]) -> list[Pool]:
    pools: dict[tuple[str, str, str], Pool] = {}
    for row in rows:
        site = (row.family, row.device, row.regime)
        pools.setdefault(site, Pool(*site)).rows.append(row)
    return [pools[k] for k in sorted(pools)]


@dataclass(frozen=True)
class PoolStats:
    id: str
    regime_words: str
    keys: int
    configs: int
    rows: int
    clean: int
    failures: dict[str, int]
    sources: int


@dataclass(frozen=True)
class Stats:
    path: Path
    pools: list[PoolStats]
    sources: list[dict[str, Any]]
    rows: int

    def lines(self) -> list[str]:
        if not self.pools:
            return [f"database {self.path}: no rows"]
        head = ("pool", "keys", "configs", "rows", "clean", "failures", "sources")
        table = [head] + [
            (
                p.id,
                str(p.keys),
                str(p.configs),
                str(p.rows),
                str(p.clean),
                " ".join(f"{s}={n}" for s, n in p.failures.items()) or "-",
                str(p.sources),
            )
            for p in self.pools
        ]
        widths = [max(len(r[i]) for r in table) for i in range(len(head))]
        right = {1, 2, 3, 4, 6}
        out = [
            "  ".join(
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
            for r in table
        ]
        pools = f"{len(self.pools)} pool{'s' * (len(self.pools) != 1)}"
        sources = f"{len(self.sources)} source{'s' * (len(self.sources) != 1)}"
        out.append(f"database {self.path}: {self.rows} rows in {pools}, {sources}")
        for s in self.sources:
            out.append(
                f"  source {s['id']}: {s['kind']} {s['path']} (sha256 {s['sha256'][:12]}):"
                f" {s['rows']} row{'s' * (s['rows'] != 1)}, {s['added']} new when imported"
            )
        return out


def stats(db_path: Path) -> Stats:
    """Per pool (family, device, regime): problem keys, configs, rows, clean rows,
    failures by status and the number of sources its rows came from."""
    with ReadOnlyDB(db_path) as db:
        rows = db.rows()
        sources = db.sources()
        links = db.links()
    by_row: dict[int, set[int]] = defaultdict(set)
    for measurement, source in links:
        by_row[measurement].add(source)
    pools = []
    for pool in _pools(rows):
        failures = Counter(r.status for r in pool.rows if not r.clean)
        pools.append(
            PoolStats(
                id=pool.id,
                regime_words=pool.regime_words,
                keys=len({r.key for r in pool.rows}),
                configs=len({canonical_config(r.config) for r in pool.rows}),
                rows=len(pool.rows),
                clean=sum(r.clean for r in pool.rows),
                failures={s: failures[s] for s in STATUSES if failures[s]},
                sources=len(set().union(*(by_row.get(r.id or 0, set()) for r in pool.rows))),
            )
        )
    return Stats(Path(db_path), pools, sources, len(rows))


# --- export -------------------------------------------------------------------------------


def _value_type(values: Iterable[int | str]) -> str:
    values = list(values)
    ints = values and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
    return "int" if ints else "symbol"


def _features(family: str, rows: Sequence[Row]) -> dict[str, dict[str, str]]:
    """The feature types of a family: its key's values and its forks, "int" or "symbol".

    Forks come from the declaration (a fork whose options are all ints is "int"); a key
    value is "int" when every key of the dataset has an int there (else the declaration's
    example decides). A family no longer declared is typed from its rows alone.
    """
    # the library loads xDSL, which the other `emmy db` commands (import, freeze, stats) need not
    from emmy.dsl.library import declaration

    seen_keys: dict[str, list[int | str]] = defaultdict(list)
    for key in sorted({r.key for r in rows}):
        for name, value in parse_key(key).items():
            seen_keys[name].append(value)
    seen_configs: dict[str, list[int | str]] = defaultdict(list)
    for row in rows:
        for name, value in row.config.items():
            seen_configs[name].append(value)
    try:
        decl = declaration(family)
    except EmmyError:
        decl = None
    if decl is None:
        key_names, forks = sorted(seen_keys), {n: seen_configs[n] for n in sorted(seen_configs)}
        example: dict[str, int | str] = {}
    else:
        # a name with a default that no row carries holds its default everywhere: no feature
        declared_names = [n for n in decl.key if n in seen_keys or n not in decl.key_defaults]
        key_names = declared_names + sorted(set(seen_keys) - set(decl.key))
        forks = {f.name: list(f.options) for f in decl.forks}
        forks.update({n: seen_configs[n] for n in sorted(set(seen_configs) - set(forks))})
        example = decl.example
    key_types = {
        name: _value_type(seen_keys[name] or ([example[name]] if name in example else []))
        for name in key_names
    }
    return {"key": key_types, "config": {n: _value_type(v) for n, v in forks.items()}}


def _matrices(pool: Pool) -> tuple[list[str], list[str], Any, Any, Any, int]:
    keys = sorted({r.key for r in pool.rows})
    configs = sorted({canonical_config(r.config) for r in pool.rows})
    key_index = {k: i for i, k in enumerate(keys)}
    config_index = {c: j for j, c in enumerate(configs)}
    median = np.full((len(keys), len(configs)), np.nan, dtype=np.float64)
    status = np.zeros((len(keys), len(configs)), dtype=np.int8)  # 0: missing
    batch = np.zeros((len(keys), len(configs)), dtype=np.int32)  # 0: no clean row
    latest: dict[tuple[int, int], tuple[float, int]] = {}
    for row in pool.rows:
        cell = (key_index[row.key], config_index[canonical_config(row.config)])
        if row.clean:
            assert row.median_s is not None
            if math.isnan(median[cell]) or row.median_s < median[cell]:
                median[cell] = row.median_s
                batch[cell] = row.batch
            status[cell] = STATUS_CODES.index("ok")
            continue
        if status[cell] == STATUS_CODES.index("ok"):
            continue
        order = (row.created, row.id or 0)
        if cell not in latest or order > latest[cell]:
            latest[cell] = order
            status[cell] = STATUS_CODES.index(row.status)
    return keys, configs, median, status, batch, int(np.count_nonzero(~np.isnan(median)))


def export(db_path: Path, out_dir: Path) -> dict[str, Any]:
    """Write the dataset of the database at `db_path` into `out_dir`; the manifest.

    `out_dir/manifest.json`:
        {"schema": 1, "created": ISO time, "database": db_path,
         "sources": [{"path", "kind": "freeze"|"golden"|"db", "sha256"}],
         "status_codes": ["missing", "ok", "compile_error", ...],
         "pools": [{"id": "<family>__<device>__<regime>", "family", "device", "regime",
                    "regime_words", "file": "<id>.npz", "keys": [sorted problem keys],
                    "configs": [sorted canonical configs], "rows": rows, "clean": clean cells}],
         "features": {family: {"key": {name: "int"|"symbol"}, "config": {fork: ...}}}}
    `out_dir/<id>.npz`: `median_s`, float64 [keys, configs], the best clean median of the
    cell, NaN where the config failed or was not measured; `status`, int8 [keys, configs],
    an index into status_codes: "ok" where a clean row exists, else the status of the
    cell's latest row, "missing" where there is none; `batch`, int32 [keys, configs], the
    launches per timed window of the row whose median the cell holds, 0 where none.
    The matrices are written first and the manifest last, each file replaced whole.
    """
    with ReadOnlyDB(db_path) as db:
        rows = db.rows()
        sources = db.sources()
    if not rows:
        raise EmmyError(f"{db_path}: no rows to export")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise EmmyError(f"{out_dir}: not a directory")
    pools = _pools(rows)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        entries = [_write_pool(out_dir, pool) for pool in pools]
        manifest = _manifest(db_path, rows, sources, entries)
        text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
        write_atomic(out_dir / "manifest.json", text.encode())
    except OSError as e:
        raise EmmyError(f"{out_dir}: cannot write the dataset ({e.strerror or e})") from None
    return manifest


def _write_pool(out_dir: Path, pool: Pool) -> dict[str, Any]:
    """Writes the matrices of a pool into `out_dir/<id>.npz`; its entry of the manifest."""
    keys, configs, median, status, batch, clean = _matrices(pool)
    buffer = io.BytesIO()
    np.savez(buffer, median_s=median, status=status, batch=batch)
    write_atomic(out_dir / f"{pool.id}.npz", buffer.getvalue())
    return {
        "id": pool.id,
        "family": pool.family,
        "device": pool.device,
        "regime": pool.regime,
        "regime_words": pool.regime_words,
        "file": f"{pool.id}.npz",
        "keys": keys,
        "configs": configs,
        "rows": len(pool.rows),
        "clean": clean,
    }


def _manifest(
    db_path: Path, rows: Sequence[Row], sources: Sequence[dict], entries: list[dict[str, Any]]
) -> dict[str, Any]:
    """The manifest of an export (its layout is export's docstring), stamped now."""
    by_family: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_family[row.family].append(row)
    return {
        "schema": EXPORT_SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": str(db_path),
        "sources": [{"path": s["path"], "kind": s["kind"], "sha256": s["sha256"]} for s in sources],
        "status_codes": list(STATUS_CODES),
        "pools": entries,
        "features": {f: _features(f, by_family[f]) for f in sorted(by_family)},
    }
