"""Whole models: every recipe at its tiny config on the emulator against torch eager, and
`emmy compile RECIPE` / `emmy run RECIPE` with the stores (explain, program cache, bench
rows recalled by the next compile, a recipe's own golden file)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from stores import write_golden

from emmy.base.paths import RECIPES_DIR
from emmy.cli import main


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("recipe", ["mlp", "gpt2", "llama"])
def test_recipe_at_its_tiny_config_matches_torch_eager_on_emu(capsys, recipe: str) -> None:
    code, out, err = run_cli(capsys, "run", recipe, "--device", "emu", "--check")
    assert code == 0, out + err
    assert "OK: matches torch eager" in out
    assert f"model {recipe} [tiny" in err


def test_bf16_llama_matches_f32_eager_on_the_same_weights(capsys) -> None:
    code, out, err = run_cli(
        capsys, "run", "llama", "--device", "emu", "--check", "--dtype", "bf16", "--size", "1"
    )
    assert code == 0, out + err
    assert "bf16" in err and "OK: matches torch eager" in out


@pytest.mark.parametrize(
    ("recipe", "dims", "described"),
    [("gpt2", ("batch=3", "seq=5"), "batch 3, seq 5"), ("llama", ("seq=1",), "batch 2, seq 1")],
)
def test_a_declared_dynamic_dim_takes_any_size_in_its_range(
    capsys, recipe: str, dims: tuple[str, ...], described: str
) -> None:
    flags = [flag for dim in dims for flag in ("--dim", dim)]
    code, out, err = run_cli(capsys, "run", recipe, "--device", "emu", "--check", *flags)
    assert code == 0, out + err
    assert f"model {recipe} [tiny, {described}, f32]" in err
    assert "OK: matches torch eager" in out


def test_compile_explains_every_site_and_reuses_the_program(capsys, tmp_path: Path) -> None:
    argv = ["compile", "gpt2", "--config", "tiny", "--target", "nvidia-h200-sm90"]
    code, out, err = run_cli(capsys, *argv, "--explain", "-o", str(tmp_path), "--db", "none")
    assert code == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    families = {k["family"] for k in report["kernels"]}
    assert {"embedding", "layer_norm", "permute"} <= families
    # on a GPU with no evidence, every matmul and attention takes the vendor library (the
    # target default)
    assert {str(c["config"]) for c in report["choices"].values()} == {
        "{'matmul': 'vendor'}",
        "{'path': 'sdpa'}",
    }
    hosts = {h["family"] for h in report["host_calls"].values()}
    assert hosts == {"vendor_matmul", "vendor_attention"}
    assert all(k["provenance"]["oracle"] for k in report["kernels"])
    assert all(k["resources"]["spill_stores"] == 0 for k in report["kernels"])
    for kernel in report["kernels"]:
        assert kernel["name"] in out  # one --explain row per site
    # the layers share their kernels: fewer kernels than launches
    assert len(report["kernels"]) < len(report["calls"])
    memory = report["memory_bytes"]
    assert 0 < memory["arena"] < memory["temporaries_unshared"]
    code, out, err = run_cli(capsys, *argv, "--db", "none")
    assert code == 0 and "program cache hit" in out, out + err
    code, out, err = run_cli(capsys, *argv, "--db", "none", "--no-cache")
    assert code == 0 and "nvrtc" in out
    # the kernels themselves came from the kernel cache: no NVRTC work
    assert "program cache hit" not in out


def test_bench_records_a_row_per_site_and_the_next_compile_recalls_them(
    capsys, tmp_path: Path
) -> None:
    db = str(tmp_path / "tuning.db")
    code, out, err = run_cli(
        capsys, "run", "mlp", "--device", "emu", "--bench", "--max-rows", "1", "--db", db
    )
    assert code == 0, err
    assert "measured" in out
    rows = [line for line in out.splitlines() if line.startswith(("*", "  "))]
    code, out, err = run_cli(
        capsys,
        "compile",
        "mlp",
        "--config",
        "tiny",
        "--target",
        "emu",
        "--db",
        db,
        "-o",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    kernels = json.loads((tmp_path / "out" / "report.json").read_text())["kernels"]
    assert len(kernels) == 2
    # each kernel site has its pick and one more row, each matmul's path choice its pick
    # (`kernel`: the choice is not swept); the best clean row decides the next compile
    assert sum(line.startswith("*") for line in rows) == 4, rows
    assert sum(line.startswith("* matmul=kernel") for line in rows) == 2, rows
    clean = [k for k in kernels if k["provenance"]["oracle"] == "db"]
    for kernel in clean:
        assert kernel["provenance"]["evidence"]["measured"] >= 1
    unstable = sum("unstable" in line for line in rows)
    assert len(clean) >= 2 - unstable, (rows, [k["provenance"] for k in kernels])


def test_a_recipes_golden_file_is_read_first(capsys, tmp_path: Path) -> None:
    recipe = tmp_path / "mlp"
    recipe.mkdir()
    shutil.copy(RECIPES_DIR / "mlp" / "recipe.py", recipe / "recipe.py")
    argv = ["compile", str(recipe), "--config", "tiny", "--target", "emu", "--db", "none"]
    code, out, err = run_cli(capsys, *argv, "-o", str(tmp_path / "out"))
    assert code == 0, err
    kernel = json.loads((tmp_path / "out" / "report.json").read_text())["kernels"][0]
    config = {**kernel["config"], "block_k": 8}
    entry = {"family": kernel["family"], "key": kernel["key"], "config": config}
    golden = write_golden(recipe / "golden" / "emu.json", [{**entry, "median_s": 1e-4}])
    code, out, err = run_cli(capsys, *argv, "--explain", "-o", str(tmp_path / "again"))
    assert code == 0, err
    report = json.loads((tmp_path / "again" / "report.json").read_text())
    (decided,) = [k for k in report["kernels"] if k["key"] == kernel["key"]]
    assert decided["provenance"]["oracle"] == "golden"
    assert decided["config"]["block_k"] == 8
    assert str(golden) in out


def test_recipe_mistakes_are_one_line(capsys) -> None:
    code, _, err = run_cli(capsys, "compile", "no-such-model")
    assert code == 2 and "no recipe 'no-such-model'; known: gpt2, llama, mlp" in err
    code, _, err = run_cli(capsys, "compile", "gpt2", "-c", "torch.randn(3)")
    assert code == 2 and "either a RECIPE, a model DIR or -c EXPR" in err
    code, _, err = run_cli(capsys, "compile", "gpt2", "--config", "huge")
    assert code == 2 and "no config 'huge'" in err
    code, _, err = run_cli(capsys, "compile", "gpt2", "--config", "tiny", "--size", "9")
    assert code == 2 and "--size 9 is out of range" in err
    code, _, err = run_cli(capsys, "compile", "gpt2", "--dim", "seq=2000")
    assert code == 2 and "seq=2000 is outside recipe gpt2 config small's range [1, 1024]" in err
    code, _, err = run_cli(capsys, "compile", "gpt2", "--dim", "heads=2")
    assert code == 2 and "declares no dynamic dim 'heads' (its dynamic dims: batch, seq)" in err
    code, _, err = run_cli(capsys, "compile", "gpt2", "--dim", "seq")
    assert code == 2 and "--dim 'seq': expected NAME=N" in err
    code, _, err = run_cli(capsys, "compile", "-c", "torch.randn(3) + 1", "--dim", "seq=3")
    assert code == 2 and "a -c expression has its shapes in it" in err


def test_a_malformed_dynamic_table_is_one_line(capsys, tmp_path: Path) -> None:
    recipe = tmp_path / "mine"
    shutil.copytree(RECIPES_DIR / "mlp", recipe, ignore=shutil.ignore_patterns("golden"))
    source = (recipe / "recipe.py").read_text()
    (recipe / "recipe.py").write_text(source + '\nDYNAMIC = {"tiny": {"batch": (8, 2)}}\n')
    code, _, err = run_cli(capsys, "compile", str(recipe), "--dim", "batch=4")
    assert code == 2
    assert f"{recipe / 'recipe.py'}: DYNAMIC must map a config to {{dim: (low, high)}}" in err
