"""scripts/gpu-check on the emulator, in a real subprocess: its checks, its speed parts at
their smallest settings and its bound-program timings (the figures mean nothing off a GPU;
the code path they take on one, down to the driver, is what is tested: torch's side is
timed through the device's events, on the emulator's host; the parts scripts/gpu-day also
runs are run by tests/test_gpu_day.py), and a part that fails, which costs its line of
the report and nothing more. The list of test files the GPU tests part runs is the list
of files with tests marked `gpu`."""

from __future__ import annotations

import faulthandler
import importlib.machinery
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from stores import scaling_family

from emmy.families.registry import FAMILIES

SCRIPT = Path(__file__).parent.parent / "scripts" / "gpu-check"
#: the speed parts' smallest settings: sizes / 1024, one config per sweep beside the pick,
#: the first shape of each target
SMALLEST = ("--speed-only", "--scale", "1024", "--max-sweep", "1", "--quick")


def gpu_check(tmp_path: Path, *options: str, status: int = 0) -> dict:
    """Runs scripts/gpu-check on emu with `options`; its JSON report and its stdout."""
    out = tmp_path / "check.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "emu", *options, "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert result.returncode == status, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text()) | {"stdout": result.stdout}


def test_gpu_check_runs_its_checks_on_emu(tmp_path) -> None:
    report = gpu_check(
        tmp_path, "--quick", "--families", "elementwise", "--models", "mlp:tiny",
        "--runtime", "gpt2:tiny:1:8",
    )  # fmt: skip
    assert report["device"] == "emu" and report["torch_cuda"] is False and report["finished"]
    assert report["card"] == "emu (the CPU emulator)"
    assert report["correctness"]["elementwise/f32"]["failures"] == []
    assert report["correctness"]["elementwise/f32"]["variants"] > 1
    assert report["models"]["mlp:tiny"]["ok"]
    # a bound program replayed, launched one by one, and its kernels timed one by one
    # between the driver's events
    runtime = report["runtime"]["gpt2:tiny:1:8"]
    assert min(runtime["graph_ms"], runtime["eager_ms"], runtime["kernels_ms"]) > 0
    assert runtime["launches"] > 10
    assert "not measured" in report["speed"]
    assert {p["status"] for p in report["parts"].values()} == {"ok"}
    assert report["problems"] == []
    assert "gpu-check on emu (the CPU emulator)" in report["stdout"]


#: the speed parts scripts/gpu-day does not run (tests/test_gpu_day.py runs the others, as
#: gpu-check parts, on emu), and copy, every memory-bound part's reference
OWN_PARTS = "copy,elementwise,split_k"


def test_gpu_check_runs_its_speed_parts_scaled_down_on_emu(tmp_path) -> None:
    """Each speed part gives positive figures for the compile's pick and the best of its
    sweep, and torch's beside them (on the host, through the emulator's events), and the
    targets table their ratios. Here the parts gpu-day does not run."""
    report = gpu_check(tmp_path, *SMALLEST, "--parts", OWN_PARTS)
    speed = report["speed"]
    assert list(report["parts"]) == ["probe", *OWN_PARTS.split(",")]
    assert {p["status"] for p in report["parts"].values()} == {"ok"}
    for name in ("copy", "elementwise"):
        assert speed[name]["best_gb_s"] > 0 and speed[name]["kernel_pick_gb_s"] > 0
        # the pick, and the sweep's first config beside it: the largest tiles
        assert len(speed[name]["configs"]) == 2
    assert set(speed["split_k"]["microseconds"]) == {"1", "2"}
    assert speed["split_k"]["torch_microseconds"] > 0
    assert not any("wrong_results" in part for part in speed.values())  # every one checked
    assert report["problems"] == []
    targets = {row["target"]: row for row in report["targets"]}
    assert targets["elementwise pick"]["reference_name"] == "copy_"
    assert targets["elementwise pick"]["ratio"] > 0
    assert targets["elementwise torch eager"]["ratio"] > 0
    # each result was streamed as it came, labelled with its part, then each part's outcome
    lines = [json.loads(line) for line in (tmp_path / "check.jsonl").read_text().splitlines()]
    outcomes = [line["step"] for line in lines if "outcome" in line]
    assert outcomes == list(report["parts"])
    assert {line["step"] for line in lines if "path" in line} == set(speed) | {"probe"}


def test_a_part_that_overruns_is_cut_and_the_report_goes_on(tmp_path) -> None:
    """A part past its limit is ended with its whole process group: the report says so in
    one line, keeps what it measured, the next part runs in a fresh worker, the report is
    written and the run fails."""
    # far shorter than the copy part's start on the emulator, whatever the caches hold
    report = gpu_check(
        tmp_path, *SMALLEST, "--parts", "copy,rms_norm", "--limit", "copy=0.01", status=1
    )
    assert report["parts"]["copy"]["status"] == "cut"
    assert report["parts"]["rms_norm"]["status"] == "ok"
    assert report["speed"]["rms_norm"]["best_gb_s"] > 0
    cut = [line for line in report["problems"] if line.startswith("copy: cut after")]
    assert len(cut) == 1
    assert "failed: copy" in report["stdout"]
    targets = {row["target"]: row for row in report["targets"]}
    # the memory-bound ratios' reference is what the copy streamed before its cut (on a
    # busy host its torch copy_, timed in milliseconds, can come before the cut lands)
    copied = report["speed"].get("copy", {})
    assert targets["rms_norm best"]["emmy"] > 0
    assert (targets["rms_norm best"]["ratio"] is None) == (not copied)


@pytest.fixture
def script(monkeypatch):
    """scripts/gpu-check as a module, for its parts' machinery."""
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_check", loader))
    monkeypatch.setitem(sys.modules, "gpu_check", module)  # its dataclasses look it up
    loader.exec_module(module)
    return module


#: what a part's worker is given, on the emulator
EMU = {"device_name": "emu", "scale": 1, "quick": True, "max_sweep": None, "options": {}}


def test_a_part_whose_worker_dies_costs_its_line(script, monkeypatch) -> None:
    """A part's worker killed by a crash (a real SIGSEGV in the forked process): the part
    is reported as died, in one line, with what it streamed before it died."""

    def crashes(ctx) -> None:
        ctx.emit(("before", "the crash"), 1.5)
        faulthandler.disable()  # pytest's, inherited: it would print this process's stack
        os.kill(os.getpid(), signal.SIGSEGV)

    monkeypatch.setitem(script.PARTS, "crashes", script.Part(crashes, 30))
    outcome = script.run_part("crashes", 30, EMU)
    assert outcome.status == "died" and outcome.data == {"before": {"the crash": 1.5}}
    assert outcome.notes == ["its worker died of SIGSEGV; the report goes on"]


def test_a_fault_that_leaves_the_device_unusable_ends_its_part(script, monkeypatch) -> None:
    """A sweep whose second config crashes the emulator (tests/library/fault.emmy, mode=oob:
    a write far past its output), the way a sticky CUDA error wedges a GPU context: the
    first config's figure is kept, the crash is one line, the part stops there and says
    so (the third config is not timed)."""
    monkeypatch.setenv("EMMY_LIBRARY_PATH", str(Path(__file__).parent / "library"))
    fault = scaling_family("fault", 2)
    monkeypatch.setitem(FAMILIES, "fault", fault)
    x = np.ones(64, dtype=np.float32)
    configs = [{"mode": mode, "threads": threads} for mode, threads in
               (("right", 32), ("oob", 32), ("right", 64))]  # fmt: skip

    def sweeps(ctx) -> None:
        problem = script.Problem(
            "fault", {"n": 64, "T": "f32"}, [x], (64,), lambda s: 1 / s, "gb_s", np.float32
        )
        script.timed_sweep(ctx, (), problem, configs, until=float("inf"))

    monkeypatch.setitem(script.PARTS, "sweeps", script.Part(sweeps, 120))
    outcome = script.run_part("sweeps", 120, EMU)
    assert outcome.status == "stopped"
    assert list(outcome.data["configs"]) == ["mode=right,threads=32"]
    crash, stop = outcome.notes
    assert crash.startswith("fault mode=oob,threads=32: KernelLaunchError") and "died" in crash
    assert stop.startswith("the CUDA context is unusable after fault mode=oob,threads=32")


def test_a_kernel_whose_output_is_wrong_is_not_timed(script, monkeypatch) -> None:
    """A timed config runs once and its output is checked against the family's reference
    first: one that differs is a line of the report, listed among the wrong results, and
    has no figure."""
    monkeypatch.setenv("EMMY_LIBRARY_PATH", str(Path(__file__).parent / "library"))
    # the reference wants 3x: the kernel's 2x is wrong
    fault = scaling_family("fault", 3)
    monkeypatch.setitem(FAMILIES, "fault", fault)
    x = np.ones(64, dtype=np.float32)

    def sweeps(ctx) -> None:
        problem = script.Problem(
            "fault", {"n": 64, "T": "f32"}, [x], (64,), lambda s: 1 / s, "gb_s", np.float32
        )
        script.timed_sweep(ctx, (), problem, [{"mode": "right", "threads": 32}], float("inf"))

    monkeypatch.setitem(script.PARTS, "sweeps", script.Part(sweeps, 120))
    outcome = script.run_part("sweeps", 120, EMU)
    assert outcome.status == "ok" and "configs" not in outcome.data
    (wrong,) = outcome.data["wrong_results"]
    assert wrong.startswith("fault mode=right,threads=32: MISMATCH: 64 of 64 elements differ")
    assert outcome.notes == [wrong.replace(": MISMATCH", ": WRONG RESULT, not timed: MISMATCH")]


def test_a_bad_option_gets_a_one_line_error() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "emu", "--limit", "nosuch=3"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--limit nosuch=3: no part 'nosuch'" in result.stderr.strip().splitlines()[-1]


def test_the_gpu_tests_part_runs_the_files_with_tests_marked_gpu(script) -> None:
    """GPU_TESTS is every test file with a test marked `gpu`, and nothing else."""
    tests = Path(__file__).parent
    marked = {
        f"tests/{path.name}"
        for path in tests.glob("test_*.py")
        if "mark.gpu" in path.read_text() and path.name != Path(__file__).name
    }
    assert set(script.GPU_TESTS) == marked


def test_the_gpu_tests_part_leaves_cuda_to_the_processes_it_forks(script, monkeypatch) -> None:
    """A process that touched CUDA forks children that cannot: the GPU tests part never
    starts its device, each pytest process it forks makes its own."""

    def touched(name: str):
        raise RuntimeError(f"the part started a {name} device")

    # where the part's context makes its device, and where the part reads its files
    monkeypatch.setattr(sys.modules["gpucheck.context"], "make_device", touched)
    monkeypatch.setattr(
        sys.modules["gpucheck.process_parts"], "GPU_TESTS", ("tests/test_cuda_device.py",)
    )
    outcome = script.run_part("gpu_tests", 120, EMU)
    assert outcome.status == "ok" and outcome.notes == [], outcome.notes
    assert outcome.data["run"] == {"ok": True, "statuses": [0], "sticky": [], "dry": True}
    assert set(outcome.data["counts"]) == {"skipped"}
