"""Host overhead of a program call on the emulator: the time of a call from Python, less the
kernels' own time as the runner measured it, for programs of K trivial launches.

Three ways, side by side: "one-shot", a new runner process per call that maps the buffers,
loads the kernels, defines the program and runs it (the cost structure of the emulator
before its runner stayed up, less the files it wrote per buffer and the thread it started
per launch, so a floor for it); "run()", EmuDevice.run on numpy arrays (staged into device
memory and back, on the runner that stays up); "executable", EmuDevice.load on tensors in
device memory (from its third call on a replayed graph: one request per call, nothing
copied). The runner's seconds come from the driver's events. Per launch: the overhead's growth
from the smallest K to the largest, per launch added.

Then whole programs through emmy.compile (`--models`, recipes at their tiny configs), their
inputs in device memory: the time of a call from Python less the runner's seconds, per
call and per launch, and what the device did per call.

    .venv/bin/python benchmarks/host_overhead.py [--calls 200] [--launches 1,10,100]
        [--models mlp,gpt2,llama]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from emmy.runtime.device import BufferArg, DeviceCounters, Launch
from emmy.runtime.emu import EmuDevice, build_runner
from emmy.runtime.emu_serve import Program, Runner

SOURCE = '#include "emmy_device.cuh"\nEMMY_KERNEL void nop(float* x) {}\nEMMY_EMU_ENTRY(nop)\n'
NOP = Launch("nop", (1, 1, 1), (1, 1, 1), 0, (BufferArg("x"),))


def one_shot(device: EmuDevice, launches: list[Launch], calls: int) -> list[float]:
    """Overhead per call of a fresh runner process per call."""
    x, region, offset = device.memory.array((64,), np.float32)
    so = device._compile(SOURCE)
    runner_path = build_runner()
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        runner = Runner(runner_path, device.memory, DeviceCounters())
        seconds = runner.run(
            Program(so, launches, ["x"]),
            [(region, offset)],
            workers=1,
            schedule="forward",
            smem_limit=device.smem_limit,
            timeout=60,
        )
        runner.close()
        out.append(time.perf_counter() - start - seconds)
    return out


def through_run(device: EmuDevice, launches: list[Launch], calls: int) -> list[float]:
    """Overhead per call of EmuDevice.run on a numpy array (the runner's seconds, which
    run() does not return, are those of the executable's calls: the same kernels)."""
    x = np.zeros(64, np.float32)
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        device.run(SOURCE, launches, {"x": x})
        out.append(time.perf_counter() - start)
    return out


def timed_call(device: EmuDevice, call, *args) -> tuple[float, float]:
    """The wall time of `call(*args)` and the device's own seconds in it (the driver's
    events, which time the runner)."""
    driver = device.driver
    start, end = driver.event(), driver.event()
    driver.record(start)
    begun = time.perf_counter()
    call(*args)
    wall = time.perf_counter() - begun
    driver.record(end)
    return wall, driver.elapsed(start, end)


def executable(device: EmuDevice, launches: list[Launch], calls: int) -> tuple[list, list]:
    """Overhead per call of an executable on device memory (from its third call on, a
    replayed graph), and the runner's seconds."""
    program = device.load(SOURCE, launches, ["x"])
    tensors = {"x": device.empty((64,), torch.float32)}
    program(tensors)
    program(tensors)
    out, inside = [], []
    for _ in range(calls):
        wall, seconds = timed_call(device, program, tensors)
        out.append(wall - seconds)
        inside.append(seconds)
    return out, inside


def programs(names: list[str], calls: int) -> None:
    """emmy.compile'd recipes (tiny) on emu: overhead per call and per launch."""
    # the recipes' models are built with torch and compiled with the whole compiler
    from dataclasses import asdict

    import emmy
    from emmy.frontend.recipes import build, resolve_case

    print(f"programs through emmy.compile on emu, median of {calls} calls")
    for name in names:
        model, inputs = build(resolve_case(name, "tiny", 0, None))
        device = EmuDevice(workers=1)
        compiled = emmy.compile(model, *inputs, device=device)
        on_device = [device.upload(tensor) for tensor in inputs]
        compiled(*on_device)
        compiled(*on_device)
        before = asdict(device.counters)
        overheads = []
        for _ in range(calls):
            wall, seconds = timed_call(device, compiled, *on_device)
            overheads.append(wall - seconds)
        after = asdict(device.counters)
        per_call = {k: (after[k] - before[k]) / calls for k in ("requests", "replays", "uploads")}
        launches = len(compiled.program.calls)
        overhead = statistics.median(overheads)
        print(
            f"  {name:6} {launches:4} launches: {overhead * 1e6:8.1f} µs a call, "
            f"{overhead / launches * 1e6:6.2f} µs a launch; per call {per_call}"
        )
        device.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per measurement")
    parser.add_argument("--launches", default="1,10,100", help="K: launches per program")
    parser.add_argument(
        "--models", default="mlp,gpt2,llama", help="recipes (tiny) through emmy.compile, or ''"
    )
    args = parser.parse_args()
    ks = [int(k) for k in args.launches.split(",")]
    device = EmuDevice(workers=1)
    one_shot_calls = max(1, args.calls // 10)  # a process per call: slow, and steady
    print(f"emu host overhead per call, median of {args.calls} calls ({one_shot_calls} one-shot)")
    print(f"{'K':>5} {'one-shot µs':>12} {'run() µs':>10} {'executable µs':>14} {'kernels µs':>11}")
    rows = {}
    for k in ks:
        launches = [NOP] * k
        ours, inside = executable(device, launches, args.calls)
        kernels = statistics.median(inside)
        row = (
            statistics.median(one_shot(device, launches, one_shot_calls)),
            statistics.median(through_run(device, launches, args.calls)) - kernels,
            statistics.median(ours),
        )
        rows[k] = row
        print(f"{k:>5} {row[0] * 1e6:>12.1f} {row[1] * 1e6:>10.1f} {row[2] * 1e6:>14.1f}"
              f" {kernels * 1e6:>11.1f}")  # fmt: skip
    if len(ks) > 1:
        lo, hi = min(ks), max(ks)
        per = [(rows[hi][i] - rows[lo][i]) / (hi - lo) * 1e6 for i in range(3)]
        print(
            f"per launch (K {lo} to {hi}): one-shot {per[0]:.2f} µs, run() {per[1]:.2f} µs, "
            f"executable {per[2]:.2f} µs"
        )
    print(f"runner starts: {device.counters.runner_starts}, requests: {device.counters.requests}")
    device.close()
    if args.models:
        programs(args.models.split(","), args.calls)


if __name__ == "__main__":
    main()
