"""The tuning database: every measured row, in sqlite, and the one place its schema is defined.

A bench writes rows (its own pick, forced rows and failures); a compile reads the best clean
row of a site, golden rows (imported from golden files) included. The dataset database of
`emmy db` uses these same tables in another file, and two more (`sources`, `row_sources`)
that say which imported file (freeze, golden file or tuning database) each of its rows came
from; a tuning database leaves them empty.

Several processes may use one file at once: the database runs in WAL mode, every write is one
`BEGIN IMMEDIATE` transaction (so writers queue on the busy timeout, 30 s or
EMMY_DB_BUSY_TIMEOUT's seconds, instead of failing on a stale snapshot), and a process
killed mid-write leaves only whole transactions behind.
A file that is not emmy's is never written to: it is inspected before sqlite may change it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import peewee

from emmy.base.errors import EmmyError
from emmy.base.paths import default_db_path
from emmy.base.version import __version__

SCHEMA_VERSION = 4
#: "host_bound": the kernel ran right, but the host's enqueueing bounded its timed windows, so
#: its time is the host's, not the kernel's
STATUSES = (
    "ok", "compile_error", "launch_error", "wrong_result", "timeout", "unstable", "host_bound",
)  # fmt: skip
ORIGINS = ("pick", "forced", "golden")
APPLICATION = "emmy"

#: how long a writer waits for another's transaction before it gives up, unless
#: BUSY_TIMEOUT_VARIABLE says otherwise (seconds)
DEFAULT_BUSY_TIMEOUT_S = 30.0
BUSY_TIMEOUT_VARIABLE = "EMMY_DB_BUSY_TIMEOUT"


def busy_timeout_s() -> float:
    """How long a writer waits for the write lock: EMMY_DB_BUSY_TIMEOUT's seconds, or 30 (a
    database on a slow shared disk, or many writers on one file, may want longer)."""
    text = os.environ.get(BUSY_TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_BUSY_TIMEOUT_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise EmmyError(f"{BUSY_TIMEOUT_VARIABLE}={text!r}: expected seconds, a positive number")
    return seconds


def canonical_config(config: Mapping[str, int | str]) -> str:
    """The one text of a config: rows are grouped, compared and tie-broken by it."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


class _AutoIncrementField(peewee.AutoField):
    """Row ids are cited as evidence by compile reports: AUTOINCREMENT never reuses one."""

    def ddl(self, ctx: Any) -> Any:
        return peewee.NodeList((super().ddl(ctx), peewee.SQL("AUTOINCREMENT")))


def _column(sql: peewee.Field, **default: Any) -> Any:
    """A Row field that is also a column of the measurements table, of type `sql`."""
    return field(metadata={"column": sql}, **default)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One measurement (or failure) of one config at one site: (device, regime, family, key).

    The one declaration of a measurement's fields: they are, in this order, the columns of
    the measurements table (`Measurement`, the SQL text of `TuningDB` and `ReadOnlyDB`) and,
    but the id, the fields of a frozen row (`emmy.dataset.dataset_store`).
    """

    id: int | None = _column(_AutoIncrementField(), default=None)  # set by the database
    device: str = _column(peewee.TextField())
    regime: str = _column(peewee.TextField())
    regime_words: str = _column(peewee.TextField())
    compiler: str = _column(peewee.TextField())
    emmy_version: str = _column(peewee.TextField(), default=__version__)
    family: str = _column(peewee.TextField())
    key: str = _column(peewee.TextField())
    config: dict[str, int | str] = _column(peewee.TextField())  # stored as canonical_config
    origin: str = _column(peewee.TextField())
    status: str = _column(peewee.TextField())
    median_s: float | None = _column(peewee.FloatField(null=True), default=None)
    spread: float | None = _column(peewee.FloatField(null=True), default=None)
    repetitions: int = _column(peewee.IntegerField(), default=0)
    message: str | None = _column(peewee.TextField(null=True), default=None)
    kernel_hash: str | None = _column(peewee.TextField(null=True), default=None)
    resources: dict | None = _column(peewee.TextField(null=True), default=None)  # stored as JSON
    bench: str | None = _column(peewee.TextField(null=True), default=None)
    created: float = _column(peewee.FloatField(), default_factory=time.time)
    #: the launches run back to back in each timed window, whose mean is one repetition's
    #: time (a GPU batches a short kernel until the window is long enough to time honestly)
    batch: int = _column(peewee.IntegerField(), default=1)
    #: the host's time to enqueue one pass of a timed window, median over the repetitions,
    #: beside the device's median_s: a window the host bounds is not the kernel's time
    host_s: float | None = _column(peewee.FloatField(null=True), default=None)

    @property
    def clean(self) -> bool:
        return self.status == "ok" and self.median_s is not None

    def digest(self) -> str:
        """sha256 of what was measured and found; where and when it was recorded (id, created,
        bench) is left out, so the same row imported from two places deduplicates."""
        return _digest(_stored(self))


#: the columns a Row is stored in, in table order
_ROW_COLUMNS = tuple(f.name for f in fields(Row))
#: the fields a Row gained after its stored forms were first fixed: the schema each came
#: with, and the value every row from before it holds. A database older than a field reads
#: it as that value, and a digest or a freeze leaves the field out where it holds that
#: value, so the digests and freezes of rows from before it stay what they were.
LATER_FIELDS: dict[str, tuple[int, Any]] = {"batch": (3, 1), "host_s": (4, None)}
#: the digest's content, in the order it has always been hashed: a new order, or a new
#: field in it, would change every digest, and `emmy db import` deduplicates by them
_DIGESTED = (
    "device", "regime", "regime_words", "compiler", "family", "key", "config", "origin",
    "status", "median_s", "spread", "repetitions", "message", "kernel_hash", "resources",
    "emmy_version",
)  # fmt: skip


def _resources_text(resources: dict | None) -> str | None:
    return (
        None if resources is None else json.dumps(resources, sort_keys=True, separators=(",", ":"))
    )


def _stored(row: Row) -> dict[str, Any]:
    """The column values of `row`: its config and resources as their JSON text."""
    stored = {name: getattr(row, name) for name in _ROW_COLUMNS}
    stored["config"] = canonical_config(row.config)
    stored["resources"] = _resources_text(row.resources)
    return stored


def _digest(stored: Mapping[str, Any]) -> str:
    # a list in a fixed order: the digest must not change with dict order or emmy's version
    content: list[Any] = [stored[name] for name in _DIGESTED]
    content += [[n, stored[n]] for n, (_, before) in LATER_FIELDS.items() if stored[n] != before]
    text = json.dumps(content, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# --- schema -------------------------------------------------------------------------------


class _MeasurementMeta:
    table_name = "measurements"
    indexes = (
        # every lookup is by site, then config; status and median make best() read only
        # the index until it fetches the winning row of each config
        (("device", "regime", "family", "key", "config", "status", "median_s"), False),
        # `emmy db import` deduplicates by content
        (("digest",), False),
    )


#: a column per Row field, then the row's digest (Row.digest, kept to deduplicate by it)
Measurement: type[peewee.Model] = type(
    "Measurement",
    (peewee.Model,),
    {
        "__module__": __name__,
        **{f.name: f.metadata["column"] for f in fields(Row)},
        "digest": peewee.TextField(),
        "Meta": _MeasurementMeta,
    },
)


class EmmyMeta(peewee.Model):
    key = peewee.TextField(primary_key=True)
    value = peewee.TextField()

    class Meta:
        table_name = "emmy_meta"


class GoldenImport(peewee.Model):
    """Which content of each golden file the measurements table holds, so re-importing the
    same file is one lookup."""

    source = peewee.TextField(primary_key=True)
    sha256 = peewee.TextField()
    imported = peewee.FloatField()

    class Meta:
        table_name = "golden_imports"


class Source(peewee.Model):
    """A file `emmy db import` read into a dataset database, known by the sha256 of its
    content, so importing the same content again is one lookup."""

    id = _AutoIncrementField()
    sha256 = peewee.TextField(unique=True)
    kind = peewee.TextField()  # one of SOURCE_KINDS
    path = peewee.TextField()  # as it was named to `emmy db import`
    rows = peewee.IntegerField()  # the rows it held
    added = peewee.IntegerField()  # of them, the ones new to the database
    imported = peewee.FloatField()

    class Meta:
        table_name = "sources"


class RowSource(peewee.Model):
    """Row `measurement` was in source `source` (a row found in several has several links)."""

    measurement = peewee.IntegerField()
    source = peewee.IntegerField()

    class Meta:
        table_name = "row_sources"
        primary_key = peewee.CompositeKey("measurement", "source")
        indexes = ((("source",), False),)


SOURCE_KINDS = ("freeze", "golden", "db")

MODELS: tuple[type[peewee.Model], ...] = (Measurement, EmmyMeta, GoldenImport, Source, RowSource)


def _add_sources(database: peewee.SqliteDatabase) -> None:
    """1 -> 2: the provenance tables of a dataset database."""
    with database.bind_ctx((Source, RowSource)):
        database.create_tables((Source, RowSource))


def _add_batch(database: peewee.SqliteDatabase) -> None:
    """2 -> 3: the batch of launches per timed window; rows from before timed one."""
    before = LATER_FIELDS["batch"][1]
    database.execute_sql(
        f"ALTER TABLE measurements ADD COLUMN batch INTEGER NOT NULL DEFAULT {before}"
    )


def _add_host_s(database: peewee.SqliteDatabase) -> None:
    """3 -> 4: the host's enqueue time per pass; rows from before did not record it."""
    database.execute_sql("ALTER TABLE measurements ADD COLUMN host_s REAL")


#: from_version -> the step that brings a database from that version to the next; each open
#: runs the steps it needs in one transaction with the version bump, so an upgrade is all or
#: nothing.
MIGRATIONS: dict[int, Callable[[peewee.SqliteDatabase], None]] = {
    1: _add_sources, 2: _add_batch, 3: _add_host_s,
}  # fmt: skip


def _literal(value: Any) -> str:
    return "NULL" if value is None else repr(value)


def _select(schema: int = SCHEMA_VERSION) -> str:
    """The query of every column of a Row from a database of `schema`: a field newer than
    it reads as the value rows from before it hold."""
    columns = [
        f'{_literal(LATER_FIELDS[c][1])} AS "{c}"'
        if LATER_FIELDS.get(c, (0,))[0] > schema
        else f'"{c}"'
        for c in _ROW_COLUMNS
    ]
    return "SELECT " + ", ".join(columns) + " FROM measurements"


_SELECT = _select()
_SITE = 'device = ? AND regime = ? AND family = ? AND "key" = ?'
_INSERTED = (*(c for c in _ROW_COLUMNS if c != "id"), "digest")  # sqlite picks the id
_INSERT = (
    "INSERT INTO measurements ("
    + ", ".join(f'"{c}"' for c in _INSERTED)
    + ") VALUES ("
    + ", ".join("?" * len(_INSERTED))
    + ")"
)
_CONFIG_COLUMN = _ROW_COLUMNS.index("config")


@functools.lru_cache(maxsize=4096)
def _parse_config(text: str) -> dict[str, int | str]:
    # a compile reads the same few configs over and over; callers get a copy
    return json.loads(text)


def _row(values: Sequence[Any]) -> Row:
    """The Row of the column values `values` (in _ROW_COLUMNS order)."""
    stored = dict(zip(_ROW_COLUMNS, values, strict=True))
    resources = stored["resources"]
    return Row(
        **{
            **stored,
            "config": dict(_parse_config(stored["config"])),
            "resources": None if resources is None else json.loads(resources),
        }
    )


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _problem(row: Row) -> str | None:
    """What makes `row` unfit to store, or None."""
    for name in ("device", "regime", "regime_words", "compiler", "family", "key", "emmy_version"):
        if not isinstance(getattr(row, name), str) or not getattr(row, name):
            return f"{name} must be a non-empty string"
    if row.origin not in ORIGINS:
        return f"origin {row.origin!r} is not one of {', '.join(ORIGINS)}"
    if row.status not in STATUSES:
        return f"status {row.status!r} is not one of {', '.join(STATUSES)}"
    if not isinstance(row.config, Mapping):
        return "config must be a mapping"
    for name, value in row.config.items():
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int | str):
            return f"config {name!r}: {value!r} is not an int or a str"
    for name in ("median_s", "spread", "host_s"):
        value = getattr(row, name)
        if value is not None and not _is_number(value):
            return f"{name} {value!r} is not a finite number"
    if row.status == "ok" and row.median_s is None:
        return "status 'ok' needs a median_s"
    if isinstance(row.repetitions, bool) or not isinstance(row.repetitions, int):
        return f"repetitions {row.repetitions!r} is not an int"
    if isinstance(row.batch, bool) or not isinstance(row.batch, int) or row.batch < 1:
        return f"batch {row.batch!r} is not a count of 1 or more"
    return None


# --- the database ------------------------------------------------------------------------


def _check_meta(path: Path, sql: Callable[[str], list[tuple]]) -> dict[str, str] | None:
    """emmy_meta's pairs of the file at `path`, read with `sql`; None when it has no tables;
    EmmyError when it is someone else's or a newer emmy's."""
    names = {r[0] for r in sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not names:
        return None
    if EmmyMeta._meta.table_name not in names:
        shown = ", ".join(sorted(names)[:5])
        raise EmmyError(
            f"{path}: not an emmy tuning database (someone else's SQLite database,"
            f" with tables {shown}); emmy leaves it untouched"
        )
    meta = dict(sql("SELECT key, value FROM emmy_meta"))
    if meta.get("application") != APPLICATION:
        raise EmmyError(
            f"{path}: not an emmy tuning database (someone else's SQLite database:"
            f" application {meta.get('application')!r}); emmy leaves it untouched"
        )
    version = meta.get("schema_version", "")
    if not version.isdigit():
        raise EmmyError(f"{path}: emmy_meta has no valid schema_version ({version!r})")
    if int(version) > SCHEMA_VERSION:
        raise EmmyError(
            f"{path}: made by a newer emmy (schema {version},"
            f" this emmy reads up to {SCHEMA_VERSION})"
        )
    return meta


@contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Serialises opening (creating, switching to WAL, migrating) across processes: two
    processes creating one file at once can otherwise fail to switch it to WAL or lose
    the rows of one of them."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


class _LazyRows(list):
    """The rows of a query, each made a `Row` only when read: a compile usually reads the
    first one or two of a site's rows."""

    def __init__(self, raw: list[tuple]):
        super().__init__(raw)
        self._made: dict[int, Row] = {}

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = index + len(self) if index < 0 else index
        if index not in self._made:
            self._made[index] = _row(super().__getitem__(index))
        return self._made[index]

    def __iter__(self):
        return (self[i] for i in range(len(self)))


_SOURCE_COLUMNS = ("id", "sha256", "kind", "path", "rows", "added", "imported")
_SELECT_SOURCES = "SELECT " + ", ".join(f'"{c}"' for c in _SOURCE_COLUMNS) + " FROM sources"


def _source(values: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(_SOURCE_COLUMNS, values, strict=True))


class ReadOnlyDB:
    """An emmy database that exists, opened so that nothing can write to it: `emmy db
    freeze`, `stats` and `export` read a tuning or dataset database without creating,
    migrating or locking it. A database of schema 1 reads as one without sources, and one
    from before a field of LATER_FIELDS reads it as the value its rows held."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise EmmyError(f"{self.path}: is a directory, not an emmy database")
        if not self.path.is_file():
            raise EmmyError(f"{self.path}: no such database")
        try:
            self.connection = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        except sqlite3.Error as e:
            raise EmmyError(f"{self.path}: cannot open the database ({e})") from None
        try:
            with self._errors():
                meta = _check_meta(self.path, self._sql)
            if meta is None:
                raise EmmyError(f"{self.path}: an empty SQLite file, not an emmy database")
            self.schema = int(meta["schema_version"])
        except BaseException:
            self.connection.close()
            raise

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as e:
            if "file is not a database" in str(e):
                raise EmmyError(f"{self.path}: not an emmy database (not an SQLite file)") from None
            raise EmmyError(f"{self.path}: cannot read the database ({e})") from None

    def _sql(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self.connection.execute(sql, params).fetchall()

    def rows(
        self,
        *,
        devices: Collection[str] = (),
        regimes: Collection[str] = (),
        families: Collection[str] = (),
    ) -> list[Row]:
        """Every row (those of the named devices, regimes, families where given), by id."""
        where, params = [], []
        for column, values in (("device", devices), ("regime", regimes), ("family", families)):
            if values:
                where.append(f"{column} IN ({', '.join('?' * len(values))})")
                params += list(values)
        sql = _select(self.schema) + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id"
        with self._errors():
            return [_row(r) for r in self._sql(sql, params)]

    def sources(self) -> list[dict[str, Any]]:
        """Every imported source, in import order."""
        if self.schema < 2:
            return []
        with self._errors():
            return [_source(r) for r in self._sql(f"{_SELECT_SOURCES} ORDER BY id")]

    def links(self) -> list[tuple[int, int]]:
        """Every (row id, source id) pair: which source each row was found in."""
        if self.schema < 2:
            return []
        with self._errors():
            return self._sql("SELECT measurement, source FROM row_sources ORDER BY 1, 2")

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> ReadOnlyDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def content_stamp(path: Path) -> str:
    """A short text that changes whenever rows are added, replaced or removed (ids are
    never reused), read without writing: a compile's program cache keys on it."""
    if not path.exists():
        return "absent"
    tables = (Measurement._meta.table_name, GoldenImport._meta.table_name)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            counts = [
                db.execute(f"SELECT count(*), max(rowid) FROM {t}").fetchone() for t in tables
            ]
    except sqlite3.Error as error:
        return f"unreadable: {error}"
    return repr(counts)


class TuningDB:
    """One sqlite file of measurements. Opening checks (and if needed creates or migrates) it."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        # journal_mode is set only once the file is known to be emmy's (see _open)
        busy_s = busy_timeout_s()
        self.database = peewee.SqliteDatabase(
            str(self.path),
            pragmas={"busy_timeout": round(busy_s * 1000), "synchronous": "normal"},
            timeout=busy_s,
            lock_type="IMMEDIATE",
        )
        self._check_file()
        try:
            with _directory_lock(self.path.parent):
                self._open()
        except BaseException:
            self.database.close()
            raise

    # opening ------------------------------------------------------------------------------

    def _check_file(self) -> None:
        """Only the folder is checked here. The file itself is never opened outside sqlite:
        closing any other descriptor of it would drop the POSIX locks that this process's
        sqlite connections hold on it, and let two writers corrupt it. sqlite reads (and
        refuses) a foreign file without writing to it (see _open)."""
        if self.path.is_dir():
            raise EmmyError(f"{self.path}: is a directory, not a tuning database")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise EmmyError(
                f"{self.path}: cannot open the tuning database ({e.strerror})"
            ) from None

    def _meta(self) -> dict[str, str] | None:
        """emmy_meta's pairs; None when the file has no tables; EmmyError when it is someone
        else's."""
        return _check_meta(self.path, self._sql)

    def _open(self) -> None:
        try:
            meta = self._meta()
        except peewee.DatabaseError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise EmmyError(f"{self.path}: cannot open the tuning database ({e})") from None
            if "file is not a database" in str(e):
                raise EmmyError(
                    f"{self.path}: not an emmy tuning database (not an SQLite file)"
                ) from None
            raise EmmyError(
                f"{self.path}: not an emmy tuning database (a corrupt SQLite file: {e})"
            ) from None
        with self._errors("cannot open the tuning database"):
            self._sql("PRAGMA journal_mode = wal")
            if meta is not None and int(meta["schema_version"]) == SCHEMA_VERSION:
                return  # the common case takes no write lock
            with self.database.atomic():
                # another process may have created or upgraded it since the look above
                meta = self._meta()
                if meta is None:
                    with self.database.bind_ctx(MODELS):
                        self.database.create_tables(MODELS)
                    self._sql(
                        "INSERT INTO emmy_meta (key, value) VALUES (?, ?), (?, ?)",
                        ("application", APPLICATION, "schema_version", str(SCHEMA_VERSION)),
                    )
                    return
                version = int(meta["schema_version"])
                while version < SCHEMA_VERSION:
                    step = MIGRATIONS.get(version)
                    if step is None:
                        raise EmmyError(
                            f"{self.path}: schema {version} is too old: this emmy has no"
                            f" migration from it (delete the file to start afresh)"
                        )
                    step(self.database)
                    version += 1
                self._sql(
                    "UPDATE emmy_meta SET value = ? WHERE key = 'schema_version'", (str(version),)
                )

    # helpers ------------------------------------------------------------------------------

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """sqlite failures (a locked, corrupt or unwritable file) as one line naming the file."""
        try:
            yield
        except (peewee.PeeweeException, sqlite3.Error) as e:
            raise EmmyError(f"{self.path}: {what} ({e})") from None

    def _sql(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self.database.execute_sql(sql, params).fetchall()

    # writing ------------------------------------------------------------------------------

    def _insert(self, rows: Sequence[Row]) -> list[int]:
        """Insert `rows` inside the caller's transaction; their ids."""
        values = []
        for i, row in enumerate(rows):
            problem = _problem(row)
            if problem is not None:
                raise EmmyError(f"{self.path}: row {i} ({row.family}, {row.key}): {problem}")
            stored = _stored(row)
            stored["digest"] = _digest(stored)
            values.append(tuple(stored[c] for c in _INSERTED))
        if not values:
            return []
        self.database.cursor().executemany(_INSERT, values)
        # the write lock is held and AUTOINCREMENT counts up by one: the ids are consecutive
        last = self._sql("SELECT last_insert_rowid()")[0][0]
        return list(range(last - len(values) + 1, last + 1))

    def add(self, rows: Sequence[Row]) -> list[int]:
        """Store `rows` in one transaction (all or none); their new ids, in order."""
        with self._errors("cannot write the tuning database"), self.database.atomic():
            return self._insert(rows)

    def golden_imported(self, source: str, sha256: str) -> bool:
        """Whether the measurements hold the golden file `source` with content `sha256`."""
        with self._errors("cannot read the tuning database"):
            found = self._sql(
                "SELECT 1 FROM golden_imports WHERE source = ? AND sha256 = ?", (source, sha256)
            )
        return bool(found)

    def replace_golden(self, source: str, sha256: str, rows: Sequence[Row]) -> list[int]:
        """In one transaction, replace the golden rows of `source` by `rows` (content
        `sha256`); [] when that content is already there. The old rows go so that an entry
        removed from a golden file is not recalled from its stale copy here."""
        with self._errors("cannot write the tuning database"), self.database.atomic():
            found = self._sql(
                "SELECT 1 FROM golden_imports WHERE source = ? AND sha256 = ?", (source, sha256)
            )
            if found:
                return []
            self._sql("DELETE FROM measurements WHERE origin = 'golden' AND bench = ?", (source,))
            ids = self._insert(rows)
            self._sql(
                "INSERT OR REPLACE INTO golden_imports (source, sha256, imported) VALUES (?, ?, ?)",
                (source, sha256, time.time()),
            )
            return ids

    def source(self, sha256: str) -> dict[str, Any] | None:
        """The imported source with content `sha256`, or None."""
        with self._errors("cannot read the database"):
            found = self._sql(f"{_SELECT_SOURCES} WHERE sha256 = ?", (sha256,))
        return _source(found[0]) if found else None

    def sources(self) -> list[dict[str, Any]]:
        """Every imported source, in the order they were imported."""
        with self._errors("cannot read the database"):
            return [_source(r) for r in self._sql(f"{_SELECT_SOURCES} ORDER BY id")]

    def import_sources(
        self, sources: Sequence[tuple[str, str, str, Sequence[Row]]]
    ) -> list[tuple[int, int] | None]:
        """Import (path, kind, sha256, rows) sources in one transaction (all or nothing).

        A row is stored once however many sources hold it (by content, `Row.digest`): only
        rows the database does not hold yet are added, and every row of a source is linked
        to it. A source whose content (sha256) is already here is left out. Returns, per
        source, (its rows, the ones added), or None where it was left out.
        """
        results: list[tuple[int, int] | None] = []
        with self._errors("cannot write the database"), self.database.atomic():
            known: dict[str, int] = dict(
                self._sql("SELECT digest, MIN(id) FROM measurements GROUP BY digest")
            )
            for path, kind, sha256, rows in sources:
                if kind not in SOURCE_KINDS:
                    raise EmmyError(f"{path}: source kind {kind!r} is not one of {SOURCE_KINDS}")
                if self._sql("SELECT 1 FROM sources WHERE sha256 = ?", (sha256,)):
                    results.append(None)
                    continue
                digests = [row.digest() for row in rows]
                new: dict[str, Row] = {}
                for digest, row in zip(digests, rows, strict=True):
                    if digest not in known and digest not in new:
                        new[digest] = row
                ids = self._insert(list(new.values()))
                known.update(zip(new, ids, strict=True))
                self._sql(
                    "INSERT INTO sources (sha256, kind, path, rows, added, imported)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (sha256, kind, path, len(rows), len(new), time.time()),
                )
                source_id = self._sql("SELECT last_insert_rowid()")[0][0]
                links = sorted({(known[d], source_id) for d in digests})
                self.database.cursor().executemany(
                    "INSERT OR IGNORE INTO row_sources (measurement, source) VALUES (?, ?)", links
                )
                results.append((len(rows), len(new)))
        return results

    # reading ------------------------------------------------------------------------------

    def rows(self, device: str, regime: str, family: str, key: str) -> list[Row]:
        """Every row of one site, oldest first."""
        with self._errors("cannot read the tuning database"):
            found = self._sql(f"{_SELECT} WHERE {_SITE} ORDER BY id", (device, regime, family, key))
        return [_row(r) for r in found]

    def find(
        self, device: str, regime: str, family: str, key: str, config: Mapping[str, int | str]
    ) -> Row | None:
        """The latest row of exactly this config at this site, whatever its status."""
        with self._errors("cannot read the tuning database"):
            found = self._sql(
                f"{_SELECT} WHERE {_SITE} AND config = ? ORDER BY id DESC LIMIT 1",
                (device, regime, family, key, canonical_config(config)),
            )
        return _row(found[0]) if found else None

    def best(
        self,
        device: str,
        regime: str,
        family: str,
        key: str,
        allowed: Collection[str] | None = None,
        *,
        origins: Collection[str] | None = None,
    ) -> list[Row]:
        """The clean rows of a site, the latest one of each config, fastest first.

        `allowed` keeps only configs whose canonical text it holds; `origins` only rows of
        those origins (e.g. to compare measurements without the golden copies). Equal
        medians are ordered by the canonical config text, so the choice is deterministic.
        """
        params: list[Any] = [device, regime, family, key]
        where = f"{_SITE} AND status = 'ok' AND median_s IS NOT NULL"
        if origins is not None:
            where += f" AND origin IN ({', '.join('?' * len(origins))})"
            params += list(origins)
        sql = (
            f"{_SELECT} WHERE id IN (SELECT MAX(id) FROM measurements WHERE {where}"
            " GROUP BY config) ORDER BY median_s, config"
        )
        with self._errors("cannot read the tuning database"):
            found = self._sql(sql, params)
        if allowed is not None:
            found = [r for r in found if r[_CONFIG_COLUMN] in allowed]
        return _LazyRows(found)

    def sites(self, device: str, regime: str) -> list[tuple[str, str]]:
        """The (family, key) pairs that have rows under this device and regime, sorted."""
        with self._errors("cannot read the tuning database"):
            found = self._sql(
                'SELECT DISTINCT family, "key" FROM measurements WHERE device = ? AND regime = ?'
                ' ORDER BY family, "key"',
                (device, regime),
            )
        return [(f, k) for f, k in found]

    def count(self) -> int:
        with self._errors("cannot read the tuning database"):
            return self._sql("SELECT COUNT(*) FROM measurements")[0][0]

    def integrity_check(self) -> str:
        with self._errors("cannot read the tuning database"):
            return "\n".join(r[0] for r in self._sql("PRAGMA integrity_check"))

    def close(self) -> None:
        self.database.close()

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
