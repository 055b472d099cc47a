"""Every option of every library family on the emulator under two thread orders, against
float64 references, and compiled with NVRTC for sm_80 and sm_90 without spills. The shapes
are the families' own (emmy/families/: ragged edges; softmax inputs with overflowing
magnitudes and -inf); emmy.check builds the cases, which scripts/gpu-check runs on a GPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from emmy.backend.nvrtc import compile_cuda
from emmy.check import case, check, checked_families, dtypes_of
from emmy.dsl.library import family
from emmy.runtime.emu import EmuDevice

FAMILIES = checked_families()


@pytest.mark.parametrize("schedule", ["forward", "reverse"])
@pytest.mark.parametrize("family_name, dtype", [(f, d) for f in FAMILIES for d in dtypes_of(f)])
def test_every_option_on_emu(family_name: str, dtype: str, schedule: str) -> None:
    failures = check(case(family_name, dtype), EmuDevice(), schedule)
    assert not failures, "\n".join(failures[:8])


@pytest.mark.parametrize("family_name", FAMILIES)
def test_pairwise_runs_every_option(family_name: str) -> None:
    seen = {
        (n, v)
        for d in dtypes_of(family_name)
        for config in case(family_name, d).configs.values()
        for n, v in config.items()
        if n != "key"
    }
    for fork in family(family_name).forks:
        for option in fork.options:
            assert (fork.name, option) in seen, f"{family_name} {fork.name}={option} never runs"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("family_name", FAMILIES)
def test_every_option_compiles_with_nvrtc_without_spills(family_name: str, arch: str) -> None:
    for dtype in dtypes_of(family_name):
        compiled = compile_cuda(case(family_name, dtype).source, arch)
        spilling = {k: r for k, r in compiled.resources.items() if r.spill_stores or r.spill_loads}
        assert not spilling, f"{family_name} {dtype} {arch} spills: {spilling}"


def gpu_check(tmp_path, *options: str) -> dict:
    """Runs scripts/gpu-check on emu with `options`; its JSON report."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "scripts" / "gpu-check"
    out = tmp_path / "check.json"
    result = subprocess.run(
        [sys.executable, str(script), "--device", "emu", *options, "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(out.read_text())


def test_gpu_check_script_runs_its_correctness_part_on_emu(tmp_path) -> None:
    report = gpu_check(tmp_path, "--quick", "--models", "mlp:tiny")
    assert set(report["correctness"]) == {f"{f}/{dtypes_of(f)[0]}" for f in FAMILIES}
    assert "not measured" in report["speed"]
    assert report["models"]["mlp:tiny"]["ok"]


def test_gpu_check_script_runs_its_speed_part_scaled_down_on_emu(tmp_path) -> None:
    """The speed part, which only a GPU runs in earnest, at sizes divided by 1024 and one
    config per sweep: every family it times gives a positive figure."""
    speed = gpu_check(tmp_path, "--speed-only", "--scale", "1024", "--max-sweep", "1")["speed"]
    assert speed["copy_bandwidth_gb_s"] > 0
    for family_name in ("softmax", "layer_norm", "rms_norm", "elementwise"):
        assert speed[family_name]["default_gb_s"] > 0 and speed[family_name]["best_gb_s"] > 0
    assert speed["matmul_tc"]["best_tflops"] > 0 and speed["matmul_tc"]["vendor_tflops"] > 0
    split_k = speed["split_k"]["microseconds"]
    assert set(split_k) == {"1", "2"} and all(us > 0 for us in split_k.values())
    for entry in speed["attention"].values():
        assert entry["best_tflops"] > 0 and entry["simt_best_tflops"] > 0
        assert entry["unfused_tflops"] > 0


def test_a_wrong_kernel_is_caught() -> None:
    """The check is not vacuous: a softmax that forgets part of its normalisation fails."""
    c = case("softmax", "f32")
    broken = replace(c, source=c.source.replace(" * v", " * 0.5f * v", 1))
    assert broken.source != c.source
    assert check(broken, EmuDevice())
