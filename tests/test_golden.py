"""Golden files: strict loading, import into the tuning database, and promotion."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from emmy.base.errors import EmmyError
from emmy.recall import golden as goldmod
from emmy.recall.golden import (
    GOLDEN_SCHEMA,
    GoldenEntry,
    golden_paths,
    import_golden,
    load_golden,
    promote,
)
from emmy.recall.tuning_db import Row, TuningDB

DEV = "nvidia-h200-sm90"
REG = "r-0123456789ab"
WORDS = "nvrtc default (-O3)"

GOOD = {
    "schema": 1,
    "device": DEV,
    "regime": REG,
    "regime_words": WORDS,
    "entries": [
        {
            "family": "gemm",
            "key": "m=128,n=256",
            "config": {"BM": 64, "layout": "row"},
            "median_s": 1.5e-5,
            "promoted_from": {"benches": ["b1"]},
        },
        {"family": "softmax", "key": "n=4096", "config": {"BLOCK": 1024}, "median_s": None},
    ],
}


def write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def measured(key: str, bm: int, median: float | None, origin: str = "forced", **kw) -> Row:
    fields = {
        "device": DEV,
        "regime": REG,
        "regime_words": WORDS,
        "compiler": "nvrtc 13.0",
        "family": "gemm",
        "key": key,
        "config": {"BM": bm},
        "origin": origin,
        "status": "ok" if median is not None else "compile_error",
        "median_s": median,
        "bench": "bench-1",
    }
    fields.update(kw)
    return Row(**fields)


@pytest.fixture
def db(tmp_path):
    with TuningDB(tmp_path / "t.db") as d:
        yield d


def test_load_a_good_file(tmp_path):
    path = write(tmp_path / f"{DEV}.json", GOOD)
    g = load_golden(path)
    assert (g.path, g.device, g.regime, g.regime_words) == (path, DEV, REG, WORDS)
    assert GOLDEN_SCHEMA == 1
    assert g.entries[0] == GoldenEntry(
        "gemm", "m=128,n=256", {"BM": 64, "layout": "row"}, 1.5e-5, {"benches": ["b1"]}
    )
    assert g.entry("softmax", "n=4096") == GoldenEntry("softmax", "n=4096", {"BLOCK": 1024}, None)
    assert g.entry("softmax", "n=1") is None


def _set(doc: dict, where: tuple, value: object) -> dict:
    """A copy of `doc` with the item at `where` set to `value`, or removed when it is `...`."""
    doc = copy.deepcopy(doc)
    target = doc
    for step in where[:-1]:
        target = target[step]
    if value is ...:
        del target[where[-1]]
    else:
        target[where[-1]] = value
    return doc


E0 = "entry 0 (gemm, m=128,n=256)"


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ("[1, 2", ":1:6: invalid JSON: Expecting ',' delimiter"),
        ('{\n  "schema": 1,\n  "device": }', ":3:13: invalid JSON: Expecting value"),
        ([GOOD], ": a golden file is a JSON object, not list"),
        (_set(GOOD, ("schema",), ...), ": missing 'schema'"),
        (_set(GOOD, ("schema",), 2), ": schema 2 is not one this emmy reads (golden schema 1)"),
        (_set(GOOD, ("schema",), "1"), ": schema '1' is not one this emmy reads"),
        (_set(GOOD, ("schema",), True), ": schema True is not one this emmy reads"),
        (_set(GOOD, ("extra",), 1), ": unknown field 'extra'"),
        (_set(GOOD, ("device",), ...), ": missing 'device'"),
        (_set(GOOD, ("device",), 90), ": device 90 is not a string"),
        (_set(GOOD, ("device",), "H200"), ": device 'H200' is not a device identity"),
        (_set(GOOD, ("device",), "emu"), ": device 'emu' differs from the file name's"),
        (_set(GOOD, ("regime",), ...), ": missing 'regime'"),
        (_set(GOOD, ("regime",), ["r"]), ": regime ['r'] is not a string"),
        (_set(GOOD, ("regime",), "-O3"), ": regime '-O3' is not a regime id"),
        (_set(GOOD, ("regime_words",), None), ": regime_words None is not a string"),
        (_set(GOOD, ("entries",), ...), ": 'entries' must be a list"),
        (_set(GOOD, ("entries",), {}), ": 'entries' must be a list"),
        (_set(GOOD, ("entries", 1), "x"), ": entry 1: not an object"),
        (_set(GOOD, ("entries", 0, "family"), ...), ": entry 0: missing 'family'"),
        (_set(GOOD, ("entries", 0, "key"), 7), ": entry 0: key 7 is not a non-empty string"),
        (_set(GOOD, ("entries", 0, "config"), ...), f": {E0}: missing 'config'"),
        (_set(GOOD, ("entries", 0, "config"), []), f": {E0}: config must be a non-empty object"),
        (_set(GOOD, ("entries", 0, "config"), {}), f": {E0}: config must be a non-empty object"),
        (
            _set(GOOD, ("entries", 0, "config", "BM"), 6.4),
            f": {E0}: config 'BM': 6.4 is not an int or a string",
        ),
        (
            _set(GOOD, ("entries", 0, "config", "BM"), False),
            f": {E0}: config 'BM': False is not an int or a string",
        ),
        (
            _set(GOOD, ("entries", 0, "config", "BM"), [64]),
            f": {E0}: config 'BM': [64] is not an int or a string",
        ),
        (
            _set(GOOD, ("entries", 0, "median_s"), -1.0),
            f": {E0}: median_s -1.0 is not a positive number",
        ),
        (
            _set(GOOD, ("entries", 0, "median_s"), "fast"),
            f": {E0}: median_s 'fast' is not a positive number",
        ),
        ('{"schema": 1, "x": NaN}', ": unknown field 'x'"),
        (
            _set(GOOD, ("entries", 0, "median"), 1.0),
            f": {E0}: unknown field 'median'",
        ),
        (
            _set(GOOD, ("entries", 0, "promoted_from"), "bench-1"),
            f": {E0}: promoted_from must be an object",
        ),
        (
            _set(GOOD, ("entries", 1), GOOD["entries"][0]),
            ": entry 1 (gemm, m=128,n=256): duplicate of entry 0",
        ),
    ],
)
def test_a_malformed_file_names_path_entry_and_fault(tmp_path, doc, why):
    path = write(tmp_path / f"{DEV}.json", doc)
    with pytest.raises(EmmyError) as e:
        load_golden(path)
    assert str(e.value).startswith(f"{path}{why}"), str(e.value)


def test_a_non_finite_median_is_refused(tmp_path):
    text = json.dumps(GOOD).replace("1.5e-05", "Infinity")
    path = write(tmp_path / f"{DEV}.json", text)
    with pytest.raises(EmmyError, match="median_s inf is not a positive number"):
        load_golden(path)


def test_unreadable_and_non_text_files(tmp_path):
    missing = tmp_path / f"{DEV}.json"
    with pytest.raises(EmmyError, match=f"^{missing}: cannot read the golden file"):
        load_golden(missing)
    missing.write_bytes(b"\xff\xfe{}")
    with pytest.raises(EmmyError, match=f"^{missing}: not UTF-8 text"):
        load_golden(missing)


def test_golden_paths_recipe_first(tmp_path, monkeypatch):
    agnostic = tmp_path / "agnostic"
    monkeypatch.setattr(goldmod, "MODEL_AGNOSTIC_DIR", agnostic)
    recipe = tmp_path / "recipes" / "mlp"
    assert golden_paths(DEV, recipe) == []
    write(agnostic / f"{DEV}.json", GOOD)
    assert golden_paths(DEV, recipe) == [agnostic / f"{DEV}.json"]
    write(recipe / "golden" / f"{DEV}.json", GOOD)
    write(recipe / "golden" / "emu.json", GOOD)
    assert golden_paths(DEV, recipe) == [
        recipe / "golden" / f"{DEV}.json",
        agnostic / f"{DEV}.json",
    ]
    assert golden_paths(DEV) == [agnostic / f"{DEV}.json"]
    with pytest.raises(EmmyError, match="not a device identity"):
        golden_paths("../../etc/passwd")


def test_the_package_golden_dir():
    assert goldmod.MODEL_AGNOSTIC_DIR == Path(goldmod.__file__).parent / "golden_configs"
    for path in goldmod.MODEL_AGNOSTIC_DIR.glob("*.json"):
        load_golden(path)  # committed files are valid


# --- import -------------------------------------------------------------------------------


def test_import_adds_golden_rows_once(tmp_path, db):
    path = write(tmp_path / f"{DEV}.json", GOOD)
    g = load_golden(path)
    assert import_golden(db, g) == 1  # the entry without a median is not a clean row
    [r] = db.best(DEV, REG, "gemm", "m=128,n=256")
    assert (r.origin, r.status, r.compiler, r.bench) == ("golden", "ok", "golden", str(path))
    assert (r.config, r.median_s, r.regime_words) == ({"BM": 64, "layout": "row"}, 1.5e-5, WORDS)
    assert import_golden(db, load_golden(path)) == 0
    # reformatting is no change of content
    path.write_text(json.dumps(GOOD, indent=7))
    assert import_golden(db, load_golden(path)) == 0
    assert db.count() == 1


def test_reimporting_a_changed_file_replaces_its_rows(tmp_path, db):
    path = write(tmp_path / f"{DEV}.json", GOOD)
    import_golden(db, load_golden(path))
    db.add([measured("m=128,n=256", 8, 2e-5)])
    changed = _set(GOOD, ("entries", 0, "config"), {"BM": 128, "layout": "row"})
    changed = _set(changed, ("entries", 1, "median_s"), 3e-6)
    write(path, changed)
    assert import_golden(db, load_golden(path)) == 2
    # the stale golden copy is gone; measured rows are untouched
    assert [r.config for r in db.best(DEV, REG, "gemm", "m=128,n=256")] == [
        {"BM": 128, "layout": "row"},
        {"BM": 8},
    ]
    assert db.count() == 3
    # back to the first content: imported again, not mistaken for already there
    write(path, GOOD)
    assert import_golden(db, load_golden(path)) == 1
    assert db.count() == 2


# --- promotion ----------------------------------------------------------------------------


def _bench(db: TuningDB) -> dict[str, int]:
    ids = db.add(
        [
            measured("a", 1, 4e-5, origin="pick"),
            measured("a", 2, 2e-5),
            measured("a", 3, 3e-5, bench="bench-2"),
            measured("a", 4, None, message="too many registers"),
            measured("a", 5, 1e-6, origin="golden", compiler="golden"),  # not evidence
            measured("a", 6, 1e-6, regime="r-ffffffffffff"),  # another regime
            measured("b", 1, 5e-5),
        ]
    )
    return {"winner_a": ids[1], "winner_b": ids[6]}


def test_promote_writes_the_winners_with_their_evidence(tmp_path, db):
    ids = _bench(db)
    path = tmp_path / "recipes" / "mlp" / "golden" / f"{DEV}.json"
    promoted = promote(db, DEV, REG, WORDS, path)
    assert [(e.key, e.config, e.median_s) for e in promoted] == [
        ("a", {"BM": 2}, 2e-5),
        ("b", {"BM": 1}, 5e-5),
    ]
    g = load_golden(path)
    assert g.entries == tuple(promoted)
    assert g.entry("gemm", "a").promoted_from == {
        "benches": ["bench-1", "bench-2"],
        "row_id": ids["winner_a"],
        "compiler": "nvrtc 13.0",
        "emmy_version": promoted[0].promoted_from["emmy_version"],
        "margin_over_runner_up": 1.5,
        "old_pick": {"config": {"BM": 1}, "median_s": 4e-5},
        "margin_over_old_pick": 2.0,
        "rows_beaten": 2,
    }
    b = g.entry("gemm", "b").promoted_from
    assert (b["margin_over_runner_up"], b["old_pick"], b["margin_over_old_pick"]) == (
        None,
        None,
        None,
    )
    assert b["rows_beaten"] == 0 and b["row_id"] == ids["winner_b"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


def test_promote_one_site_keeps_the_other_entries(tmp_path, db):
    _bench(db)
    path = write(tmp_path / f"{DEV}.json", GOOD)
    promote(db, DEV, REG, WORDS, path, key="a")
    g = load_golden(path)
    assert [(e.family, e.key) for e in g.entries] == [
        ("gemm", "a"),
        ("gemm", "m=128,n=256"),
        ("softmax", "n=4096"),
    ]
    assert (
        g.entry("gemm", "m=128,n=256")
        == load_golden(write(tmp_path / "x" / f"{DEV}.json", GOOD)).entries[0]
    )
    # a faster measurement later replaces the promoted entry, nothing else
    db.add([measured("a", 9, 1e-5)])
    promote(db, DEV, REG, WORDS, path, family="gemm", key="a")
    g2 = load_golden(path)
    assert g2.entry("gemm", "a").config == {"BM": 9}
    assert g2.entry("gemm", "a").promoted_from["rows_beaten"] == 3
    assert [e for e in g2.entries if e.key != "a"] == [e for e in g.entries if e.key != "a"]


def test_promoted_files_are_deterministic(tmp_path, db):
    _bench(db)
    one, two = tmp_path / "1" / f"{DEV}.json", tmp_path / "2" / f"{DEV}.json"
    promote(db, DEV, REG, WORDS, one)
    promote(db, DEV, REG, WORDS, two)
    first = one.read_bytes()
    assert first == two.read_bytes()
    promote(db, DEV, REG, WORDS, one)
    assert one.read_bytes() == first
    text = first.decode()
    assert text.endswith("}\n") and '\n  "entries": [\n' in text  # indented, diff-friendly
    assert list(json.loads(text)) == sorted(json.loads(text))  # sorted keys


def test_nothing_to_promote(tmp_path, db):
    path = tmp_path / f"{DEV}.json"
    with pytest.raises(EmmyError, match=f"nothing to promote on {DEV} under regime {REG}"):
        promote(db, DEV, REG, WORDS, path)
    db.add([measured("a", 1, None), measured("a", 2, 1e-6, origin="golden")])
    with pytest.raises(EmmyError, match=r"nothing to promote for \(\*, a\)"):
        promote(db, DEV, REG, WORDS, path, key="a")
    assert not path.exists()


def test_promote_refuses_to_overwrite_a_bad_or_foreign_file(tmp_path, db):
    _bench(db)
    path = write(tmp_path / f"{DEV}.json", "{ not json")
    with pytest.raises(EmmyError, match="invalid JSON"):
        promote(db, DEV, REG, WORDS, path)
    assert path.read_text() == "{ not json"
    write(path, _set(GOOD, ("regime",), "r-ffffffffffff"))
    before = path.read_bytes()
    with pytest.raises(EmmyError, match="holds regime r-ffffffffffff"):
        promote(db, DEV, REG, WORDS, path)
    assert path.read_bytes() == before
    with pytest.raises(EmmyError, match="must be named"):
        promote(db, DEV, REG, WORDS, tmp_path / "golden.json")
    with pytest.raises(EmmyError, match="not a regime id"):
        promote(db, DEV, "-O3", WORDS, tmp_path / f"{DEV}.json")
    assert sorted(os.listdir(tmp_path)) == [f"{DEV}.json", "t.db", "t.db-shm", "t.db-wal"]


def test_a_promoted_file_imports_as_golden_rows(tmp_path, db):
    _bench(db)
    path = tmp_path / f"{DEV}.json"
    promote(db, DEV, REG, WORDS, path)
    with TuningDB(tmp_path / "fresh.db") as fresh:
        assert import_golden(fresh, load_golden(path)) == 2
        [r] = fresh.best(DEV, REG, "gemm", "a")
        assert (r.config, r.median_s, r.origin) == ({"BM": 2}, 2e-5, "golden")
