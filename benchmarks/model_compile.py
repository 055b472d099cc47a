"""Compile latency of a whole model: `emmy compile RECIPE` cold (empty caches) and warm,
split by stage, beside torch.compile (inductor, CPU) of the same model at the same size,
measured in the same run; and the launch plan's peak device memory beside the sum of all
its intermediate tensors.

    .venv/bin/python benchmarks/model_compile.py [--recipe gpt2] [--config small] [--size 0]
        [--repeat N] [--skip-inductor]

Each emmy compile is its own process, as a user runs it. Cold: a fresh EMMY_CACHE_DIR (no
exported graph, no program, no kernels). Warm: the same cache again (a program cache hit),
and warm with --no-cache (the graph and the kernels cached, the passes run). torch.compile
runs in its own process with a fresh inductor cache: its compile time is the first call's
time minus a later call's.

Two ratios, each side measured the same way:
- compile: from a process that has imported torch and holds the model, to a compiled model
  (emmy: its in-process total less importing torch; inductor: the first call less a later
  one);
- process: from a fresh process to a compiled model (emmy: the `emmy compile` process;
  inductor: its process less building the model's weights and running it twice).

With --repeat N, N cold pairs (emmy, then inductor) run one after the other, and each pair's
ratios are printed with the worst: one pair on a shared machine says little about the next.
With --skip-inductor, emmy's compiles and the launch plan alone (inductor takes a minute
even for a tiny config on a small machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EMMY = str(Path(sys.executable).with_name("emmy"))
TARGET = "nvidia-h200-sm90"

TORCH_COMPILE = r"""
import json, sys, time, torch
from emmy.frontend.recipes import build, resolve_case
case = resolve_case(sys.argv[1], sys.argv[2], int(sys.argv[3]), None)
start = time.perf_counter()
model, inputs = build(case)
built = time.perf_counter() - start
start = time.perf_counter()
compiled = torch.compile(model, backend="inductor")
with torch.no_grad():
    compiled(*inputs)
    first = time.perf_counter() - start
    start = time.perf_counter()
    compiled(*inputs)
    second = time.perf_counter() - start
print(json.dumps({"build": built, "first_call": first, "later_call": second}))
"""


def emmy_compile(args, cache: str, *extra: str) -> dict[str, float]:
    out = tempfile.mkdtemp(prefix="emmy-bench-out-")
    command = [EMMY, "compile", args.recipe, "--config", args.config, "--size", str(args.size)]
    command += ["--target", TARGET, "-o", out, *extra]
    start = time.perf_counter()
    subprocess.run(
        command, env={**os.environ, "EMMY_CACHE_DIR": cache}, check=True, capture_output=True
    )
    wall = time.perf_counter() - start
    report = json.loads((Path(out) / "report.json").read_text())
    return {"wall": wall, **report["timings_s"], "memory": report["memory_bytes"]}


def torch_compile(args) -> dict[str, float]:
    cache = tempfile.mkdtemp(prefix="inductor-bench-")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TORCHINDUCTOR_FX_GRAPH_CACHE": "0"}
    command = [sys.executable, "-c", TORCH_COMPILE, args.recipe, args.config, str(args.size)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall": wall, **figures, "compile": figures["first_call"] - figures["later_call"]}


def stages(figures: dict) -> str:
    skip = {"wall", "memory", "nvrtc_cache_hit", "total"}
    return ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in figures.items() if k not in skip)


def ratios(cold: dict, torch_figures: dict) -> tuple[float, float, float, float]:
    """(emmy compile-only, ratio compile, inductor process, ratio process) of one pair."""
    emmy_compile_only = cold["total"] - cold.get("frontend: import torch", 0.0)
    torch_process = torch_figures["wall"] - torch_figures["build"] - 2 * torch_figures["later_call"]
    return (
        emmy_compile_only,
        emmy_compile_only / torch_figures["compile"],
        torch_process,
        cold["wall"] / torch_process,
    )


def print_comparison(cold: dict, torch_figures: dict) -> None:
    """torch.compile's figures beside emmy's cold compile, and the two ratios."""
    print(
        f"torch.compile (inductor, CPU): {torch_figures['compile']:.2f} s compile "
        f"(first call {torch_figures['first_call']:.2f} s, later call "
        f"{torch_figures['later_call']:.2f} s; {torch_figures['wall']:.2f} s process)"
    )
    emmy_compile_only, compile_ratio, torch_process, process_ratio = ratios(cold, torch_figures)
    print(
        f"ratio, compile (torch imported, model at hand): emmy {emmy_compile_only:.2f} s / "
        f"inductor {torch_figures['compile']:.2f} s = {compile_ratio:.3f}"
    )
    print(
        f"ratio, process (fresh process to compiled model): emmy {cold['wall']:.2f} s / "
        f"inductor {torch_process:.2f} s = {process_ratio:.3f}"
    )
    print(
        f"(earlier sessions' figure, emmy's process over inductor's compile alone: "
        f"{cold['wall'] / torch_figures['compile']:.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="gpt2")
    parser.add_argument("--config", default="small")
    parser.add_argument("--size", type=int, default=0)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="cold emmy / inductor pairs, run alternately, each ratio printed (default 1)",
    )
    parser.add_argument(
        "--skip-inductor", action="store_true", help="no torch.compile: emmy's figures alone"
    )
    args = parser.parse_args()
    if args.skip_inductor and args.repeat > 1:
        parser.error("--repeat pairs emmy with inductor: it does not go with --skip-inductor")
    cache = tempfile.mkdtemp(prefix="emmy-bench-cache-")
    cold = emmy_compile(args, cache)
    warm = emmy_compile(args, cache)
    warm_passes = emmy_compile(args, cache, "--no-cache")
    torch_figures = None if args.skip_inductor else torch_compile(args)
    print(f"{args.recipe} [{args.config}, size {args.size}] for {TARGET}")
    print(f"emmy cold:  {cold['wall']:.2f} s process ({stages(cold)})")
    print(f"emmy warm:  {warm['wall']:.2f} s process ({stages(warm)})")
    print(f"emmy warm, --no-cache: {warm_passes['wall']:.2f} s process ({stages(warm_passes)})")
    if torch_figures is not None:
        print_comparison(cold, torch_figures)
    memory = cold["memory"]
    print(
        f"launch plan: temporaries in a {memory['arena'] / 2**20:.1f} MiB arena, "
        f"{memory['temporaries_unshared'] / 2**20:.1f} MiB if each had its own buffer "
        f"({memory['arena'] / max(1, memory['temporaries_unshared']):.3f}); weights "
        f"{memory['constants'] / 2**20:.1f} MiB, outputs {memory['outputs'] / 2**20:.1f} MiB"
    )
    if torch_figures is None:
        return
    pairs = [(1, cold, torch_figures)]
    for run in range(2, args.repeat + 1):
        print(f"pair {run}/{args.repeat}: cold emmy, then inductor", file=sys.stderr, flush=True)
        fresh_cache = tempfile.mkdtemp(prefix="emmy-bench-cache-")
        pairs.append((run, emmy_compile(args, fresh_cache), torch_compile(args)))
    if len(pairs) == 1:
        return
    print("pair  emmy cold  inductor compile / process  ratio compile  ratio process")
    compile_ratios, process_ratios = [], []
    for run, cold, torch_figures in pairs:
        _, compile_ratio, torch_process, process_ratio = ratios(cold, torch_figures)
        compile_ratios.append(compile_ratio)
        process_ratios.append(process_ratio)
        print(
            f"{run:>4}  {cold['wall']:>8.2f} s  {torch_figures['compile']:>8.2f} s / "
            f"{torch_process:>6.2f} s      {compile_ratio:>13.3f}  {process_ratio:>13.3f}"
        )
    print(
        f"worst of {len(pairs)}: ratio compile {max(compile_ratios):.3f}, "
        f"ratio process {max(process_ratios):.3f}"
    )


if __name__ == "__main__":
    main()
