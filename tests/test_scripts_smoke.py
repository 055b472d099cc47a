"""Every script under benchmarks/ and scripts/ runs at its smallest setting, exits 0 and
prints its figures, so none of them rots unnoticed. Each runs in a temporary folder (its
working directory and TMPDIR), with the kernel cache and prior of the conftest."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from emmy.recall.tuning_db import ReadOnlyDB

ROOT = Path(__file__).resolve().parent.parent

#: per script: its smallest setting ({tmp} is the test's folder), the stream it prints its
#: figures on, and a line it always prints there
SMOKE = {
    "benchmarks/backend_stages.py": (["--models", "conv_net"], "stdout", "all models: emmy"),
    "benchmarks/compile_time.py": (
        ["--models", "conv_net", "--compilers", "emmy", "--kernel-cache"],
        "stdout",
        "compile seconds, program cache off, kept kernel caches",
    ),
    "benchmarks/compile_latency.py": (["--runs", "1"], "stdout", "warm compile process ="),
    "benchmarks/decode.py": (
        ["--models", "gpt2:tiny", "--tokens", "2"],
        "stdout",
        "decode tokens/s emmy",
    ),
    "benchmarks/dataset_noise.py": (
        ["--family", "softmax", "--every", "52", "--sample", "1"],
        "stdout",
        "mean over families:",
    ),
    "benchmarks/decode_attention.py": (["--quick"], "stdout", "emu decode attention batch=1"),
    "benchmarks/device_worker.py": (["--repeats", "1"], "stdout", "worker round trip (median):"),
    "benchmarks/host_overhead.py": (
        ["--calls", "10", "--launches", "1,10", "--models", "mlp"],
        "stdout",
        "µs a launch; per call",
    ),
    "benchmarks/campaign.py": (
        ["--items", "2", "--sample", "1", "--no-warm"],
        "stdout",
        "scaling, 2 workers over 1:",
    ),
    "benchmarks/kernel_compile_and_run.py": (["--quick"], "stdout", "emu softmax 64x1024 f32"),
    "benchmarks/vision_zoo.py": (
        ["--models", "squeezenet1_1", "--sizes", "32", "--batch", "1"],
        "stdout",
        "emmy.compile matches 1, torch.compile matches 1, both 1",
    ),
    "benchmarks/model_compile.py": (
        ["--config", "tiny", "--skip-inductor"],
        "stdout",
        "launch plan: temporaries in a",
    ),
    "benchmarks/model_coverage.py": (
        ["--models", "conv_net", "--training", "mlp"],
        "stdout",
        "all 2 model(s) (train backward):",
    ),
    "benchmarks/resolution.py": (
        ["--rows", "1000", "--sites", "5"],
        "stdout",
        "sites with rows (db decides): median",
    ),
    "benchmarks/training.py": (
        ["--models", "mlp", "--compilers", "emmy", "--steps", "1"],
        "stdout",
        "training step compile seconds",
    ),
    "scripts/compile-snapshot": (
        ["--recipes", "mlp", "--configs", "tiny", "--targets", "emu"],
        "stdout",
        '"case": "mlp:tiny:0:emu"',
    ),
    "scripts/make-dataset": (
        ["--db", "{tmp}/dataset.db", "--family", "softmax", "--every", "52", "--sample", "1"],
        "stderr",
        "dataset campaign",
    ),
}
#: scripts whose smoke test lives elsewhere, and where
COVERED_ELSEWHERE = {
    "scripts/gpu-check": "tests/test_gpu_check.py runs it on emu",
    "scripts/gpu-day": "tests/test_gpu_day.py runs it on emu",
    "scripts/import-cycles": "tests/test_import_layering.py runs it on the tree",
}


def test_no_script_shadows_an_installed_module() -> None:
    """A script runs with its folder first on the path: one named as an installed package
    is imported in its place by whatever imports that package (benchmarks/kernels.py was
    imported by transformers as the `kernels` hub package, and every benchmark of a
    transformers model failed)."""
    installed = set(packages_distributions())
    shadowing = sorted(
        str(path.relative_to(ROOT))
        for folder in ("benchmarks", "scripts")
        for path in (ROOT / folder).glob("*.py")
        if path.stem in installed
    )
    assert not shadowing, f"scripts named as installed modules: {shadowing}"


def run_script(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    options, _, _ = SMOKE[script]
    argv = [option.replace("{tmp}", str(tmp_path)) for option in options]
    return subprocess.run(
        [sys.executable, str(ROOT / script), *argv],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_script_has_a_smoke_test() -> None:
    scripts = {
        str(path.relative_to(ROOT))
        for folder in ("benchmarks", "scripts")
        for path in (ROOT / folder).iterdir()
        if path.is_file() and not path.name.startswith((".", "_"))
    }
    assert scripts == set(SMOKE) | set(COVERED_ELSEWHERE)


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_script_runs_at_its_smallest_setting(script: str, tmp_path: Path) -> None:
    done = run_script(script, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    _, stream, line = SMOKE[script]
    printed = done.stdout if stream == "stdout" else done.stderr
    assert line in printed, printed[-3000:]
    if script == "scripts/make-dataset":
        # make-dataset goes on past a key that fails: the rows show that the bench ran (a
        # busy machine makes timings unstable, still measured)
        with ReadOnlyDB(tmp_path / "dataset.db") as db:
            statuses = [row.status for row in db.rows()]
        assert len(statuses) >= 2 and set(statuses) <= {"ok", "unstable"}, statuses
