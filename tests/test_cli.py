"""The emmy command, in process (fast) and once through its installed entry point."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emmy.cli import main
from emmy.runtime.cuda import cuda_available

SOFTMAX = "torch.nn.Softmax(dim=-1)(torch.randn(4, 1000))"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_for_an_absent_gpu_writes_source_cubin_and_report(capsys, tmp_path: Path) -> None:
    big = "torch.nn.Softmax(dim=-1)(torch.randn(1, 28, 2048, 2048))"
    code, out, err = run_cli(
        capsys, "compile", "-c", big, "--target", "nvidia-h200-sm90", "-o", str(tmp_path)
    )
    assert code == 0, err
    assert (tmp_path / "kernels.cubin").read_bytes()[:4] == b"\x7fELF"
    report = json.loads((tmp_path / "report.json").read_text())
    (kernel,) = report["kernels"]
    source = (tmp_path / "kernels.cu").read_text()
    assert f"EMMY_KERNEL void __launch_bounds__({kernel['block']}, 1) softmax_0(" in source
    assert kernel["key"] == "rows=57344,cols=2048,T=f32"
    assert kernel["provenance"]["forks"] == {f: "default" for f in kernel["config"]}
    assert kernel["provenance"]["oracle"] == "default"
    assert kernel["resources"]["spill_stores"] == 0 and kernel["resources"]["registers"] > 0
    assert report["target"] == "nvidia-h200-sm90"


def test_explain_shows_each_fork_and_its_source(capsys) -> None:
    code, out, _ = run_cli(
        capsys,
        "compile",
        "-c",
        SOFTMAX,
        "--target",
        "nvidia-h100-sm90",
        "--explain",
        "--pin",
        "algo=online",
    )
    assert code == 0
    (row,) = [line.split() for line in out.splitlines() if line.startswith("softmax_0 ")]
    assert row[:4] == ["softmax_0", "softmax", "rows=4,cols=1000,T=f32", "threads=256"]
    assert "algo=online(pin)" in row and "vec=4" in row
    # the declared 16-byte vector is 8 lanes, 32 bytes of f32: the default moves it to 4
    assert row[row.index("reduction=shuffle") + 1 :] == [
        "default",
        "declared",
        "default;",
        "constraints",
        "moved",
        "vec",
    ]


def test_explain_shows_the_target_default_as_its_own_oracle(capsys) -> None:
    bf16 = "dtype=torch.bfloat16"
    expression = f"torch.randn(8, 64, {bf16}) @ torch.randn(64, 32, {bf16})"
    argv = [
        "compile",
        "-c",
        expression,
        "--target",
        "nvidia-h100-sm90",
        "--explain",
        "--db",
        "none",
    ]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    (row,) = [line for line in out.splitlines() if line.startswith("matmul_path_")]
    assert row.split()[3:6] == ["matmul=vendor", "target", "target"]
    assert row.endswith("target default on a gpu (matmul=vendor): no evidence at this key")


@pytest.mark.parametrize(
    "expression",
    [
        SOFTMAX,
        "torch.nn.functional.gelu(torch.randn(8, 64) * 2 + torch.randn(64)) - torch.randn(8, 1)",
        "torch.softmax(torch.randn(3, 17, dtype=torch.float16) * 4, -1)",
    ],
)
def test_run_on_emu_matches_torch_eager(capsys, expression: str) -> None:
    code, out, err = run_cli(capsys, "run", "-c", expression, "--device", "emu", "--check")
    assert code == 0, out + err
    assert "OK: matches torch eager" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "-c", "torch.randn(4, 1000"], "bad expression: '(' was never closed"),
        (
            ["run", "-c", "torch.median(torch.randn(4, 10))", "--no-fallback"],
            "unsupported op aten.median",
        ),
        (
            ["compile", "-c", "torch.median(torch.randn(4, 10))", "--no-fallback"],
            "unsupported op aten.median.default (aten.median.default; emmy has no kernel for it)",
        ),
        (
            ["compile", "-c", SOFTMAX, "--pin", "vec=3"],
            "bad pin vec=3: not an option of fork 'vec' [1, 2, 4, 8]",
        ),
        (["compile", "-c", SOFTMAX, "--pin", "warps=2"], "bad pin warps=2: no fork named 'warps'"),
        (["compile", "-c", SOFTMAX, "--pin", "vec"], "bad pin 'vec': expected fork=value"),
        (["compile", "-c", SOFTMAX, "--pin", "vec=1,2"], "bad pin '2': expected fork=value"),
        (
            ["compile", "-c", SOFTMAX, "--oracles", "pins,crystal-ball"],
            "unknown oracle 'crystal-ball'; known: pins, golden, db, prior, target, default",
        ),
        (
            ["run", "-c", SOFTMAX, "--device", "emu", "--bench", "--pin", "vec"],
            "bad pin 'vec': expected fork=value[,value...]",
        ),
        (["compile", "-c", SOFTMAX, "--target", "h200"], "h200"),
        (["compile", "-c", "1 + 1"], "the expression gives int, not a tensor"),
        (
            ["compile", "-c", "torch.randn(4, 8).double() * 2"],
            "aten._to_copy.default gives torch.float64, which emmy has no storage type for",
        ),
    ],
)
def test_user_mistakes_are_one_line(capsys, argv: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.startswith("emmy: error: ") and err.count("\n") == 1, err
    assert message in err


@pytest.mark.skipif(cuda_available(), reason="checks the message of a machine without a GPU")
def test_cuda_device_without_a_gpu_is_one_line(capsys) -> None:
    code, _, err = run_cli(capsys, "run", "-c", SOFTMAX, "--device", "cuda")
    assert code == 2
    assert err.startswith("emmy: error: no CUDA device") and err.count("\n") == 1


#: the console script `pip install` puts beside the Python (a tree run from PYTHONPATH, as
#: scripts/gpu-day runs it on a GPU machine, has none)
INSTALLED = Path(sys.executable).with_name("emmy")


@pytest.mark.skipif(
    not INSTALLED.exists(),
    reason=f"needs the installed emmy script ({INSTALLED}): pip install -e .",
)
def test_installed_entry_point_tells_its_commands() -> None:
    emmy = INSTALLED
    result = subprocess.run([str(emmy), "--help"], capture_output=True, text=True, check=True)
    assert "compile" in result.stdout and "run" in result.stdout


def test_a_traced_expression_is_cached(monkeypatch) -> None:
    from emmy.frontend import cache, expression

    first = str(cache.traced_graph("torch.exp(torch.randn(3, 5))"))

    def no_tracing(*args, **kwargs):
        raise AssertionError("traced again")

    monkeypatch.setattr(expression, "trace", no_tracing)
    assert str(cache.traced_graph("torch.exp(torch.randn(3, 5))")) == first
    with pytest.raises(AssertionError, match="traced again"):
        cache.traced_graph("torch.exp(torch.randn(3, 6))")


def test_program_cache_hits_until_the_stores_change(capsys, tmp_path: Path) -> None:
    from stores import row, softmax_config

    from emmy.recall.tuning_db import TuningDB

    expression = "torch.nn.Softmax(dim=-1)(torch.randn(8, 64))"
    db = tmp_path / "tuning.db"
    argv = ["compile", "-c", expression, "--target", "emu", "--db", str(db), "--explain"]
    code, first, err = run_cli(capsys, *argv)
    assert code == 0 and "program cache hit" not in first, err
    code, second, _ = run_cli(capsys, *argv)
    assert "program cache hit" in second
    assert "declared default" in second
    with TuningDB(db) as database:
        database.add([row(softmax_config(vec=2), 1e-6)])
    code, third, _ = run_cli(capsys, *argv)
    assert code == 0 and "program cache hit" not in third
    assert "vec=2" in third and " db " in third
    code, custom, _ = run_cli(capsys, *argv, "--oracles", "db,default")
    assert "program cache hit" not in custom
