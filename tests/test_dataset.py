"""The dataset side of the stores: freezes, `emmy db import` (dedup, provenance, skips, all or
nothing), stats, the exported manifest and matrices, and the schema 1 -> 4 migrations."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from emmy.base.errors import EmmyError
from emmy.cli import main
from emmy.dataset import dataset_store as dataset
from emmy.recall.golden import import_golden, load_golden
from emmy.recall.tuning_db import SCHEMA_VERSION, ReadOnlyDB, TuningDB, canonical_config
from tests.stores import SOFTMAX_KEY, golden_entry, row, softmax_config, write_golden

KEY2 = "rows=16,cols=128,T=f32"
A = softmax_config(vec=1)
B = softmax_config(vec=2)
C = softmax_config(vec=8)
D = softmax_config(algo="online")


def _rows():
    return [
        row(A, 1e-3),
        row(B, 2e-3),
        row(B, 1.5e-3),  # measured again: the best clean median is the cell's
        row(C, 0, status="compile_error"),
        row(D, 3e-3, status="unstable"),
        row(A, 4e-3, key=KEY2, origin="pick"),
        row(A, 5e-3, key=KEY2, family_name="layer_norm"),
    ]


@pytest.fixture
def stores(tmp_path):
    """A tuning database with a golden file imported into it (as a compile would), the
    golden file, and a freeze of the database."""
    golden = write_golden(tmp_path / "golden" / "emu.json", [golden_entry(A, 0.9e-3)])
    tuning = tmp_path / "autotune.db"
    with TuningDB(tuning) as db:
        db.add(_rows())
        import_golden(db, load_golden(golden))
    frozen = dataset.freeze(tuning, tmp_path / "freezes")
    return tuning, golden, frozen


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("emmy: error: ")
    return err[-1]


# --- freeze -------------------------------------------------------------------------------


def test_freeze_is_content_addressed_and_deterministic(tmp_path):
    rows = _rows()
    tuning = tmp_path / "t.db"
    with TuningDB(tuning) as db:
        db.add(rows)
    first = dataset.freeze(tuning, tmp_path / "a")
    assert first.written and first.rows == len(rows)
    assert first.path.name == f"freeze-{first.sha256[:12]}.jsonl"
    data = first.path.read_bytes()
    # again, into the same folder: the same file, left as it is
    again = dataset.freeze(tuning, tmp_path / "a")
    assert (again.path, again.sha256, again.written) == (first.path, first.sha256, False)
    # the same rows written in another order (other ids) freeze to the same bytes
    tuning.unlink()
    with TuningDB(tuning) as db:
        db.add(rows[::-1])
    other = dataset.freeze(tuning, tmp_path / "b")
    assert other.path.name == first.path.name and other.path.read_bytes() == data

    lines = data.decode().splitlines()
    header = json.loads(lines[0])
    assert header == {
        "format": "emmy-freeze",
        "schema": 1,
        "created": header["created"],
        "source": str(tuning),
        "filters": {"device": [], "family": [], "regime": []},
        "rows": len(rows),
    }
    frozen = [json.loads(line) for line in lines[1:]]
    assert "id" not in frozen[0] and frozen[0]["config"] == A
    assert {r["status"] for r in frozen} == {"ok", "compile_error", "unstable"}

    # a filter freezes a subset, and says so
    only = dataset.freeze(tuning, tmp_path / "a", families=["layer_norm"])
    assert only.rows == 1 and only.path != first.path
    assert json.loads(only.path.read_text().splitlines()[0])["filters"]["family"] == ["layer_norm"]
    with pytest.raises(EmmyError, match=r"no rows to freeze \(device nvidia-h200-sm90\)"):
        dataset.freeze(tuning, tmp_path / "a", devices=["nvidia-h200-sm90"])


def test_the_batch_travels_through_freeze_import_and_export(tmp_path):
    tuning = tmp_path / "t.db"
    batched = dataclasses.replace(row(B, 2e-3), batch=8)
    with TuningDB(tuning) as db:
        db.add([row(A, 1e-3), batched])
    frozen = dataset.freeze(tuning, tmp_path / "f")
    lines = [json.loads(line) for line in frozen.path.read_text().splitlines()[1:]]
    # a batch of 1 is left out, so the freezes of rows from before the column stay the same
    assert sorted(line.get("batch", 0) for line in lines) == [0, 8]
    data = tmp_path / "data.db"
    dataset.import_sources(data, [frozen.path], progress=lambda m: None)
    with ReadOnlyDB(data) as db:
        assert sorted(r.batch for r in db.rows()) == [1, 8]
    manifest = dataset.export(data, tmp_path / "export")
    (pool,) = manifest["pools"]
    with np.load(tmp_path / "export" / pool["file"], allow_pickle=False) as npz:
        batch = dict(zip(pool["configs"], npz["batch"][0].tolist(), strict=True))
    assert batch == {canonical_config(A): 1, canonical_config(B): 8}


def test_freeze_command(tmp_path, capsys, stores):
    tuning, _, frozen = stores
    assert main(["db", "freeze", "--db", str(tuning), "-o", str(frozen.path.parent)]) == 0
    out = capsys.readouterr().out
    assert f"froze 8 rows of {tuning}: {frozen.path} unchanged" in out
    assert f"sha256 {frozen.sha256}" in out
    assert main(["db", "freeze", "--db", str(tmp_path / "none.db")]) == 2
    assert _one_line_error(capsys) == f"emmy: error: {tmp_path / 'none.db'}: no such database"


# --- import -------------------------------------------------------------------------------


def test_import_deduplicates_and_keeps_each_rows_sources(tmp_path, stores):
    tuning, golden, frozen = stores
    data = tmp_path / "dataset.db"
    results = dataset.import_sources(data, [frozen.path, tuning, golden], progress=lambda m: None)
    assert [(r.kind, r.rows, r.added, r.skipped_as) for r in results] == [
        ("freeze", 8, 8, None),  # 7 measured rows and the golden row a compile imported
        ("db", 8, 0, None),  # the same rows: nothing new
        ("golden", 1, 0, None),  # the golden row is the one already there
    ]
    assert results[0].sha256 == frozen.sha256
    assert results[2].sha256 == load_golden(golden).sha256
    with ReadOnlyDB(data) as db:
        rows = db.rows()
        sources = db.sources()
        links = db.links()
    assert len(rows) == 8
    assert [(s["kind"], s["path"], s["sha256"]) for s in sources] == [
        (r.kind, str(r.path), r.sha256) for r in results
    ]
    by_row: dict[int, set[str]] = {}
    kind_of = {s["id"]: s["kind"] for s in sources}
    for measurement, source in links:
        by_row.setdefault(measurement, set()).add(kind_of[source])
    golden_row = next(r for r in rows if r.origin == "golden")
    assert by_row.pop(golden_row.id) == {"freeze", "db", "golden"}
    assert all(kinds == {"freeze", "db"} for kinds in by_row.values())
    assert len(by_row) == 7
    # what a row is made of travels whole, where it was recorded included
    assert sorted((r.key, r.config["vec"], r.median_s, r.bench) for r in rows)[0] == (
        KEY2,
        1,
        4e-3,
        "planted",
    )


def test_reimport_is_skipped_with_a_message(tmp_path, capsys, stores):
    tuning, golden, frozen = stores
    data = tmp_path / "dataset.db"
    assert main(["db", "import", "--db", str(data), str(frozen.path), str(golden)]) == 0
    captured = capsys.readouterr()
    assert f"[1/2] reading {frozen.path}" in captured.err  # progress goes to stderr
    assert f"imported {frozen.path} (freeze, sha256 {frozen.sha256[:12]}): 8 rows, 8 new" in (
        captured.out
    )
    # the same freeze again, a renamed copy of it and the golden file: all known content
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(frozen.path.read_bytes())
    argv = ["db", "import", "--db", str(data), str(frozen.path), str(copy), str(golden)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"skipped {frozen.path}: already imported (sha256 {frozen.sha256[:12]})",
        f"skipped {copy}: already imported as {frozen.path} (sha256 {frozen.sha256[:12]})",
        f"skipped {golden}: already imported (sha256 {load_golden(golden).sha256[:12]})",
        f"{data}: 0 new rows from 0 source(s), 3 skipped",
    ]
    with ReadOnlyDB(data) as db:
        assert len(db.rows()) == 8 and len(db.sources()) == 2
    # a folder stands for the freezes, golden files and databases in it
    assert main(["db", "import", "--db", str(data), str(frozen.path.parent)]) == 0
    assert "skipped" in capsys.readouterr().out


def _bad_freezes(tmp_path: Path, good: Path) -> list[tuple[Path, str]]:
    lines = good.read_text().splitlines()
    header = json.loads(lines[0])
    second = json.loads(lines[2])

    def write(name: str, text_lines: list[str]) -> Path:
        path = tmp_path / "bad" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text("\n".join(text_lines) + "\n")
        return path

    renamed = tmp_path / "bad" / good.name
    renamed.parent.mkdir(exist_ok=True)
    renamed.write_text(good.read_text().replace('"status":"ok"', '"status":"fine"', 1))
    return [
        (
            write("json.jsonl", [lines[0], lines[1], lines[2][:-5], *lines[3:]]),
            r"json\.jsonl:3:\d+: invalid JSON: ",
        ),
        (
            write("count.jsonl", lines[:3]),
            r"count\.jsonl: the header says 8 rows but the file holds 2",
        ),
        (
            write(
                "field.jsonl",
                [
                    json.dumps({**header, "rows": 1}),
                    json.dumps({k: v for k, v in second.items() if k != "device"}),
                ],
            ),
            r"field\.jsonl:2: missing field 'device'",
        ),
        (
            write(
                "value.jsonl",
                [json.dumps({**header, "rows": 1}), json.dumps({**second, "status": "fine"})],
            ),
            r"value\.jsonl:2: status 'fine' is not one of ok, compile_error",
        ),
        (
            write("schema.jsonl", [json.dumps({**header, "schema": 9}), *lines[1:]]),
            r"schema\.jsonl:1: schema 9 is not one this emmy reads \(freeze schema 1\)",
        ),
        (renamed, r"does not match its name: the freeze was changed after it was written"),
    ]


def test_a_malformed_freeze_is_one_line_and_nothing_is_imported(tmp_path, capsys, stores):
    tuning, golden, frozen = stores
    data = tmp_path / "dataset.db"
    dataset.import_sources(data, [golden], progress=lambda m: None)
    before = data.read_bytes()
    for bad, message in _bad_freezes(tmp_path, frozen.path):
        # the good sources before it are not imported either
        argv = ["db", "import", "--db", str(data), str(frozen.path), str(tuning), str(bad)]
        assert main(argv) == 2, bad
        line = _one_line_error(capsys)
        assert line.startswith(f"emmy: error: {bad}"), line
        assert re.search(message, line), (message, line)
        with ReadOnlyDB(data) as db:
            assert len(db.rows()) == 1 and len(db.sources()) == 1
    assert data.read_bytes() == before
    # and a database that did not exist is not created by a failed import
    fresh = tmp_path / "fresh.db"
    with pytest.raises(EmmyError):
        dataset.import_sources(fresh, [frozen.path, _bad_freezes(tmp_path, frozen.path)[0][0]])
    assert not fresh.exists()


def test_import_is_one_transaction(tmp_path, stores, monkeypatch):
    tuning, golden, frozen = stores
    data = tmp_path / "dataset.db"
    calls = []
    insert = TuningDB._insert

    def failing_insert(self, rows):
        calls.append(len(rows))
        if len(calls) == 2:
            raise EmmyError("disk on fire")
        return insert(self, rows)

    monkeypatch.setattr(TuningDB, "_insert", failing_insert)
    with pytest.raises(EmmyError, match="disk on fire"):
        dataset.import_sources(data, [frozen.path, tuning], progress=lambda m: None)
    assert calls == [8, 0]
    with ReadOnlyDB(data) as db:
        assert db.rows() == [] and db.sources() == [] and db.links() == []


def test_other_sources_are_checked_too(tmp_path, capsys):
    not_golden = write_golden(tmp_path / "emu.json", [{"family": "softmax"}])
    assert main(["db", "import", "--db", str(tmp_path / "d.db"), str(not_golden)]) == 2
    assert _one_line_error(capsys) == f"emmy: error: {not_golden}: entry 0: missing 'key'"
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert main(["db", "import", "--db", str(tmp_path / "d.db"), str(foreign)]) == 2
    assert "not an emmy tuning database" in _one_line_error(capsys)
    assert main(["db", "import", "--db", str(tmp_path / "d.db"), str(tmp_path / "nope")]) == 2
    assert _one_line_error(capsys).endswith("nope: no such file or directory")
    assert not (tmp_path / "d.db").exists()


# --- stats and export ---------------------------------------------------------------------


def test_stats(tmp_path, capsys, stores):
    tuning, golden, frozen = stores
    data = tmp_path / "dataset.db"
    dataset.import_sources(data, [frozen.path, golden], progress=lambda m: None)
    assert main(["db", "stats", "--db", str(data)]) == 0
    out = capsys.readouterr().out.splitlines()
    regime = row(A, 1.0).regime
    assert out[0].split() == ["pool", "keys", "configs", "rows", "clean", "failures", "sources"]
    assert out[1].split() == [f"layer_norm__emu__{regime}", "1", "1", "1", "1", "-", "1"]
    assert out[2].split() == [
        f"softmax__emu__{regime}", "2", "4", "7", "5", "compile_error=1", "unstable=1", "2",
    ]  # fmt: skip
    assert out[3] == f"database {data}: 8 rows in 2 pools, 2 sources"
    assert out[4].startswith(f"  source 1: freeze {frozen.path} (sha256 {frozen.sha256[:12]})")
    # a tuning database has pools but no sources
    assert main(["db", "stats", "--db", str(tuning)]) == 0
    assert f"database {tuning}: 8 rows in 2 pools, 0 sources" in capsys.readouterr().out


def test_export_manifest_and_matrices(tmp_path, capsys, stores):
    tuning, golden, frozen = stores
    data = tmp_path / "dataset.db"
    dataset.import_sources(data, [frozen.path, golden], progress=lambda m: None)
    out = tmp_path / "dataset"
    assert main(["db", "export", "--db", str(data), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote 2 pool(s) and {out / 'manifest.json'}" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    regime = row(A, 1.0)
    assert set(manifest) == {
        "schema", "created", "database", "sources", "status_codes", "pools", "features",
    }  # fmt: skip
    assert manifest["schema"] == 1 and manifest["database"] == str(data)
    assert manifest["sources"] == [
        {"path": str(frozen.path), "kind": "freeze", "sha256": frozen.sha256},
        {"path": str(golden), "kind": "golden", "sha256": load_golden(golden).sha256},
    ]
    assert manifest["status_codes"] == [
        "missing", "ok", "compile_error", "launch_error", "wrong_result", "timeout", "unstable",
        "host_bound",
    ]  # fmt: skip
    layer_norm, softmax = manifest["pools"]
    pool_id = f"softmax__emu__{regime.regime}"
    configs = sorted(canonical_config(c) for c in (A, B, C, D))
    assert softmax == {
        "id": pool_id,
        "family": "softmax",
        "device": "emu",
        "regime": regime.regime,
        "regime_words": regime.regime_words,
        "file": f"{pool_id}.npz",
        "keys": sorted([SOFTMAX_KEY, KEY2]),
        "configs": configs,
        "rows": 7,
        "clean": 3,
    }
    assert layer_norm["id"] == f"layer_norm__emu__{regime.regime}" and layer_norm["clean"] == 1
    assert manifest["features"]["softmax"] == {
        "key": {"rows": "int", "cols": "int", "T": "symbol"},
        "config": {
            "threads": "int", "rows_per_block": "int", "vec": "int", "algo": "symbol",
            "reduction": "symbol",
        },
    }  # fmt: skip
    assert manifest["features"]["layer_norm"]["key"] == {
        "rows": "int", "cols": "int", "T": "symbol", "eps": "symbol",
    }  # fmt: skip

    with np.load(out / softmax["file"], allow_pickle=False) as npz:
        assert sorted(npz.files) == ["batch", "median_s", "status"]
        median, status, batch = npz["median_s"], npz["status"], npz["batch"]
    # the emulator times one launch per window; a cell without a clean row has none
    assert set(np.unique(batch)) <= {0, 1} and ((batch == 1) == ~np.isnan(median)).all()
    assert median.dtype == np.float64 and median.shape == (2, 4)
    codes = manifest["status_codes"]

    def cell(key: str, config: dict) -> tuple[float, str]:
        i, j = softmax["keys"].index(key), configs.index(canonical_config(config))
        return float(median[i, j]), codes[int(status[i, j])]

    assert cell(SOFTMAX_KEY, A) == (0.9e-3, "ok")  # the golden row's median is the best
    assert cell(SOFTMAX_KEY, B) == (1.5e-3, "ok")  # the best of two clean rows
    assert cell(KEY2, A) == (4e-3, "ok")
    for where, what in (((SOFTMAX_KEY, C), "compile_error"), ((SOFTMAX_KEY, D), "unstable")):
        value, code = cell(*where)
        assert math.isnan(value) and code == what
    for config in (B, C, D):  # not measured
        value, code = cell(KEY2, config)
        assert math.isnan(value) and code == "missing"

    assert main(["db", "export", "--db", str(tmp_path / "none.db"), "-o", str(out)]) == 2
    assert _one_line_error(capsys).endswith("none.db: no such database")


# --- schema -------------------------------------------------------------------------------


def test_a_schema_1_database_is_read_as_is_and_migrated_on_write(tmp_path):
    path = tmp_path / "old.db"
    with TuningDB(path) as db:
        db.add(_rows()[:2])
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE row_sources")
        conn.execute("DROP TABLE sources")
        conn.execute("ALTER TABLE measurements DROP COLUMN batch")
        conn.execute("ALTER TABLE measurements DROP COLUMN host_s")
        conn.execute("UPDATE emmy_meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()
    content = path.read_bytes()
    # freeze, stats and export only read: the file is left as it was
    frozen = dataset.freeze(path, tmp_path / "f")
    assert frozen.rows == 2 and dataset.stats(path).sources == []
    assert path.read_bytes() == content
    # importing into it migrates it first
    dataset.import_sources(path, [frozen.path], progress=lambda m: None)
    assert SCHEMA_VERSION == 4
    with ReadOnlyDB(path) as db:
        assert db.schema == 4 and len(db.rows()) == 2
        assert [s["kind"] for s in db.sources()] == ["freeze"] and len(db.links()) == 2
