"""A convolution is a choice (`conv_path` site, fork `conv`) between its kernel (conv or
conv_tc, the epilogue fused) and the vendor library through torch (a host call, then the
epilogue as an elementwise kernel), and so is its weight gradient (`conv_weight_path`,
fork `conv_weight`, with splits of its depth): each option against eager, the target default (the
vendor library on a GPU with no evidence), a bench that times both and a compile that
decides from its rows."""

from __future__ import annotations

import pytest

from emmy.cli import main
from emmy.recall.tuning_db import ReadOnlyDB

F32 = "torch.float32"
BF16 = "torch.bfloat16"


def expression(dtype: str) -> str:
    """A convolution with a bias, a residual and an activation (its fused epilogue)."""
    conv = f"torch.nn.Conv2d(6, 8, 3, padding=1, stride=2).to({dtype})"
    x = f"torch.randn(2, 6, 9, 11, dtype={dtype})"
    return f"torch.relu({conv}({x}) + torch.randn(2, 8, 5, 6, dtype={dtype}))"


def transposed_expression(dtype: str) -> str:
    """A transposed convolution (a decoder's upsampling) with a bias and an activation."""
    conv = f"torch.nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1).to({dtype})"
    return f"torch.relu({conv}(torch.randn(2, 6, 5, 4, dtype={dtype})))"


def run_pinned(capsys, source: str, option: str, device: str = "emu", knob: str = "conv") -> str:
    argv = ["run", "-c", source, "--device", device, "--check", "--db", "none"]
    code = main([*argv, "--pin", f"{knob}={option}"])
    out = capsys.readouterr().out
    assert code == 0 and "OK: matches torch eager" in out, out
    return out


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("source", [expression, transposed_expression])
def test_every_option_matches_eager(capsys, source, dtype: str) -> None:
    for option, steps in [("kernel", 1), ("vendor", 2)]:
        out = run_pinned(capsys, source(dtype), option)
        assert f"ran {steps} kernel(s)" in out, out


def weight_gradient_expression(dtype: str) -> str:
    """A grouped, strided convolution's weight gradient, as a training step's backward
    decomposes it: few filters (4 a group) over 1024 output pixels, so its depth splits."""
    dy, x = (f"torch.randn({shape}, dtype={dtype})" for shape in ("4, 8, 16, 16", "4, 6, 32, 32"))
    return f"torch.ops.emmy.conv2d_weight_gradient({dy}, {x}, [3, 3], [2, 2], [1, 1], [1, 1], 2)"


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_a_weight_gradient_is_a_choice_of_its_own(capsys, tmp_path, dtype: str) -> None:
    """conv_weight, its depth split in 2 and 4 (parts, then split_sum), or the vendor
    library's weight gradient (one host call), each against eager; a GPU with no evidence
    takes the vendor library."""
    source = weight_gradient_expression(dtype)
    for option, steps in [("kernel", 1), ("split2", 2), ("split4", 2), ("vendor", 1)]:
        out = run_pinned(capsys, source, option, knob="conv_weight")
        assert f"ran {steps} kernel(s)" in out, out
    assert_a_gpu_takes_the_vendor_library(capsys, tmp_path, source, "conv_weight", groups=2)


def assert_a_gpu_takes_the_vendor_library(
    capsys, tmp_path, source: str, knob: str, groups: int
) -> None:
    """A compile for a GPU with no evidence: the choice takes the vendor option by the
    target default, and the host call keeps the convolution's geometry."""
    argv = ["compile", "-c", source, "--explain", "--db", "none", "-o", str(tmp_path)]
    assert main([*argv, "--target", "nvidia-h200-sm90"]) == 0
    rows = capsys.readouterr().out.splitlines()
    choice = next(r for r in rows if r.startswith(f"{knob}_path_"))
    assert f"{knob}=vendor" in choice and "target default on a gpu" in choice, choice
    host = next(r for r in rows if r.startswith(f"vendor_{knob}_"))
    geometry = f"sh=2,sw=2,ph=1,pw=1,dh=1,dw=1,groups={groups}"
    assert geometry in host and "host call" in host, host


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_the_vendor_library_on_a_gpu(capsys, dtype: str) -> None:
    """cuDNN through torch, on tensors over the device's own buffers and stream: a
    convolution, a transposed one and a weight gradient (emulator twins above)."""
    for source in (expression, transposed_expression):
        run_pinned(capsys, source(dtype), "vendor", device="cuda")
    run_pinned(capsys, weight_gradient_expression(dtype), "vendor", "cuda", "conv_weight")


def test_a_gpu_with_no_evidence_takes_the_vendor_library(capsys, tmp_path) -> None:
    assert_a_gpu_takes_the_vendor_library(capsys, tmp_path, expression(BF16), "conv", groups=1)


def test_bench_times_both_options_and_the_next_compile_decides_from_its_rows(
    capsys, tmp_path
) -> None:
    db = tmp_path / "t.db"
    argv = ["run", "-c", expression(F32), "--bench", "--sweep", "conv", "--db", str(db)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrong_result" not in out, out
    with ReadOnlyDB(db) as database:
        rows = database.rows()
    options = {r.config["conv"]: r for r in rows if r.family == "conv_path"}
    assert set(options) == {"kernel", "vendor"}
    vendor = [r for r in rows if r.family in ("vendor_conv", "elementwise")]
    assert len(vendor) == 2 and all(r.median_s for r in vendor)
    assert options["vendor"].median_s == pytest.approx(sum(r.median_s for r in vendor))
    main(["compile", "-c", expression(F32), "--target", "emu", "--explain", "--db", str(db)])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("conv_path_"))
    clean = {option: row.median_s for option, row in options.items() if row.clean}
    if clean:  # a loaded machine may call a timing unstable
        assert f"conv={min(clean, key=clean.__getitem__)}" in line and "  db  " in line, line
