"""The FileCheck tests under tests/lit, run by lit (dialects, passes, DSL, emitted CUDA)."""

import subprocess
import sys
from pathlib import Path

LIT_DIR = Path(__file__).parent / "lit"


def test_lit_suite() -> None:
    lit = Path(sys.executable).with_name("lit")
    result = subprocess.run(
        [str(lit), "-q", "-j", "2", str(LIT_DIR)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
