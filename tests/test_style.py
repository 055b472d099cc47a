"""The code base stays ruff clean (lint rules in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_ruff_clean() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run(
        [
            str(ruff),
            "check",
            "emmy",
            "tests",
            "benchmarks",
            "scripts/gpu-check",
            "scripts/gpucheck",
            "scripts/gpu-day",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]
