"""Compile latency of `emmy compile` on the softmax of DESIGN's example, cold and warm.

Cold: an empty kernel cache (a fresh EMMY_CACHE_DIR per run); warm: the same cache again.
Each run is a separate `emmy compile` process, as a user runs it; the stages come from the
report it writes. Also times bare interpreter start-up with torch imported, the floor any
compile of a PyTorch expression pays.

    .venv/bin/python benchmarks/compile_latency.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXPRESSION = "torch.nn.Softmax(dim=-1)(torch.randn(1, 28, 2048, 2048))"
TARGET = "nvidia-h200-sm90"
EMMY = str(Path(sys.executable).with_name("emmy"))


def compile_once(cache: str, out: str) -> dict[str, float]:
    env = {**os.environ, "EMMY_CACHE_DIR": cache}
    start = time.perf_counter()
    subprocess.run(
        [EMMY, "compile", "-c", EXPRESSION, "--target", TARGET, "-o", out],
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - start
    timings = json.loads((Path(out) / "report.json").read_text())["timings_s"]
    return {"wall": wall, **timings}


def startup_floor(imports: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {imports}"], check=True)
    return time.perf_counter() - start


def median_of(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cold, warm, floor, bare = [], [], [], []
    with tempfile.TemporaryDirectory() as root:
        for i in range(args.runs):
            cache = f"{root}/cache{i}"
            cold.append(compile_once(cache, f"{root}/out"))
            warm.append(compile_once(cache, f"{root}/out"))
            floor.append(startup_floor("torch, xdsl.dialects.builtin"))
            bare.append(startup_floor("xdsl.dialects.builtin"))
    print(f"emmy compile -c '{EXPRESSION}' --target {TARGET}, median of {args.runs}")
    print(f"{'':8}{'frontend':>10}{'passes':>10}{'nvrtc':>10}{'in emmy':>10}{'process':>10}")
    for name, rows in (("cold", cold), ("warm", warm)):
        cells = [median_of(rows, k) for k in ("frontend", "passes", "nvrtc", "total", "wall")]
        print(f"{name:8}" + "".join(f"{c * 1000:>8.0f}ms" for c in cells))
    print(f"python start-up importing torch and xdsl: {statistics.median(floor) * 1000:.0f} ms")
    print(f"python start-up importing xdsl alone: {statistics.median(bare) * 1000:.0f} ms")
    warm_wall = median_of(warm, "wall")
    print(f"warm compile process = {warm_wall / statistics.median(bare):.2f}x a bare xdsl start-up")


if __name__ == "__main__":
    main()
