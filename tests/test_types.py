"""emmy/ type-checks clean: basedpyright in basic mode ([tool.basedpyright] in pyproject.toml),
the venv's own, against the venv's packages."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
#: errors listed when the check fails
SHOWN = 30


def test_emmy_type_checks_clean() -> None:
    checker = Path(sys.executable).with_name("basedpyright")
    result = subprocess.run(
        [str(checker), "--outputjson", "--pythonpath", sys.executable, "emmy"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.stdout, f"basedpyright printed nothing: {result.stderr[-2000:]}"
    report = json.loads(result.stdout)
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    where = [
        f"{Path(d['file']).relative_to(ROOT)}:{d['range']['start']['line'] + 1}: {d['message']}"
        for d in errors[:SHOWN]
    ]
    assert report["summary"]["filesAnalyzed"] > 100, report["summary"]
    assert not errors, f"{len(errors)} type errors, the first {len(where)}:\n" + "\n".join(where)
