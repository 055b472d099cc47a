"""scripts/gpu-day on the emulator, in real subprocesses: `prepare` without the kernel
cache (the wheels from the package index for the GPU image's Python, the carry list, the
command), `run --quick` through every step with those wheels, down the code path each runs
on a GPU (torch's timings on the emulator's host, the GPU tests selected and run in their
processes, where each skips saying why), a step cut at its limit, and stand-ins for the
tools that need a GPU: compute-sanitizer's output, and an nvidia-smi that rejects a field.
The default budget and its step limits fit a 15-minute loan with room for a second try."""

from __future__ import annotations

import importlib.machinery
import importlib.util
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
    "tensor_cores": "ok",
    "gpt2": "ok",
    "gpu_tests": "dry",
    "forward": "ok",
    "matmul_tc": "ok",
    "attention": "ok",
    "copy": "ok",
    "softmax": "ok",
    "layer_norm": "ok",
    "rms_norm": "ok",
    "conv": "ok",
    "sanitizer": "not available",
    "decode": "ok",
    "training": "ok",
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
    """`prepare --quick` into a folder of its own: the folder and what it printed."""
    folder = tmp_path_factory.mktemp("gpu-day-prepared")
    done = gpu_day("prepare", "--quick", "--dir", str(folder))
    return folder, done.stdout


def test_prepare_downloads_the_wheels_and_compiles_the_kernels(prepared) -> None:
    folder, printed = prepared
    wheels = sorted(p.name.split("-")[0].lower() for p in (folder / "wheels").glob("*.whl"))
    assert wheels == ["immutabledict", "lark", "ordered_set", "peewee", "xdsl"]
    assert all(p.name.endswith("-py3-none-any.whl") for p in (folder / "wheels").iterdir())
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["target"] == "nvidia-h200-sm90" and len(manifest["wheels"]) == 5
    assert manifest["python"] == "3.12"  # the GPU image's, not this machine's
    # every kind of source the steps compile first, at the --quick settings, into the cache
    compiled = set(manifest["took_s"])
    assert {"gpt2, emmy kernels", "decode programs", "GPT-2 tiny training step"} <= compiled
    assert {
        f"{step} sweeps" for step in ("copy", "matmul_tc", "attention", "conv", "forward")
    } <= compiled
    assert manifest["kernels"] >= len(compiled) and manifest["nvrtc"]
    carry = next(line for line in printed.splitlines() if line.startswith("carry: "))
    assert str(folder) in carry and "MiB" in carry and "wheels" in carry and "cache" in carry
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
    assert summary["card"] == {"identity": "emu", "label": "emu (the CPU emulator)"}
    steps = {name: step["data"] for name, step in summary["steps"].items()}
    assert steps["environment"]["python"]["cuda_available"] is False
    assert steps["environment"]["nvidia_smi"].startswith("not available")
    assert len(steps["install"]["installed"]) == 5 and steps["install"]["needed"] == []
    # the GPU tests ran as on a GPU, and each skipped saying so: the planted fault alone in
    # a second process
    gpu_tests = steps["gpu_tests"]
    assert (
        gpu_tests["counts"] == {"skipped": len(gpu_tests["tests"])} and len(gpu_tests["tests"]) > 30
    )
    planted = "tests/test_runtime_drivers.py::test_a_planted_fault_is_reported_against_its_own_launch[cuda]"
    assert gpu_tests["run"] == {"ok": True, "statuses": [0, 0], "sticky": [planted], "dry": True}
    assert all("[emu" not in test for test in gpu_tests["tests"])  # the GPU ones alone
    ((case, checked),) = steps["tensor_cores"].items()
    assert case == "attention_tc/f16" and checked["variants"] > 1 and checked["failures"] == []
    assert steps["gpt2"]["gpt2@matmul=kernel@path=fused"]["ok"]
    # torch's side is timed as on a GPU: through the device's events, on its host here
    for name in ("copy", "softmax", "layer_norm", "rms_norm"):
        assert steps[name]["best_gb_s"] > 0 and steps[name]["kernel_pick_gb_s"] > 0
        assert steps[name]["torch_gb_s"] > 0
    matmul = steps["matmul_tc"]["4096^3"]
    assert matmul["shape"] == [16, 16, 16] and "matmul" in matmul["pick"]  # sizes / 1024
    assert min(matmul["best_tflops"], matmul["pick_tflops"], matmul["vendor_tflops"]) > 0
    assert matmul["torch_tflops"] > 0
    ((_, attention),) = steps["attention"].items()
    assert attention["best_tflops"] > 0 and attention["pick_tflops"] > 0
    assert attention["sdpa_tflops"] > 0 and attention["sdpa_backends"]["math"] > 0
    # the gradients: emmy's kernels and the library's, each checked, beside SDPA's backward
    backward = attention["backward"]
    assert min(backward["emmy kernels_tflops"], backward["vendor_tflops"]) > 0, backward
    assert backward["sdpa_tflops"] > 0
    (conv,) = steps["conv"].values()
    assert conv["torch_tflops"] > 0 and conv["pick_tflops"] > 0
    # its weight gradient: the kernel and each split offered (a batch of 32 8×8 images),
    # each checked, beside torch's
    gradient = conv["weight_gradient"]
    assert set(gradient["microseconds"]) == {"1", "2", "4", "8"}, gradient
    assert min(gradient["microseconds"].values()) > 0 and gradient["torch_microseconds"] > 0
    # GPT-2 compiled where its inputs are, through both APIs, beside eager and torch.compile
    forward = steps["forward"]
    for label in ("emmy kernels", "torch.compile emmy kernels", "torch eager", "torch.compile"):
        assert forward[label]["tokens_s"] > 0, label
    assert forward["torch.compile emmy kernels"]["graphs"] >= 1
    assert forward["torch.compile"]["backend"] == "aot_eager"
    assert steps["decode"]["gpt2:tiny"]["ok"]
    assert "torch.compile aot_eager" in steps["decode"]["gpt2:tiny"]["line"]
    decoded = steps["decode"]["gpt2:tiny"]["tokens_s"]  # each streamed as it was measured
    assert set(decoded) == {"emmy", "torch eager", "torch.compile aot_eager"}
    # a GPT-2 training step compiled by emmy's backend, beside eager and torch.compile
    training = steps["training"]
    for label in ("torch eager", "emmy", "torch.compile"):
        assert training[label]["tokens_s"] > 0, label
    assert training["emmy"]["compile_s"] > 0 and training["case"]["config"] == "tiny"
    # every timed kernel's output was checked: none was wrong
    assert not any("wrong_results" in data for data in steps.values())
    targets = {row["target"]: row for row in summary["targets"]}
    assert targets["softmax pick"]["reference_name"] == "copy_"
    assert targets["softmax pick"]["ratio"] > 0
    assert targets["matmul 4096^3 pick"]["ratio"] > 0
    assert targets["gpt2 forward torch.compile emmy kernels"]["ratio"] > 0

    log = (out / "log.txt").read_text()
    assert "== tensor_cores" in log and "gpu-day on emu" in log and "none failed" in log
    assert "targets (same device, same run: emu (the CPU emulator))" in log


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


def with_stand_in(tmp_path: Path, tool: str, script: str, step: str, status: int) -> Path:
    """One step run on emu with `script` on the PATH as `tool`: the results folder (the
    stand-in's folder, tmp_path/bin, holds what it wrote)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / tool
    fake.write_text(script)
    fake.chmod(0o755)
    out = tmp_path / "out"
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    argv = ["run", "--device", "emu", "--out", str(out), "--dir", str(tmp_path)]
    gpu_day(*argv, "--steps", step, status=status, path=path)
    return out


def test_the_sanitizer_step_reads_each_run_of_the_tool(tmp_path) -> None:
    out = with_stand_in(tmp_path, "compute-sanitizer", FAKE_SANITIZER, "sanitizer", status=1)
    bin_dir = tmp_path / "bin"
    (end,) = [r for r in records(out) if r.get("event") == "end"]
    assert end["status"] == "failed" and end["notes"][0].startswith("racecheck: errors: ")
    calls = (bin_dir / "calls").read_text().splitlines()
    # one case a tool, the pipelined families in turn
    assert [call.split()[0] for call in calls] == ["racecheck", "memcheck"]
    assert calls[0].endswith("kernels --device emu --cases matmul_tc/f16")
    assert calls[1].endswith("kernels --device emu --cases conv_tc/f16")
    found = json.loads((out / "summary.json").read_text())["steps"]["sanitizer"]["data"]
    assert found["cases"] == {"racecheck": "matmul_tc/f16", "memcheck": "conv_tc/f16"}
    racecheck, memcheck = found["racecheck"], found["memcheck"]
    assert racecheck["verdict"] == "errors" and racecheck["hazards"] == 1
    assert racecheck["reports_by_case"] == {"matmul_tc/f16": 1}
    assert memcheck["verdict"] == "clean" and memcheck["errors"] == 0


FAKE_SMI = """#!/bin/sh
# a stand-in for nvidia-smi whose driver knows the throttle reasons by their old name only:
# a query naming the new one is refused whole, as a real driver refuses it
echo "$@" >> "$(dirname "$0")/smi-calls"
case "$1" in
  *clocks_event_reasons*)
    echo 'Field "clocks_event_reasons.active" is not a valid field to query.'; exit 2;;
esac
echo "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 345 MHz, 1980 MHz, 2619 MHz, 2619 MHz, 31, 70.5 W, 700.00 W, P0, 0x0000000000000000"
"""


def test_the_environment_step_asks_nvidia_smi_again_without_a_field_it_rejects(tmp_path) -> None:
    out = with_stand_in(tmp_path, "nvidia-smi", FAKE_SMI, "environment", status=0)
    assert len((tmp_path / "bin" / "smi-calls").read_text().splitlines()) == 2
    found = json.loads((out / "summary.json").read_text())["steps"]["environment"]
    ((row,),) = [found["data"]["nvidia_smi"]]
    assert row["name"] == "NVIDIA H100 80GB HBM3" and row["pstate"] == "P0"
    assert "clocks_event_reasons.active" not in row
    assert row["clocks_throttle_reasons.active"] == "0x0000000000000000"
    assert found["notes"] == []


def test_the_default_budget_leaves_a_loan_room_for_a_second_try(monkeypatch) -> None:
    """A 15-minute loan: a machine's start (1-2 minutes), the transfers and its idle tail
    beside a run of at most 420 s keep the 4 minutes a second machine needs; each step's
    limit fits in that budget beside the others, and --help says them."""
    loader = importlib.machinery.SourceFileLoader("gpu_day", str(SCRIPT))
    script = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_day", loader))
    monkeypatch.setitem(sys.modules, "gpu_day", script)  # its dataclasses look it up
    loader.exec_module(script)
    assert list(script.STEPS) == list(EMU_QUICK)
    assert sum(step.limit for step in script.STEPS.values()) <= script.BUDGET <= 420
    shown = " ".join(gpu_day("run", "--help").stdout.split())
    assert "whole run (default 420, 10x on emu)" in shown
    assert ", ".join(f"{n} {s.limit:.0f}" for n, s in script.STEPS.items()) in shown
