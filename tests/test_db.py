"""The tuning database: rows, recall, regime gating, and surviving concurrent and killed writers."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import emmy
from emmy.base.errors import EmmyError
from emmy.recall import tuning_db as dbmod
from emmy.recall.tuning_db import (
    ORIGINS,
    SCHEMA_VERSION,
    STATUSES,
    Row,
    TuningDB,
    canonical_config,
    default_db_path,
)

DEV = "nvidia-h200-sm90"
REG = "r-0123456789ab"
ROOT = Path(__file__).parent.parent


def row(key: str = "k", config: dict | None = None, median: float | None = 1e-3, **kw) -> Row:
    fields = {
        "device": DEV,
        "regime": REG,
        "regime_words": "nvrtc default (-O3)",
        "compiler": "nvrtc 13.0",
        "family": "gemm",
        "key": key,
        "config": {"BM": 64, "BN": 128} if config is None else config,
        "origin": "forced",
        "status": "ok",
        "median_s": median,
    }
    fields.update(kw)
    return Row(**fields)


@pytest.fixture
def db(tmp_path):
    with TuningDB(tmp_path / "t.db") as d:
        yield d


def test_constants():
    assert SCHEMA_VERSION == 4
    assert STATUSES == (
        "ok",
        "compile_error",
        "launch_error",
        "wrong_result",
        "timeout",
        "unstable",
        "host_bound",
    )
    assert ORIGINS == ("pick", "forced", "golden")
    assert canonical_config({"b": 2, "a": "x"}) == '{"a":"x","b":2}'


def test_default_path_is_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EMMY_CACHE_DIR", str(tmp_path / "cache"))
    assert default_db_path() == tmp_path / "cache" / "autotune.db"
    with TuningDB() as d:
        assert d.path == tmp_path / "cache" / "autotune.db"
    assert d.path.is_file()


def test_creates_parent_directories(tmp_path):
    with TuningDB(str(tmp_path / "a" / "b" / "t.db")) as d:
        assert d.count() == 0
        assert d.integrity_check() == "ok"


def test_round_trip_keeps_every_field(db):
    full = row(
        spread=0.02,
        repetitions=50,
        kernel_hash="abc123",
        resources={"registers": 64, "spills": 0, "shared": 16384},
        bench="bench-1",
        created=1234.5,
        origin="pick",
    )
    failed = row(
        config={"BM": 256, "BN": 256},
        status="compile_error",
        median=None,
        message="ptxas: too much shared memory",
    )
    ids = db.add([full, failed])
    assert len(ids) == 2 and ids[0] < ids[1]
    got = db.rows(DEV, REG, "gemm", "k")
    assert got == [dataclasses.replace(full, id=ids[0]), dataclasses.replace(failed, id=ids[1])]
    assert got[0].emmy_version == emmy.__version__
    assert got[0].clean and not got[1].clean
    assert db.count() == 2


def test_ids_are_never_reused(db):
    first = db.add([row()])
    db.database.execute_sql("DELETE FROM measurements")
    assert db.add([row()])[0] > first[0]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"origin": "guess"}, "origin 'guess' is not one of"),
        ({"status": "fine"}, "status 'fine' is not one of"),
        ({"median_s": None}, "status 'ok' needs a median_s"),
        ({"median_s": float("nan")}, "median_s nan is not a finite number"),
        ({"config": {"BM": 1.5}}, "config 'BM': 1.5 is not an int or a str"),
        ({"config": {"BM": True}}, "config 'BM': True is not an int or a str"),
        ({"device": ""}, "device must be a non-empty string"),
        ({"repetitions": "5"}, "repetitions '5' is not an int"),
    ],
)
def test_add_rejects_a_bad_row_and_writes_nothing(db, change, why):
    with pytest.raises(EmmyError) as e:
        db.add([row(), dataclasses.replace(row(), **change)])
    assert str(e.value).startswith(f"{db.path}: row 1 (gemm, k): ")
    assert why in str(e.value)
    assert db.count() == 0


def test_add_is_one_transaction(db):
    """A failure inside sqlite half-way through leaves none of the rows."""
    db.add([row(key="before")])
    # a CHECK-free way to fail mid-insert: a unique index the second row violates
    db.database.execute_sql('CREATE UNIQUE INDEX one_per_key ON measurements ("key")')
    with pytest.raises(EmmyError, match="cannot write the tuning database"):
        db.add([row(key="new"), row(key="before")])
    assert [r.key for r in db.rows(DEV, REG, "gemm", "new")] == []
    assert db.count() == 1


def test_digest_is_content_only():
    a = row(bench="b1", created=1.0)
    assert a.digest() == dataclasses.replace(a, bench="b2", created=2.0, id=7).digest()
    assert a.digest() == row(config={"BN": 128, "BM": 64}).digest()  # key order is not content
    assert a.digest() != dataclasses.replace(a, median_s=2e-3).digest()
    assert a.digest() != dataclasses.replace(a, message="x").digest()


def test_every_field_but_where_and_when_a_row_was_recorded_is_digested():
    a = row(spread=0.01, message="m", kernel_hash="h", resources={"registers": 32}, bench="b")
    other = {"config": {"BM": 32}, "median_s": 2.0, "spread": 2.0, "repetitions": 5,
             "resources": {"registers": 64}, "created": 2.0, "id": 7}  # fmt: skip
    recorded = {"id", "bench", "created"}  # where and when, not what
    for f in dataclasses.fields(Row):
        changed = dataclasses.replace(a, **{f.name: other.get(f.name, "other")})
        assert (changed.digest() != a.digest()) == (f.name not in recorded), f.name


def test_a_digest_never_changes():
    # freezes and dataset databases are deduplicated by digests computed long ago
    fixed = Row(
        device="emu", regime="r-0123456789ab", regime_words="g++ -O3", compiler="g++ 12",
        family="gemm", key="m=4", config={"BN": 128, "BM": 64}, origin="forced", status="ok",
        median_s=1e-3, spread=0.01, repetitions=10, message="m", kernel_hash="h",
        resources={"registers": 32}, bench="b", emmy_version="0.1.0", created=1.0, id=3,
    )  # fmt: skip
    assert fixed.digest() == "956ca25f07ccddfbe974132c71959e585318af849821b32d024ece6bb210a81e"


def test_the_batch_of_a_timing_is_stored_and_read_back(db):
    db.add([row(config={"BM": 32}), row(batch=8)])
    assert [r.batch for r in db.rows(DEV, REG, "gemm", "k")] == [1, 8]
    assert db.find(DEV, REG, "gemm", "k", {"BM": 64, "BN": 128}).batch == 8
    assert sorted(r.batch for r in db.best(DEV, REG, "gemm", "k")) == [1, 8]
    # a digest leaves a batch of 1 out, as every row from before the column held: their
    # digests stay the same (test_a_digest_never_changes)
    assert row().digest() == row(batch=1).digest() != row(batch=8).digest()
    with pytest.raises(EmmyError, match="batch 0 is not a count of 1 or more"):
        db.add([row(batch=0)])


def test_a_database_from_before_the_batch_column_opens(tmp_path):
    path = tmp_path / "t.db"
    with TuningDB(path) as d:
        d.add([row()])
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("ALTER TABLE measurements DROP COLUMN batch")
        conn.execute("ALTER TABLE measurements DROP COLUMN host_s")
        conn.execute("UPDATE emmy_meta SET value = '2' WHERE key = 'schema_version'")
    conn.close()
    content = path.read_bytes()
    with dbmod.ReadOnlyDB(path) as old:  # read as it is: its rows timed one launch a window
        assert old.schema == 2 and [r.batch for r in old.rows()] == [1]
        assert [r.host_s for r in old.rows()] == [None]
    assert path.read_bytes() == content
    with TuningDB(path) as d:  # opened to write: migrated
        d.add([row(batch=4, host_s=2e-6)])
        assert [r.batch for r in d.rows(DEV, REG, "gemm", "k")] == [1, 4]
        assert [r.host_s for r in d.rows(DEV, REG, "gemm", "k")] == [None, 2e-6]
        meta = dict(d.database.execute_sql("SELECT key, value FROM emmy_meta").fetchall())
    assert meta["schema_version"] == str(SCHEMA_VERSION)


def test_best_orders_by_median_then_config(db):
    db.add(
        [
            row(config={"BM": 3}, median=3e-3),
            row(config={"BM": 2}, median=1e-3),
            row(config={"BM": 1}, median=1e-3),  # ties with BM=2: canonical text decides
            row(config={"BM": 4}, median=2e-3),
        ]
    )
    best = db.best(DEV, REG, "gemm", "k")
    assert [r.config["BM"] for r in best] == [1, 2, 4, 3]
    # insertion order does not matter
    db2 = TuningDB(db.path.with_name("u.db"))
    db2.add([row(config={"BM": 1}, median=1e-3), row(config={"BM": 2}, median=1e-3)])
    assert [r.config for r in db2.best(DEV, REG, "gemm", "k")] == [{"BM": 1}, {"BM": 2}]
    db2.close()


def test_best_takes_the_latest_clean_row_of_each_config(db):
    db.add([row(config={"BM": 1}, median=1e-3), row(config={"BM": 2}, median=2e-3)])
    db.add([row(config={"BM": 1}, median=3e-3)])  # re-measured (--force): slower now
    db.add([row(config={"BM": 2}, status="unstable", median=0.5e-3, message="spread 40%")])
    db.add([row(config={"BM": 3}, status="wrong_result", median=None, message="max err 1")])
    best = db.best(DEV, REG, "gemm", "k")
    assert [(r.config["BM"], r.median_s) for r in best] == [(2, 2e-3), (1, 3e-3)]
    assert all(r.clean for r in best)


def test_best_allowed_and_origins(db):
    db.add(
        [
            row(config={"BM": 1}, median=1e-3, origin="golden"),
            row(config={"BM": 2}, median=2e-3, origin="pick"),
            row(config={"BM": 3}, median=3e-3),
        ]
    )
    allowed = {canonical_config({"BM": 2}), canonical_config({"BM": 3})}
    assert [r.config["BM"] for r in db.best(DEV, REG, "gemm", "k", allowed)] == [2, 3]
    assert [r.config["BM"] for r in db.best(DEV, REG, "gemm", "k", set())] == []
    assert [r.config["BM"] for r in db.best(DEV, REG, "gemm", "k")] == [1, 2, 3]
    measured = db.best(DEV, REG, "gemm", "k", origins=("pick", "forced"))
    assert [r.config["BM"] for r in measured] == [2, 3]


def test_find_recalls_the_latest_row_of_a_config_whatever_its_status(db):
    assert db.find(DEV, REG, "gemm", "k", {"BM": 1}) is None
    db.add([row(config={"BM": 1, "BN": 2}, median=1e-3)])
    db.add([row(config={"BM": 1, "BN": 2}, status="timeout", median=None, message="> 10 s")])
    got = db.find(DEV, REG, "gemm", "k", {"BN": 2, "BM": 1})
    assert got is not None and got.status == "timeout" and got.message == "> 10 s"
    assert db.find(DEV, REG, "gemm", "k", {"BM": 1}) is None


def test_other_regimes_and_devices_are_never_recalled(db):
    db.add(
        [
            row(config={"BM": 1}, median=5e-3),
            row(config={"BM": 2}, median=1e-6, regime="r-ffffffffffff", regime_words="-G"),
            row(config={"BM": 3}, median=1e-6, device="emu"),
            row(config={"BM": 4}, median=1e-6, device="nvidia-a100-sxm4-80gb-sm80"),
            row(config={"BM": 5}, median=1e-6, family="softmax"),
            row(config={"BM": 6}, median=1e-6, key="other"),
        ]
    )
    assert [r.config["BM"] for r in db.best(DEV, REG, "gemm", "k")] == [1]
    assert [r.config["BM"] for r in db.rows(DEV, REG, "gemm", "k")] == [1]
    assert db.find(DEV, REG, "gemm", "k", {"BM": 2}) is None
    assert db.find(DEV, REG, "gemm", "k", {"BM": 3}) is None
    assert db.best("emu", REG, "gemm", "k")[0].config == {"BM": 3}
    assert db.sites(DEV, REG) == [("gemm", "k"), ("gemm", "other"), ("softmax", "k")]


def test_failure_rows_are_kept_with_their_message(db):
    failures = [
        row(config={"BM": i}, status=s, median=None, message=f"failed: {s}")
        for i, s in enumerate(STATUSES[1:])
    ]
    db.add(failures)
    got = db.rows(DEV, REG, "gemm", "k")
    assert [(r.status, r.message) for r in got] == [(s, f"failed: {s}") for s in STATUSES[1:]]
    assert db.best(DEV, REG, "gemm", "k") == []


def test_wal_mode(db):
    assert db.database.execute_sql("PRAGMA journal_mode").fetchone()[0] == "wal"
    other = sqlite3.connect(db.path)
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()
    meta = dict(db.database.execute_sql("SELECT key, value FROM emmy_meta").fetchall())
    assert meta == {"application": "emmy", "schema_version": "4"}
    assert db.integrity_check() == "ok"


def test_a_writer_waits_as_long_as_emmy_db_busy_timeout_says(tmp_path, monkeypatch):
    path = tmp_path / "t.db"
    TuningDB(path).close()
    gate = sqlite3.connect(path, isolation_level=None)
    gate.execute("BEGIN IMMEDIATE")
    try:
        monkeypatch.setenv("EMMY_DB_BUSY_TIMEOUT", "0.2")
        with TuningDB(path) as waiting:
            assert waiting.database.execute_sql("PRAGMA busy_timeout").fetchone()[0] == 200
            started = time.monotonic()
            with pytest.raises(EmmyError, match="t.db: .*database is locked"):
                waiting.add([row()])
            assert time.monotonic() - started < 20  # gave up after its 0.2 s, not emmy's 30
    finally:
        gate.close()
    for bad in ("soon", "0", "-1", "inf"):
        monkeypatch.setenv("EMMY_DB_BUSY_TIMEOUT", bad)
        with pytest.raises(EmmyError, match=f"^EMMY_DB_BUSY_TIMEOUT='{bad}': expected seconds"):
            TuningDB(path)


# --- concurrency and interruption ---------------------------------------------------------


def _writer(path: str, tag: str, n: int, barrier) -> None:
    barrier.wait()
    with TuningDB(path) as d:  # both processes also create the file at once
        d.add([row(key=f"{tag}-0", bench=tag)])
        # each has written before either goes on, so their remaining writes contend: on a
        # busy machine, one process could otherwise write all its rows before the other
        # starts (the loser of a race waits on the busy timeout, so rows need not interleave)
        barrier.wait(timeout=60)
        for i in range(1, n):
            d.add([row(key=f"{tag}-{i}", bench=tag)])


def test_two_writers_lose_no_row(tmp_path):
    path = str(tmp_path / "t.db")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_writer, args=(path, t, 200, barrier)) for t in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with TuningDB(path) as d:
        assert d.count() == 400
        assert d.integrity_check() == "ok"
        assert len(d.sites(DEV, REG)) == 400


_KILLED_WRITER = """
import sys
from emmy.recall.tuning_db import Row, TuningDB
db = TuningDB(sys.argv[1])
i = 0
while True:
    rows = [
        Row(device="emu", regime="r-0123456789ab", regime_words="g++ -O3", compiler="g++ 12",
            family="gemm", key=f"k{i}", config={"BM": j, "s": "x"}, origin="forced",
            status="ok", median_s=1e-3 * (j + 1), spread=0.01, repetitions=10,
            message="m" * 2000, kernel_hash="h", resources={"registers": j}, bench="b")
        for j in range(3)
    ]
    print(*db.add(rows), flush=True)
    i += 1
"""


def test_sigkill_mid_write_leaves_a_consistent_database(tmp_path):
    path = tmp_path / "t.db"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert child.stdout is not None
    first = child.stdout.readline()  # it is writing
    time.sleep(0.5)
    os.kill(child.pid, signal.SIGKILL)
    rest = child.stdout.read()
    child.wait()
    assert child.returncode == -signal.SIGKILL
    committed = {int(i) for line in (first + rest).splitlines() for i in line.split()}
    assert len(committed) >= 3
    with TuningDB(path) as d:
        assert d.integrity_check() == "ok"
        stored = d.database.execute_sql("SELECT id, digest FROM measurements").fetchall()
        ids = {i for i, _ in stored}
        assert committed <= ids  # every row reported written is there
        assert len(ids) % 3 == 0  # whole transactions only
        digests = dict(stored)
        for k in range(len(ids) // 3):
            rows = d.rows("emu", REG, "gemm", f"k{k}")
            assert len(rows) == 3
            for r in rows:
                assert r.message == "m" * 2000 and r.resources == {"registers": r.config["BM"]}
                assert digests[r.id] == r.digest()


# --- files that are not (this emmy's) tuning databases ------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"hello, I am a text file\n", bytes(random.Random(0).randrange(256) for _ in range(5000))],
)
def test_a_non_sqlite_file_is_refused_and_untouched(tmp_path, content):
    path = tmp_path / "t.db"
    path.write_bytes(content)
    with pytest.raises(EmmyError) as e:
        TuningDB(path)
    assert str(e.value) == f"{path}: not an emmy tuning database (not an SQLite file)"
    assert path.read_bytes() == content
    assert sorted(os.listdir(tmp_path)) == ["t.db"]


def test_a_corrupt_sqlite_file_is_refused_and_untouched(tmp_path):
    path = tmp_path / "t.db"
    content = b"SQLite format 3\x00" + bytes(random.Random(1).randrange(256) for _ in range(8000))
    path.write_bytes(content)
    with pytest.raises(EmmyError, match="not an emmy tuning database") as e:
        TuningDB(path)
    assert str(e.value).startswith(f"{path}: ")
    assert path.read_bytes() == content


def _foreign(path: Path, sql: str) -> bytes:
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE photos (id INTEGER, name TEXT); INSERT INTO photos VALUES (1, 'cat');",
        "CREATE TABLE emmy_meta (key TEXT, value TEXT);"
        " INSERT INTO emmy_meta VALUES ('application', 'other');",
    ],
)
def test_someone_elses_database_is_refused_and_untouched(tmp_path, sql):
    path = tmp_path / "t.db"
    content = _foreign(path, sql)
    with pytest.raises(EmmyError) as e:
        TuningDB(path)
    assert str(e.value).startswith(f"{path}: not an emmy tuning database (someone else's")
    assert path.read_bytes() == content
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"  # not made WAL
    conn.close()


def test_an_empty_file_is_initialised(tmp_path):
    path = tmp_path / "t.db"
    path.touch()
    with TuningDB(path) as d:
        d.add([row()])
        assert d.count() == 1


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(EmmyError, match="is a directory"):
        TuningDB(tmp_path)


def test_a_newer_database_is_refused_and_untouched(tmp_path):
    path = tmp_path / "t.db"
    with TuningDB(path) as d:
        d.add([row()])
        d.database.execute_sql("UPDATE emmy_meta SET value = '7' WHERE key = 'schema_version'")
    content = path.read_bytes()
    with pytest.raises(EmmyError) as e:
        TuningDB(path)
    assert str(e.value) == f"{path}: made by a newer emmy (schema 7, this emmy reads up to 4)"
    assert path.read_bytes() == content


def _add_note_column(database) -> None:
    database.execute_sql("ALTER TABLE measurements ADD COLUMN note TEXT DEFAULT 'migrated'")


def test_an_older_database_is_migrated_in_one_transaction(tmp_path, monkeypatch):
    path = tmp_path / "t.db"
    with TuningDB(path) as d:
        d.add([row()])
    # pretend this emmy is one schema ahead, with the step from 4
    monkeypatch.setattr(dbmod, "SCHEMA_VERSION", 5)
    monkeypatch.setattr(dbmod, "MIGRATIONS", {**dbmod.MIGRATIONS, 4: _add_note_column})
    with TuningDB(path) as d:
        meta = dict(d.database.execute_sql("SELECT key, value FROM emmy_meta").fetchall())
        assert meta["schema_version"] == "5"
        assert d.database.execute_sql("SELECT note FROM measurements").fetchall() == [("migrated",)]
        assert d.count() == 1


def test_a_failed_migration_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "t.db"
    with TuningDB(path) as d:
        d.add([row()])

    def half_then_fail(database) -> None:
        _add_note_column(database)
        raise EmmyError("step failed")

    monkeypatch.setattr(dbmod, "SCHEMA_VERSION", 6)
    monkeypatch.setattr(dbmod, "MIGRATIONS", {**dbmod.MIGRATIONS, 4: half_then_fail})
    with pytest.raises(EmmyError, match="step failed"):
        TuningDB(path)
    monkeypatch.setattr(dbmod, "MIGRATIONS", {**dbmod.MIGRATIONS, 4: _add_note_column})
    with pytest.raises(EmmyError, match="schema 5 is too old: this emmy has no migration"):
        TuningDB(path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM emmy_meta WHERE key = 'schema_version'").fetchone() == (
        "4",
    )
    columns = [c[1] for c in conn.execute("PRAGMA table_info(measurements)")]
    assert "note" not in columns
    conn.close()


# --- scale --------------------------------------------------------------------------------


def test_best_on_100k_rows(tmp_path):
    rng = random.Random(2)
    rows = []
    expected: dict[str, dict[int, float]] = {}  # key -> config -> latest clean median
    for k in range(1000):
        latest = expected.setdefault(f"k{k}", {})
        for _ in range(100):
            bm = rng.randrange(20)
            if rng.random() < 0.1:
                rows.append(row(f"k{k}", {"BM": bm}, None, status="timeout", message="slow"))
                continue
            median = rng.choice([1e-3, 2e-3, 3e-3]) * (1 + bm % 3)
            rows.append(row(f"k{k}", {"BM": bm}, median))
            latest[bm] = median
    with TuningDB(tmp_path / "t.db") as d:
        ids = d.add(rows)
        assert ids == list(range(1, 100_001))
        for k in rng.sample(range(1000), 50):
            want = sorted(expected[f"k{k}"].items(), key=lambda cm: (cm[1], f'{{"BM":{cm[0]}}}'))
            got = d.best(DEV, REG, "gemm", f"k{k}")
            assert [(r.config["BM"], r.median_s) for r in got] == want
