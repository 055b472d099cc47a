"""A compile through the program cache (emmy.build), from every door: `emmy compile`,
`emmy run` and `emmy.compile`; and the golden step each compile shows in --explain."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from stores import SOFTMAX_KEY, golden_entry, softmax_config, write_golden
from torch import nn

import emmy
from emmy.base.regime import regime_for
from emmy.build import CACHE_HIT
from emmy.cli import main
from emmy.recall.tuning_db import TuningDB
from emmy.runtime.emu import EmuDevice

SOFTMAX = "torch.nn.Softmax(dim=-1)(torch.randn(8, 64))"


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    """A cache of this test alone, so that its first compile cannot hit."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("EMMY_CACHE_DIR", str(cache))
    return cache


def no_compile(*args, **kwargs):
    raise AssertionError("compiled again instead of reading the program cache")


def test_emmy_compile_of_the_same_module_twice_hits_the_program_cache(
    fresh_cache, monkeypatch
) -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU()).eval()
    x = torch.randn(4, 8)
    first = emmy.compile(model, x, device=EmuDevice(), db="none")
    assert CACHE_HIT not in first.program.timings
    monkeypatch.setattr("emmy.compiler.compile_graph", no_compile)
    second = emmy.compile(model, x, device=EmuDevice(), db="none")
    assert CACHE_HIT in second.program.timings
    assert second.program.source == first.program.source
    with torch.no_grad():
        torch.testing.assert_close(second(x), model(x), atol=1e-4, rtol=1e-4)
    with pytest.raises(AssertionError, match="compiled again"):
        emmy.compile(model, x, device=EmuDevice(), db="none", use_cache=False)


def test_emmy_run_reads_the_program_cache_unless_told_not_to(
    fresh_cache, monkeypatch, capsys
) -> None:
    argv = ["run", "-c", SOFTMAX, "--device", "emu", "--db", "none", "--check"]
    assert main(argv) == 0
    monkeypatch.setattr("emmy.compiler.compile_graph", no_compile)
    assert main(argv) == 0
    assert "OK: matches torch eager" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="compiled again"):
        main([*argv, "--no-cache"])


def test_explain_shows_the_golden_rows_the_compile_imports(fresh_cache, tmp_path, capsys) -> None:
    recipe = tmp_path / "recipe"
    golden = write_golden(
        recipe / "golden" / "emu.json", [golden_entry(softmax_config(vec=2), 2e-3)]
    )
    db = tmp_path / "autotune.db"
    argv = ["compile", "-c", SOFTMAX, "--target", "emu", "--explain"]
    argv += ["--db", str(db), "--golden", str(recipe), "--no-cache"]
    assert main(argv) == 0
    first = capsys.readouterr().out.splitlines()
    assert first[0] == f"imported 1 golden rows from {golden} into {db}"
    # the softmax; the detach the trace adds views its input, an op no kernel computes
    assert first[1].startswith("ops: 1 of 1 ops in emmy kernels"), first[1]
    assert first[2].split() == ["site", "family", "key", "config", "source", "evidence"]
    with TuningDB(db) as database:
        (imported,) = database.rows("emu", regime_for("emu").id, "softmax", SOFTMAX_KEY)
    assert imported.origin == "golden" and imported.config == softmax_config(vec=2)
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"golden rows of {golden} already in {db}"
    assert main([*argv, "--db", "none"]) == 0
    assert "golden rows" not in capsys.readouterr().out


def test_a_program_cache_hit_imports_neither_xdsl_nor_torch(fresh_cache) -> None:
    """What keeps a warm `emmy compile` at a file read: the compiler and the frontends
    are imported on a miss alone."""
    script = (
        "import sys\n"
        "from emmy.cli import main\n"
        f"code = main(['compile', '-c', {SOFTMAX!r}, '--target', 'emu', '--db', 'none'])\n"
        "print(code, sorted(m for m in ('xdsl', 'torch') if m in sys.modules))\n"
    )
    env = {**os.environ, "EMMY_CACHE_DIR": str(fresh_cache)}
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
        for _ in range(2)
    ]
    cold, warm = (run.stdout.splitlines()[-1] for run in runs)
    assert cold == "0 ['torch', 'xdsl']", runs[0].stderr
    assert warm == "0 []", runs[1].stdout + runs[1].stderr
    assert CACHE_HIT in runs[1].stdout
