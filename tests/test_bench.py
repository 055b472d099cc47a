"""emmy run --bench on the emulator: rows, recall, failures, interruption, concurrency."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from stores import scaling_family, single_site_module

from emmy.base.compile_options import CompileOptions
from emmy.base.regime import regime_for
from emmy.cli import main
from emmy.compiler import compile_graph
from emmy.families.registry import FAMILIES
from emmy.measure.bench import Bench, BenchOptions
from emmy.recall.tuning_db import ReadOnlyDB, TuningDB
from emmy.runtime.emu import EmuDevice

LIBRARY = Path(__file__).parent / "library"
#: two sites (a softmax, a row sum) that both have `threads` and `vec` forks
EXPRESSION = "torch.softmax(torch.randn(16, 96), -1).sum(-1)"
EMMY = str(Path(sys.executable).with_name("emmy"))


def bench_cli(capsys, db: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["run", "-c", EXPRESSION, "--bench", "--db", str(db), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_second_bench_recalls_and_the_next_compile_picks_from_its_rows(
    capsys, tmp_path
) -> None:
    db = tmp_path / "autotune.db"
    code, out, err = bench_cli(capsys, db, "--sweep", "vec", "--pin", "threads=64,128")
    assert code == 0, err
    # per site: the pick, 2 more threads, the other vecs (3 for the row sum; 2 for the
    # softmax, whose vectors are 16 bytes at most)
    assert ": 11 measured, 0 recalled" in out
    assert "measuring" in err  # progress while it works
    code, out, _ = bench_cli(capsys, db, "--sweep", "vec", "--pin", "threads=64,128")
    assert code == 0 and ": 0 measured, 11 recalled" in out
    with TuningDB(db) as store:
        assert store.count() == 11
        regime = regime_for("emu").id
        clean = {
            family: any(r.clean for r in store.rows("emu", regime, family, key))
            for family, key in store.sites("emu", regime)
        }
    main(["compile", "-c", EXPRESSION, "--target", "emu", "--explain", "--db", str(db)])
    explain = capsys.readouterr().out
    lines = {
        line.split()[1]: line
        for line in explain.splitlines()[1:]
        if line.count("_") and "  " in line
    }
    # a site with a clean (stable) row is decided by the database, with the row ids shown;
    # a busy machine can leave every emulator timing of a site unstable, and then not
    assert clean and any(clean.values()), "no clean row at all"
    for family_name, has_clean in clean.items():
        assert ("  db  " in lines[family_name]) == has_clean, explain
    assert "rows " in explain


def test_force_measures_again(capsys, tmp_path) -> None:
    db = tmp_path / "autotune.db"
    bench_cli(capsys, db, "--max-rows", "0")
    code, out, _ = bench_cli(capsys, db, "--max-rows", "0", "--force")
    assert code == 0 and ": 2 measured, 0 recalled" in out


def test_a_pinned_regime_records_apart_and_no_compile_reads_it(capsys, tmp_path) -> None:
    db = tmp_path / "autotune.db"
    code, out, err = bench_cli(capsys, db, "--nvcc-flags", "-Xnvvm -opt=1", "--sweep", "vec")
    assert code == 0
    assert "no ordinary compile reads them" in err
    pinned = regime_for("emu", "-Xnvvm -opt=1")
    with TuningDB(db) as store:
        regimes = {
            r.regime for r in store.rows("emu", pinned.id, "softmax", "rows=16,cols=96,T=f32")
        }
    assert regimes == {pinned.id}
    main(["compile", "-c", EXPRESSION, "--target", "emu", "--explain", "--db", str(db)])
    assert " db " not in capsys.readouterr().out


def test_flags_the_emulator_cannot_honour_are_refused(capsys, tmp_path) -> None:
    code, _, err = bench_cli(capsys, tmp_path / "a.db", "--nvcc-flags=--use_fast_math")
    assert code == 2 and "has no meaning on the emulator" in err


@pytest.fixture
def failing_family(monkeypatch):
    monkeypatch.setenv("EMMY_LIBRARY_PATH", str(LIBRARY))
    scale = scaling_family("scale", 2)
    monkeypatch.setitem(FAMILIES, "scale", scale)


def test_failures_become_rows_and_the_bench_goes_on(tmp_path, failing_family) -> None:
    db_path = tmp_path / "autotune.db"
    module = single_site_module("scale", {"n": 100, "T": "f32"}, [100])
    program = compile_graph(module, CompileOptions(target="emu", db=db_path))
    lines: list[str] = []
    with TuningDB(db_path) as db:
        bench = Bench(
            EmuDevice(),
            regime_for("emu"),
            db,
            BenchOptions(sweep=["all"], repetitions=3),
            lines.append,
        )
        outcomes = bench.run(program)
        rows = {tuple(sorted(o.config.items())): o.row for o in outcomes}
    statuses = {}
    for config, measured in rows.items():
        config = dict(config)
        expected = (
            "compile_error"
            if config["group"] == 3
            else "launch_error"
            if config["threads"] == 2048
            else "wrong_result"
            if config["mode"] == "wrong"
            else "ok"
        )
        statuses[(config["threads"], config["mode"], config["group"])] = measured.status
        assert measured.status in (expected, "unstable" if expected == "ok" else expected), (
            config,
            measured,
        )
        if expected != "ok":
            assert measured.message and measured.median_s is None
        else:
            # a 100-element kernel is over in microseconds: timed again, as many times as
            # fill bench.MIN_TIMED_SECONDS
            assert measured.repetitions > 3, measured
    assert len(rows) == 12
    messages = {r.status: r.message for r in rows.values()}
    assert "GROUP must be a power of two" in messages["compile_error"]
    assert "1024" in messages["launch_error"] or "threads" in messages["launch_error"]
    assert "MISMATCH" in messages["wrong_result"]


def _bench_process(db: Path, expression: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [EMMY, "run", "-c", expression, "--bench", "--db", str(db), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # a suite started in the background inherits SIGINT ignored, and so would the bench
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _wait_for_rows(db: Path, count: int, process: subprocess.Popen, limit: float = 120.0) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        if db.exists():
            with TuningDB(db) as store:
                if store.count() >= count:
                    return
        assert process.poll() is None, process.communicate()
        time.sleep(0.2)
    pytest.fail("the bench wrote no rows in time")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_an_interrupted_bench_leaves_a_consistent_database(tmp_path, how) -> None:
    db = tmp_path / "autotune.db"
    # 40 configs a site: far more than the 3 rows it waits for, one g++ call of 40 kernels
    process = _bench_process(db, EXPRESSION, "--sweep", "all", "--max-rows", "40")
    _wait_for_rows(db, 3, process)
    process.send_signal(how)
    out, err = process.communicate(timeout=60)
    with TuningDB(db) as store:
        assert store.integrity_check() == "ok"
        written = store.count()
        rows = store.rows("emu", regime_for("emu").id, "softmax", "rows=16,cols=96,T=f32")
    assert written >= 3
    for r in rows:
        assert r.status in ("ok", "unstable") and r.median_s is not None and r.bench
    if how == signal.SIGINT:
        assert process.returncode == 130
        assert f"interrupted: {written} row(s) written" in err


def test_two_benches_at_once_lose_no_row(tmp_path) -> None:
    db = tmp_path / "autotune.db"
    first = _bench_process(
        db, "torch.softmax(torch.randn(8, 64), -1)", "--sweep", "vec", "--sweep", "threads"
    )
    second = _bench_process(
        db, "torch.exp(torch.randn(8, 64))", "--sweep", "vec", "--sweep", "threads"
    )
    outputs = [p.communicate(timeout=300) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    summaries = [re.search(r": (\d+) measured, \d+ recalled", out) for out, _ in outputs]
    measured = sum(int(summary.group(1)) for summary in summaries)
    with TuningDB(db) as store:
        assert store.count() == measured
        assert store.integrity_check() == "ok"


def test_bench_inputs_are_fresh_and_never_zero() -> None:
    a, b = torch.randn(1000, dtype=torch.float64), torch.randn(1000, dtype=torch.float64)
    assert not torch.equal(a, b) and bool((a != 0).all())


def bench_right(capsys, argv: list[str]) -> str:
    """Runs a bench; its output, where no row may be a wrong result."""
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrong_result" not in out, out
    return out


@pytest.mark.parametrize(
    "expression",
    [
        "torch.nn.functional.gelu(torch.randn(8, 64) * 2.0 + torch.randn(64))",
        "torch.randn(4, 24) @ torch.randn(24, 16) + torch.randn(16)",
        # a LayerNorm that computes its input's add and writes it as a second output
        "(lambda h: torch.softmax(torch.nn.functional.layer_norm(h, (64,)), -1) * h)"
        "(torch.randn(4, 64) + torch.randn(64))",
        # attention with a padding mask: a parameter only masked keys have
        "torch.nn.functional.scaled_dot_product_attention(torch.randn(2, 2, 5, 8),"
        " torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8), attn_mask=torch.randn(2, 1, 1, 7))",
        # a boolean mask (its own mask_bias site) for a batch of 1: the attention's key leaves
        # out `batch = 1`, its default, which the reference still reads
        "torch.nn.functional.scaled_dot_product_attention(torch.randn(1, 2, 8, 16),"
        " torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16),"
        " attn_mask=torch.ones(1, 8, dtype=torch.bool))",
    ],
)
def test_bench_checks_sites_with_broadcast_inputs(capsys, tmp_path, expression: str) -> None:
    """Each input keeps the shape it has in the program, so a row-broadcast input (a bias)
    broadcasts in the reference as it does in the kernel; every output of a site is
    checked."""
    db = tmp_path / "t.db"
    bench_right(capsys, ["run", "-c", expression, "--bench", "--sample", "2", "--db", str(db)])
    with ReadOnlyDB(db) as database:
        statuses = [row.status for row in database.rows()]
    # a loaded machine may call a timing unstable; what matters is that every result was right
    assert len(statuses) >= 2 and set(statuses) <= {"ok", "unstable"}, statuses


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bench_times_both_paths_of_an_attentions_gradients(capsys, tmp_path, dtype) -> None:
    """An attention's gradients (grouped-query, causal; bf16 on tensor cores): `fused` is
    emmy's four kernels (the statistics, dq, dk, dv), each checked against its reference
    with the bench's random inputs (the statistics those of its q and k), and `sdpa`
    torch's SDPA backward (a host call) checked against the float64 gradients."""
    q = f"torch.randn(1, 4, 9, 16, dtype=torch.{dtype})"
    k = f"torch.randn(1, 2, 9, 16, dtype=torch.{dtype})"
    expression = f"torch.ops.emmy.attention_backward({q}, {q}, {k}, {k}, {q}, None, 0.25, True)[1]"
    db = tmp_path / "t.db"
    bench_right(capsys, ["run", "-c", expression, "--bench", "--sweep", "path", "--db", str(db)])
    with ReadOnlyDB(db) as database:
        rows = database.rows()
    by_family: dict[str, list] = {}
    for row in rows:
        by_family.setdefault(row.family, []).append(row)
    paths = {row.config["path"]: row for row in by_family["attention_backward_path"]}
    assert set(paths) == {"fused", "sdpa"}
    assert paths["sdpa"].median_s == pytest.approx(
        by_family["vendor_attention_backward"][0].median_s
    )
    tensor_cores = "_tc" if dtype == "bfloat16" else ""
    kernels = ("attention_stats", f"attention_dq{tensor_cores}", f"attention_dkv{tensor_cores}")
    parts = [row for name in kernels for row in by_family[name]]
    assert len(parts) == 4 and all(row.status in ("ok", "unstable") for row in parts)
    assert paths["fused"].median_s == pytest.approx(sum(row.median_s for row in parts))


def test_bench_times_both_attention_paths_and_the_next_compile_recalls_the_choice(
    capsys, tmp_path
) -> None:
    """`--sweep path` times the fused kernel, the unfused path (its three kernels, each
    checked against its own reference and recorded as a row of its own site) and torch's
    SDPA (a host call); an option's row is the sum of its kernels' medians, recalled by the
    next bench and decided from by the next compile."""
    expression = (
        "torch.nn.functional.scaled_dot_product_attention(torch.randn(1, 4, 9, 16),"
        " torch.randn(1, 2, 9, 16), torch.randn(1, 2, 9, 16), is_causal=True, enable_gqa=True)"
    )
    db = tmp_path / "t.db"
    argv = ["run", "-c", expression, "--bench", "--sweep", "path", "--db", str(db)]
    bench_right(capsys, argv)
    with ReadOnlyDB(db) as database:
        rows = database.rows()
    by_family: dict[str, list] = {}
    for row in rows:
        by_family.setdefault(row.family, []).append(row)
    assert sorted(by_family) == [
        "attention",
        "attention_path",
        "matmul",
        "softmax",
        "vendor_attention",
    ]
    paths = {row.config["path"]: row for row in by_family["attention_path"]}
    assert set(paths) == {"fused", "unfused", "sdpa"}
    assert paths["sdpa"].median_s == pytest.approx(by_family["vendor_attention"][0].median_s)
    parts = [*by_family["matmul"], *by_family["softmax"]]
    assert len(parts) == 3 and all(row.median_s for row in parts)
    assert paths["unfused"].median_s == pytest.approx(sum(row.median_s for row in parts))
    assert paths["fused"].median_s == pytest.approx(by_family["attention"][0].median_s)
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert ": 0 measured, " in again
    recalled = [line for line in again.splitlines() if "path=" in line and "recalled" in line]
    assert len(recalled) == 3, again
    main(["compile", "-c", expression, "--target", "emu", "--explain", "--db", str(db)])
    explain = capsys.readouterr().out
    choice = next(line for line in explain.splitlines() if line.startswith("attention_path_0"))
    # the database decides from clean rows: a loaded machine may call a timing unstable
    clean = {name: row.median_s for name, row in paths.items() if row.clean}
    if clean:
        assert f"path={min(clean, key=clean.__getitem__)}" in choice and "  db  " in choice, choice
