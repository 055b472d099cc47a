"""scripts/gpu-day on the emulator, in real subprocesses: `prepare` without the kernel
cache (the wheels from the package index, the carry list, the command), `run --quick`
through every step with those wheels (each step's record and an honest status: what
needs a GPU says it did not run, and why), a step cut at its limit, and the sanitizer
step's reading of compute-sanitizer's output (a stand-in for the tool, which needs a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "scripts" / "gpu-day"
#: every step, in the order they run, and its status on emu with --quick
EMU_QUICK = {
    "environment": "ok",
    "install": "ok",
    "gpu_tests": "dry",
    "tensor_cores": "ok",
    "sanitizer": "not available",
    "gpt2": "ok",
    "copy": "ok",
    "softmax": "ok",
    "layer_norm": "ok",
    "rms_norm": "ok",
    "matmul_tc": "ok",
    "attention": "ok",
    "conv": "ok",
    "forward": "ok",
    "decode": "ok",
    "families": "skipped",
}


def gpu_day(*argv: str, status: int = 0, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # EMMY_VERIFY_EACH=1 in a developer's shell would check the compiler, which is not what
    # is tested here: the script's steps, at the emulator's speed
    env.pop("EMMY_VERIFY_EACH", None)
    if path is not None:
        env["PATH"] = path
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env=env,
    )
    assert done.returncode == status, done.stdout[-4000:] + done.stderr[-4000:]
    return done


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> tuple[Path, str]:
    """`prepare --no-kernels` into a folder of its own: the folder and what it printed."""
    folder = tmp_path_factory.mktemp("gpu-day-prepared")
    done = gpu_day("prepare", "--no-kernels", "--dir", str(folder))
    return folder, done.stdout


def test_prepare_downloads_the_wheels_the_gpu_image_lacks(prepared) -> None:
    folder, printed = prepared
    wheels = sorted(p.name.split("-")[0].lower() for p in (folder / "wheels").glob("*.whl"))
    assert wheels == ["immutabledict", "lark", "ordered_set", "peewee", "xdsl"]
    assert all(p.name.endswith("-py3-none-any.whl") for p in (folder / "wheels").iterdir())
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["target"] == "nvidia-h200-sm90" and len(manifest["wheels"]) == 5
    carry = next(line for line in printed.splitlines() if line.startswith("carry: "))
    assert str(folder) in carry and "MiB" in carry and "wheels" in carry
    assert "of 64.0 MiB, fits" in printed
    command = printed.strip().splitlines()[-1]
    assert command == (
        f'run on the GPU machine: python3 scripts/gpu-day run --device cuda --out "$OUT" --dir {folder}'
    )


def test_run_quick_on_emu_records_every_step(prepared, tmp_path) -> None:
    folder, _ = prepared
    out = tmp_path / "out"
    gpu_day("run", "--device", "emu", "--quick", "--out", str(out), "--dir", str(folder))
    # what comes back from a GPU machine: at most 8 files, here three
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "results.jsonl", "summary.json"]
    lines = records(out)
    ends = {r["step"]: r for r in lines if r.get("event") == "end"}
    assert {name: end["status"] for name, end in ends.items()} == EMU_QUICK
    assert list(ends) == list(EMU_QUICK)  # in order, one line each
    for name, end in ends.items():
        if end["status"] in ("skipped", "not available"):
            assert end["why"], name  # never a silent skip
    assert ends["sanitizer"]["why"] == "compute-sanitizer is not on PATH"
    # the results came as they were measured, each labelled with its step
    assert all("step" in r for r in lines)
    values = [r for r in lines if "path" in r]
    assert {r["step"] for r in values} >= set(EMU_QUICK) - {"sanitizer", "families"}

    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and summary["device"] == "emu"
    steps = {name: step["data"] for name, step in summary["steps"].items()}
    assert steps["environment"]["python"]["cuda_available"] is False
    assert steps["environment"]["nvidia_smi"].startswith("not available")
    assert len(steps["install"]["installed"]) == 5 and steps["install"]["needed"] == []
    assert steps["gpu_tests"]["collected"] > 10 and steps["gpu_tests"]["run"]["collect_only"]
    ((case, checked),) = steps["tensor_cores"].items()
    assert case == "attention_tc/f16" and checked["variants"] > 1 and checked["failures"] == []
    assert steps["gpt2"]["gpt2@matmul=kernel@path=fused"]["ok"]
    for name in ("copy", "softmax", "layer_norm", "rms_norm"):
        assert steps[name]["best_gb_s"] > 0 and steps[name]["kernel_pick_gb_s"] > 0
    matmul = steps["matmul_tc"]["4096^3"]
    assert matmul["shape"] == [16, 16, 16] and "matmul" in matmul["pick"]  # sizes / 1024
    assert min(matmul["best_tflops"], matmul["pick_tflops"], matmul["vendor_tflops"]) > 0
    ((_, attention),) = steps["attention"].items()
    assert attention["best_tflops"] > 0 and attention["pick_tflops"] > 0
    assert steps["forward"]["emmy kernels"]["tokens_s"] > 0
    assert steps["decode"]["gpt2:tiny"]["ok"]
    # every timed kernel's output was checked: none was wrong
    assert not any("wrong_results" in data for data in steps.values())
    targets = {row["target"]: row for row in summary["targets"]}
    assert targets["softmax pick"]["reference_name"] == "emmy copy"  # no torch copy_ here
    assert targets["softmax pick"]["ratio"] > 0
    assert targets["matmul 4096^3 pick"]["ratio"] is None  # torch.matmul unmeasured

    log = (out / "log.txt").read_text()
    assert "== tensor_cores" in log and "gpu-day on emu" in log and "none failed" in log
    assert "matmul 4096^3 pick" in log and "unmeasured" in log  # gpu-check's targets table


def test_a_step_past_its_limit_is_cut_and_the_next_runs(tmp_path) -> None:
    out = tmp_path / "out"
    argv = ["run", "--device", "emu", "--quick", "--out", str(out), "--dir", str(tmp_path)]
    # far shorter than the copy part's start on the emulator, whatever the caches hold
    done = gpu_day(*argv, "--steps", "copy,rms_norm", "--limit", "copy=0.01", status=1)
    ends = {r["step"]: r for r in records(out) if r.get("event") == "end"}
    assert ends["copy"]["status"] == "cut" and ends["copy"]["notes"][-1].startswith("cut after")
    assert ends["rms_norm"]["status"] == "ok"
    assert "1 failed: copy" in done.stdout


FAKE_SANITIZER = """#!/bin/sh
# a stand-in for compute-sanitizer: the command it wraps must parse (its --help); racecheck
# finds a hazard in the first case, memcheck nothing
tool=$2
shift 6
echo "$tool $*" >> "$(dirname "$0")/calls"
"$@" --help > /dev/null || exit 3
echo "gpu-day kernels: matmul_tc/f16"
if [ "$tool" = racecheck ]; then
  echo "========= Error: Race reported between Write access and Read access"
  echo "gpu-day kernels: attention_tc/f16"
  echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
  echo "========= ERROR SUMMARY: 1 error"
  exit 99
fi
echo "gpu-day kernels: attention_tc/f16"
echo "========= ERROR SUMMARY: 0 errors"
"""


def test_the_sanitizer_step_reads_each_run_of_the_tool(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "compute-sanitizer"
    fake.write_text(FAKE_SANITIZER)
    fake.chmod(0o755)
    out = tmp_path / "out"
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    argv = ["run", "--device", "emu", "--out", str(out), "--dir", str(tmp_path)]
    gpu_day(*argv, "--steps", "sanitizer", status=1, path=path)
    (end,) = [r for r in records(out) if r.get("event") == "end"]
    assert end["status"] == "failed" and end["notes"][0].startswith("racecheck: errors: ")
    calls = (bin_dir / "calls").read_text().splitlines()
    assert [call.split()[0] for call in calls] == ["racecheck", "memcheck"]
    assert all(
        call.endswith("kernels --device emu --cases matmul_tc/f16,conv_tc/f16,attention_tc/f16")
        for call in calls
    )
    found = json.loads((out / "summary.json").read_text())["steps"]["sanitizer"]["data"]
    assert found["cases"] == ["matmul_tc/f16", "conv_tc/f16", "attention_tc/f16"]
    racecheck, memcheck = found["racecheck"], found["memcheck"]
    assert racecheck["verdict"] == "errors" and racecheck["hazards"] == 1
    assert racecheck["reports_by_case"] == {"matmul_tc/f16": 1}
    assert memcheck["verdict"] == "clean" and memcheck["errors"] == 0
