"""The time `torch.compile(model, backend="emmy")` spends in emmy per graph of the tiny
real models (emmy.frontend.tiny_models), split by stage: the frontend (AOTAutograd's ATen
graph → emmy.graph), the passes (fuse, lower, resolve forks, emit CUDA) and the kernel
compile (g++ for the emulator); beside the whole first call (dynamo and AOTAutograd
included) and the largest relative error against eager of that call's output.

    .venv/bin/python benchmarks/backend_stages.py [--models gpt2,llama] [--seq 8]

Compiles afresh (no program cache); kernels already compiled by an earlier run come from
the kernel cache, which the "g++" column then shows as near 0 (run with a fresh
EMMY_CACHE_DIR for cold figures).
"""

from __future__ import annotations

import time

import torch

import emmy.api
from emmy.frontend import tiny_models
from emmy.program import Program, coverage_line
from emmy.runtime.emu import EmuDevice

STAGES = ("frontend", "passes", "g++")


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |a - b| / max |b|."""
    scale = float(expected.float().abs().max()) or 1.0
    return float((actual.float() - expected.float()).abs().max()) / scale


def measure(name: str, seq: int) -> tuple[list[Program], float, float]:
    """The programs of one model's first torch.compile call, its seconds and its error."""
    model, inputs = tiny_models.build(name, seq)
    programs: list[Program] = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, use_cache=False)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        start = time.perf_counter()
        actual = compiled(*inputs)
        elapsed = time.perf_counter() - start
        expected = model(*inputs)
    torch._dynamo.reset()
    return programs, elapsed, relative_error(actual, expected)


def main() -> int:
    names, seq = tiny_models.parse_model_arguments(__doc__.splitlines()[0])
    header = ["model", "graph", *(f"{s} ms" for s in STAGES), "emmy ms", "call ms", "rel err"]
    print("  ".join(f"{h:>10}" for h in header))
    totals = {"emmy": 0.0, "call": 0.0}
    for name in names:
        programs, elapsed, error = measure(name, seq)
        for index, program in enumerate(programs):
            stages = [program.timings.get(stage, 0.0) * 1e3 for stage in STAGES]
            emmy_ms = sum(stages)
            totals["emmy"] += emmy_ms
            call = f"{elapsed * 1e3:10.0f}" if index == 0 else " " * 10
            row = [f"{name:>10}", f"{index:>10}", *(f"{s:10.0f}" for s in stages)]
            print("  ".join([*row, f"{emmy_ms:10.0f}", call, f"{error:10.2e}"]))
            print(f"{'':>10}  {coverage_line(program)}")
        totals["call"] += elapsed * 1e3
    share = 100.0 * totals["emmy"] / totals["call"] if totals["call"] else 0.0
    print(
        f"all models: emmy {totals['emmy']:.0f} ms of {totals['call']:.0f} ms of first calls "
        f"({share:.0f}%; the rest is dynamo, AOTAutograd and running)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
