"""Training steps under torch.compile (emmy.frontend.tiny_training's: mlp, cnn, gpt2, llama,
vit), in one run:

- coverage: the forward and the backward graphs emmy compiles for a step (backend="emmy"'s
  defaults: an op emmy has no kernel for runs through torch), the share of each
  direction's FLOPs in emmy's kernels and each direction's kernel calls;
- the emulator's step (forward, backward) compiled by emmy against eager, for scale only
  (the emulator runs kernels on the CPU);
- compile seconds of a step, forward and backward graphs, by emmy's backend and by
  Inductor, each in a fresh process with empty kernel caches: a first step less a later one.

    .venv/bin/python benchmarks/training.py [--models gpt2,mlp] [--compilers emmy,inductor]
        [--steps 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

# a sibling script's, on the path as this script's folder
from compile_time import fresh_process_seconds

COMPILERS = ("emmy", "inductor")

COMPILE = r"""
import json, sys, time, torch
from emmy.frontend.tiny_training import TRAINING
compiler, name = sys.argv[1], sys.argv[2]
step = TRAINING[name]()
if compiler == "emmy":
    import emmy.api
    from emmy.runtime.emu import EmuDevice
    backend = emmy.api.backend(device=EmuDevice(), use_cache=False)
else:
    backend = "inductor"
loss_of = torch.compile(step.loss, backend=backend)
seconds = []
for _ in range(2):
    start = time.perf_counter()
    loss_of(step.model, *step.inputs).backward()
    seconds.append(time.perf_counter() - start)
print(json.dumps({"seconds": seconds[0] - seconds[1]}))
"""


def flop_share(programs: list) -> tuple[int, float, int]:
    """The graphs' count, the share of their FLOPs in emmy's kernels and their kernel
    calls."""
    flops = sum(int(p.coverage.get("flops", 0)) for p in programs)
    native = sum(int(p.coverage.get("native_flops", 0)) for p in programs)
    return len(programs), native / flops if flops else 1.0, sum(len(p.calls) for p in programs)


def coverage_and_step_time(name: str, steps: int) -> dict[str, float]:
    """A step's graphs and FLOP shares per direction, and the median step's seconds
    compiled (on the emulator) and eager."""
    import copy

    import torch

    import emmy.api
    from emmy.frontend.tiny_training import TRAINING
    from emmy.runtime.emu import EmuDevice

    step = TRAINING[name]()
    eager_model = copy.deepcopy(step.model)
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, strict=False)
    torch._dynamo.reset()
    loss_of = torch.compile(step.loss, backend=backend)
    loss = loss_of(step.model, *step.inputs)
    forward = len(programs)
    loss.backward()  # AOTAutograd compiles the backward graphs at the first backward
    forward_graphs, forward_share, forward_calls = flop_share(programs[:forward])
    backward_graphs, backward_share, backward_calls = flop_share(programs[forward:])
    compiled, eager = [], []
    for _ in range(steps):
        start = time.perf_counter()
        loss_of(step.model, *step.inputs).backward()
        compiled.append(time.perf_counter() - start)
        start = time.perf_counter()
        step.loss(eager_model, *step.inputs).backward()
        eager.append(time.perf_counter() - start)
    torch._dynamo.reset()
    return {
        "forward_graphs": forward_graphs,
        "forward_share": forward_share,
        "backward_graphs": backward_graphs,
        "backward_share": backward_share,
        "forward_calls": forward_calls,
        "backward_calls": backward_calls,
        "compiled_ms": 1e3 * statistics.median(compiled),
        "eager_ms": 1e3 * statistics.median(eager),
    }


def main() -> int:
    # the steps are built where they are measured: torch loads after the arguments parse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,cnn,gpt2,llama,vit", help="comma-separated")
    parser.add_argument(
        "--compilers",
        default=",".join(COMPILERS),
        help=f"comma-separated, of {', '.join(COMPILERS)}; none skips the compile times",
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the first")
    args = parser.parse_args()
    from emmy.frontend.tiny_training import TRAINING

    names = [n for n in args.models.split(",") if n]
    compilers = [c for c in args.compilers.split(",") if c not in ("", "none")]
    unknown = sorted(set(names) - set(TRAINING)) + sorted(set(compilers) - set(COMPILERS))
    if unknown:
        parser.error(f"unknown model(s) or compiler(s) {', '.join(unknown)}")
    print("training steps, backend=emmy's defaults, emulator")
    print(
        f"{'model':8} {'fwd graphs':>10} {'fwd FLOPs in emmy':>18} {'bwd graphs':>10} "
        f"{'bwd FLOPs in emmy':>18} {'kernels fwd/bwd':>16} {'step emmy (emu)':>16} "
        f"{'step eager':>11}"
    )
    for name in names:
        row = coverage_and_step_time(name, max(1, args.steps))
        print(
            f"{name:8} {row['forward_graphs']:10} {row['forward_share']:18.1%} "
            f"{row['backward_graphs']:10} {row['backward_share']:18.1%} "
            f"{row['forward_calls']:>12}/{row['backward_calls']:<3} "
            f"{row['compiled_ms']:14.1f}ms {row['eager_ms']:9.1f}ms",
            flush=True,
        )
    if compilers:
        print("training step compile seconds (forward and backward), empty kernel caches")
        print(f"{'model':8}" + "".join(f"{c:>12}" for c in compilers))
        for name in names:
            cells = [fresh_process_seconds(COMPILE, c, name, False) for c in compilers]
            print(f"{name:8}" + "".join(f"{s:>11.1f}s" for s in cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
