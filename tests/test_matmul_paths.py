"""A matmul is a choice (`matmul_path` site, fork `matmul`) between its kernel, the vendor
library through torch (a host call the device runs, then the epilogue as an elementwise
kernel) and, where few output tiles meet a deep k, split-K (f32 parts of k-slices, then
split_sum adding them up under the epilogue). The parts' kernels and split_sum run every
option in emmy.check (test_library_families); here, the choice end to end: each option
against eager, a bench that times every option, a compile that decides from its rows,
golden files that name an option."""

from __future__ import annotations

import pytest
from stores import write_golden

from emmy.base.errors import EmmyError
from emmy.cli import main
from emmy.dsl.keys import parse_chain
from emmy.families.matmul_path import options_for, splits_for
from emmy.passes.matmul_paths import epilogue_chain
from emmy.recall.golden import load_golden
from emmy.recall.oracles import check_against_library
from emmy.recall.tuning_db import ReadOnlyDB

F32 = "torch.float32"
BF16 = "torch.bfloat16"


def matmul_key(batch: int, m: int, n: int, k: int) -> dict:
    return {"batch": batch, "m": m, "n": n, "k": k}


def test_splits_are_offered_to_few_tiles_and_a_deep_k() -> None:
    assert splits_for(matmul_key(1, 8, 96, 1024)) == [2, 4]  # slices of 256 or more
    assert splits_for(matmul_key(1, 16, 768, 4096)) == [2, 4, 8]
    assert splits_for(matmul_key(1, 1024, 768, 3072)) == []  # 16 x 12 tiles fill a GPU
    assert splits_for(matmul_key(8, 64, 4096, 1024)) == []  # the batch's tiles count too
    assert splits_for(matmul_key(1, 8, 96, 256)) == []  # too shallow to split
    assert options_for(matmul_key(1, 8, 96, 1024)) == ["kernel", "split2", "split4", "vendor"]
    assert options_for(matmul_key(1, 1024, 768, 3072)) == ["kernel", "vendor"]


def test_an_epilogue_becomes_a_chain_over_the_product_and_its_inputs() -> None:
    def chain(epilogue: str) -> str:
        return str(epilogue_chain(parse_chain(epilogue)))

    assert chain("gelu((acc + in0))") == "gelu((in0 + in1))"
    assert chain("((silu(acc) + in0) + in1)") == "((silu(in0) + in1) + in2)"
    # in1 before in0, names that merely start with `in` or `acc`, a negative number
    assert chain("((acc * in1) + max(in0, -0.5))") == "((in0 * in2) + max(in1, -0.5))"
    assert chain("(accum + inf)") == "(accum + inf)"


def expression(dtype: str) -> str:
    """A GELU of x · w + bias at 8 rows, 1024 deep (the SIMT matmul in f32, tensor cores
    in bf16): the epilogue moves to split_sum, or to an elementwise kernel after the vendor
    library."""
    return (
        f"torch.nn.functional.gelu(torch.randn(8, 1024, dtype={dtype}) @"
        f" torch.randn(1024, 96, dtype={dtype}) + torch.randn(96, dtype={dtype}))"
    )


def run_pinned(capsys, expression: str, option: str, device: str = "emu") -> str:
    argv = ["run", "-c", expression, "--device", device, "--check", "--db", "none"]
    code = main([*argv, "--pin", f"matmul={option}"])
    out = capsys.readouterr().out
    assert code == 0 and "OK: matches torch eager" in out, out
    return out


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_every_option_matches_eager(capsys, dtype: str) -> None:
    for option, steps in [("kernel", 1), ("split2", 2), ("split4", 2), ("vendor", 2)]:
        out = run_pinned(capsys, expression(dtype), option)
        assert f"ran {steps} kernel(s)" in out, out


VENDOR_CASES = [
    # b transposed, an epilogue with a residual
    "torch.randn(3, 5, 40) @ torch.randn(30, 40).t() + torch.randn(3, 5, 30)",
    # a batch of b
    "torch.randn(3, 5, 40) @ torch.randn(3, 40, 30)",
    # a kernel before the host call (its input, in the arena) and one after (the epilogue)
    "torch.nn.functional.gelu(torch.randn(8, 64) * 2.0) @ torch.randn(64, 32) + 1.0",
]


@pytest.mark.parametrize("expression", VENDOR_CASES)
def test_the_vendor_library_between_kernels(capsys, expression: str) -> None:
    run_pinned(capsys, expression, "vendor")


@pytest.mark.gpu
@pytest.mark.parametrize("expression", [expression(BF16), *VENDOR_CASES])
def test_the_vendor_library_on_a_gpu(capsys, expression: str) -> None:
    """cuBLAS through torch, on tensors over the device's own buffers and stream."""
    run_pinned(capsys, expression, "vendor", device="cuda")


def test_explain_shows_the_vendor_librarys_host_call(capsys, tmp_path) -> None:
    argv = ["compile", "-c", expression(F32), "--target", "emu", "--explain", "--db", "none"]
    assert main([*argv, "--pin", "matmul=vendor", "-o", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    host = next(r for r in rows if r.startswith("vendor_matmul_"))
    assert "batch=1,m=8,n=96,k=1024,b_batch=1,layout=kn,T=f32" in host and "host call" in host
    choice = next(r for r in rows if r.startswith("matmul_path_"))
    assert "matmul=vendor(pin)" in choice


def test_an_option_that_is_not_offered_is_refused(capsys) -> None:
    argv = ["run", "-c", expression(F32), "--device", "emu", "--pin", "matmul=split8"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "bad pin matmul=split8: not an option of fork 'matmul'" in err, err


def test_bench_times_every_option_and_the_next_compile_decides_from_its_rows(
    capsys, tmp_path
) -> None:
    """`--sweep matmul` times each option as the sum of its parts' medians (each kernel,
    and the vendor library's product, a checked row of its own site); the next compile
    takes the fastest clean option."""
    db = tmp_path / "t.db"
    argv = ["run", "-c", expression(BF16), "--bench", "--sweep", "matmul", "--db", str(db)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrong_result" not in out, out
    with ReadOnlyDB(db) as database:
        rows = database.rows()
    options = {r.config["matmul"]: r for r in rows if r.family == "matmul_path"}
    assert set(options) == {"kernel", "split2", "split4", "vendor"}
    parts = {(r.family, r.key): r for r in rows if r.family != "matmul_path"}
    for split in (2, 4):
        mine = [r for (_, key), r in parts.items() if f"split={split}" in key]
        assert len(mine) == 2 and all(r.median_s for r in mine)
        assert options[f"split{split}"].median_s == pytest.approx(sum(r.median_s for r in mine))
    vendor = [r for (f, _), r in parts.items() if f in ("vendor_matmul", "elementwise")]
    assert len(vendor) == 2 and all(r.median_s for r in vendor)
    assert options["vendor"].median_s == pytest.approx(sum(r.median_s for r in vendor))
    main(["compile", "-c", expression(BF16), "--target", "emu", "--explain", "--db", str(db)])
    explain = capsys.readouterr().out
    line = next(x for x in explain.splitlines() if x.startswith("matmul_path_"))
    clean = {option: row.median_s for option, row in options.items() if row.clean}
    if clean:  # a loaded machine may call a timing unstable
        assert f"matmul={min(clean, key=clean.__getitem__)}" in line and "  db  " in line, line


def test_golden_files_name_an_option(tmp_path) -> None:
    key = "batch=1,m=8,n=96,k=1024,b_batch=1,T=bf16,epilogue=acc,inputs="
    entry = {"family": "matmul_path", "key": key, "config": {"matmul": "vendor"}}
    check_against_library(load_golden(write_golden(tmp_path / "good" / "emu.json", [entry])))
    entry["config"] = {"matmul": "split3"}
    bad = write_golden(tmp_path / "bad" / "emu.json", [entry])
    with pytest.raises(EmmyError, match=r"matmul='split3' is not an option of fork matmul"):
        check_against_library(load_golden(bad))
