"""Split-K: a matmul with few output tiles and a deep k is a choice (`split_k`) between the
one kernel and k split over blocks, whose f32 parts a split_sum kernel adds up under the
epilogue. The parts' kernels and split_sum run every option in emmy.check (test_library_
families); here, the choice end to end: each split against eager, a bench that times the
splits, a compile that decides from its rows, golden files that name a split."""

from __future__ import annotations

import pytest
from stores import write_golden

from emmy.cli import main
from emmy.errors import EmmyError
from emmy.passes.split_k import splits_for
from emmy.search.db import ReadOnlyDB
from emmy.search.golden import load_golden
from emmy.search.oracles import check_against_library

F32 = "torch.float32"
BF16 = "torch.bfloat16"


def matmul_key(batch: int, m: int, n: int, k: int) -> dict:
    return {"batch": batch, "m": m, "n": n, "k": k}


def test_splits_are_offered_to_few_tiles_and_a_deep_k() -> None:
    assert splits_for(matmul_key(1, 8, 96, 1024)) == [1, 2, 4]  # slices of 256 or more
    assert splits_for(matmul_key(1, 16, 768, 4096)) == [1, 2, 4, 8]
    assert splits_for(matmul_key(1, 1024, 768, 3072)) == [1]  # 16 x 12 tiles fill a GPU
    assert splits_for(matmul_key(8, 64, 4096, 1024)) == [1]  # the batch's tiles count too
    assert splits_for(matmul_key(1, 8, 96, 256)) == [1]  # too shallow to split


def expression(dtype: str) -> str:
    """A GELU of x · w + bias at 8 rows, 1024 deep (the SIMT matmul in f32, tensor cores
    in bf16): the epilogue moves to split_sum when k is split."""
    return (
        f"torch.nn.functional.gelu(torch.randn(8, 1024, dtype={dtype}) @"
        f" torch.randn(1024, 96, dtype={dtype}) + torch.randn(96, dtype={dtype}))"
    )


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_every_split_matches_eager(capsys, dtype: str) -> None:
    for split in (1, 2, 4):
        argv = ["run", "-c", expression(dtype), "--device", "emu", "--check"]
        code = main([*argv, "--pin", f"split_k={split}", "--db", "none"])
        out = capsys.readouterr().out
        assert code == 0 and "OK: matches torch eager" in out, out
        kernels = 1 if split == 1 else 2
        assert f"ran {kernels} kernel(s)" in out, out


def test_a_split_that_is_not_offered_is_refused(capsys) -> None:
    argv = ["run", "-c", expression(F32), "--device", "emu", "--pin", "split_k=8"]
    assert main(argv) == 2
    assert "bad pin split_k=8: not an option of fork 'split_k' [1, 2, 4]" in capsys.readouterr().err


def test_bench_times_every_split_and_the_next_compile_decides_from_its_rows(
    capsys, tmp_path
) -> None:
    """`--sweep split_k` times each split as the sum of its kernels' medians (each kernel a
    checked row of its own site); the next compile takes the fastest clean one."""
    db = tmp_path / "t.db"
    argv = ["run", "-c", expression(BF16), "--bench", "--sweep", "split_k", "--db", str(db)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "wrong_result" not in out, out
    with ReadOnlyDB(db) as database:
        rows = database.rows()
    choices = {r.config["split_k"]: r for r in rows if r.family == "matmul_split"}
    assert set(choices) == {1, 2, 4}
    parts = {r.key: r for r in rows if r.family in ("matmul_tc", "split_sum")}
    for split in (2, 4):
        mine = [r for key, r in parts.items() if f"split={split}" in key]
        assert len(mine) == 2 and all(r.median_s for r in mine)
        assert choices[split].median_s == pytest.approx(sum(r.median_s for r in mine))
    main(["compile", "-c", expression(BF16), "--target", "emu", "--explain", "--db", str(db)])
    explain = capsys.readouterr().out
    line = next(x for x in explain.splitlines() if x.startswith("matmul_split_"))
    clean = {split: row.median_s for split, row in choices.items() if row.clean}
    if clean:  # a loaded machine may call a timing unstable
        assert f"split_k={min(clean, key=clean.__getitem__)}" in line and "  db  " in line, line


def test_golden_files_name_a_split(tmp_path) -> None:
    key = "batch=1,m=8,n=96,k=1024,b_batch=1,T=bf16,epilogue=acc,inputs="
    good = write_golden(
        tmp_path / "good" / "emu.json",
        [{"family": "matmul_split", "key": key, "config": {"split_k": 4}}],
    )
    check_against_library(load_golden(good))
    bad = write_golden(
        tmp_path / "bad" / "emu.json",
        [{"family": "matmul_split", "key": key, "config": {"split_k": 3}}],
    )
    with pytest.raises(
        EmmyError, match=r"split_k=3 is not an option of fork split_k \[1, 2, 4, 8\]"
    ):
        check_against_library(load_golden(bad))
