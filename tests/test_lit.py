"""The FileCheck tests under tests/lit, run by lit (dialects, passes, DSL, emitted CUDA).

lit runs emmy-opt inside its workers (tests/lit/emmy_lit_format.py); one test runs lines
through the installed `emmy-opt` as users call it, one that the format fails what it must."""

import shutil
import subprocess
import sys
from pathlib import Path

LIT_DIR = Path(__file__).parent / "lit"
CHECKOUT = LIT_DIR.parent.parent
LIT = Path(sys.executable).with_name("lit")


def _lit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LIT), *map(str, args)], capture_output=True, text=True, check=False)


def test_lit_suite() -> None:
    result = _lit("-sv", "-j", "2", LIT_DIR)
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-2000:]


def test_installed_emmy_opt() -> None:
    """A line whose -p is quoted and a `not ... 2>&1` line, through lit's shell: the
    installed emmy-opt beside this interpreter, its exit status as a process's."""
    files = [LIT_DIR / "passes" / "specialize-forks.mlir", LIT_DIR / "dsl" / "errors.emmy"]
    result = _lit("-a", "-j", "2", "--param", "emmy_opt=subprocess", *files)
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-2000:]
    assert "in-process" not in result.stdout
    assert "# executed command: emmy-opt" in result.stdout, result.stdout[-6000:]
    assert "# executed command: not emmy-opt" in result.stdout, result.stdout[-6000:]


PLANTED = {
    # the output has no such line
    "check-mismatch.mlir": "// RUN: emmy-opt %s | filecheck %s\n// CHECK: no.such.op\n",
    # filecheck passes, but emmy-opt succeeds under `not`
    "not-succeeds.mlir": "// RUN: not emmy-opt %s | filecheck %s\n// CHECK: builtin.module\n",
    # the controls: one in-process, one of another shape, which lit's shell runs
    "passes.mlir": "// RUN: emmy-opt %s 2>&1 | filecheck %s\n// CHECK: builtin.module\n",
    "shell.mlir": "// RUN: echo planted | filecheck %s\n// CHECK: planted\n",
}


def test_format_fails_planted_tests(tmp_path: Path) -> None:
    for name in ("lit.cfg", "emmy_lit_format.py"):
        shutil.copy(LIT_DIR / name, tmp_path / name)
    for name, text in PLANTED.items():
        (tmp_path / name).write_text(text + "builtin.module {\n}\n")
    result = _lit("-v", "-j", "1", "--param", f"emmy_checkout={CHECKOUT}", tmp_path)
    out = result.stdout
    assert result.returncode == 1, out[-6000:] + result.stderr[-2000:]
    assert "FAIL: emmy :: check-mismatch.mlir" in out, out[-6000:]
    assert "FAIL: emmy :: not-succeeds.mlir" in out, out[-6000:]
    assert "Passed: 2" in out and "Failed: 2" in out, out[-6000:]
    # the failures say which command failed, with what, and filecheck's complaint
    assert "# error: filecheck exited with status 1, expected 0" in out, out[-6000:]
    assert """check-mismatch.mlir:2: error: Couldn't match "no.such.op".""" in out, out[-6000:]
    assert "# error: emmy-opt exited with status 0, expected non-zero (under `not`)" in out
    assert "# | builtin.module {" in out, out[-6000:]
