"""emmy's layering, checked by scripts/import-cycles: no import cycle between its modules,
and no import hidden in a function but a heavy one that says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "import-cycles"


def check(root: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, check=False
    )


def test_emmy_has_no_import_cycle() -> None:
    result = check()
    assert "\n0 cycle(s)" in "\n" + result.stdout.splitlines()[-1], result.stdout


def test_every_function_level_import_is_a_heavy_one_that_says_why() -> None:
    result = check()
    assert result.returncode == 0, result.stdout


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "emmy" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_through_a_function_level_import_is_found(tmp_path) -> None:
    root = write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from emmy import b\n",
            "pkg/__init__.py": "",
            "b.py": "def f():\n    from emmy.pkg.c import g\n",
            "pkg/c.py": "from emmy.a import x\n",
        },
    )
    result = check(root)
    assert result.returncode == 1
    assert "cycle: emmy.a ↔ emmy.b ↔ emmy.pkg.c" in result.stdout
    assert "emmy/b.py:2: emmy.b → emmy.pkg.c (in f())" in result.stdout
    assert "emmy/b.py:2: emmy.pkg.c in f() [emmy; no why-comment] NOT ALLOWED" in result.stdout


def test_only_a_heavy_import_with_a_why_comment_may_hide_in_a_function(tmp_path) -> None:
    heavy = "def f():\n    # torch is slow to import, and f is rarely called\n    import torch\n"
    root = write(tmp_path, {"__init__.py": "", "a.py": heavy})
    result = check(root)
    assert result.returncode == 0, result.stdout
    assert "[heavy; why: torch is slow to import, and f is rarely called] ok" in result.stdout
    for body in ("def f():\n    import torch\n", "def f():\n    # why\n    import json\n"):
        write(tmp_path, {"a.py": body})
        assert check(root).returncode == 1


def test_folders_that_import_each_other_are_a_cycle_though_their_modules_are_not(tmp_path) -> None:
    root = write(
        tmp_path,
        {
            "__init__.py": "",
            "dialects/__init__.py": "",
            "dialects/ir.py": "from emmy.passes import helpers\n",
            "passes/__init__.py": "",
            "passes/helpers.py": "",
            "passes/rewrite.py": "from emmy.dialects import ir\n",
        },
    )
    result = check(root)
    assert result.returncode == 1
    assert "folder cycle: dialects ↔ passes" in result.stdout
    assert "0 cycle(s)" in result.stdout  # no cycle between the modules themselves
    upward = (
        "emmy/dialects/ir.py:1: emmy.dialects.ir → emmy.passes.helpers (layer 2 imports layer 6)"
    )
    assert f"upward import: {upward}" in result.stdout


def test_a_module_file_name_used_twice_and_an_unlayered_folder_are_faults(tmp_path) -> None:
    root = write(
        tmp_path,
        {
            "__init__.py": "",
            "dialects/__init__.py": "",
            "dialects/fallback.py": "",
            "runtime/__init__.py": "",
            "runtime/fallback.py": "from emmy.dialects import fallback\n",
            "gadgets/__init__.py": "",
            "gadgets/tool.py": "from emmy.runtime import fallback\n",
        },
    )
    result = check(root)
    assert result.returncode == 1
    assert "module name used twice: fallback.py" in result.stdout
    assert "unlayered: emmy/gadgets is in no layer of LAYERS" in result.stdout
