"""Host overhead of a program call on the emulator: the time of a call from Python, less the
kernels' own time as the runner measured it, for programs of K trivial launches.

Three ways, side by side: "one-shot", a new runner process per call that maps the buffers,
loads the kernels, defines the program and runs it (the cost structure of the emulator
before its runner stayed up, less the files it wrote per buffer and the thread it started
per launch, so a floor for it); "run()", EmuDevice.run on numpy arrays (staged into device
memory and back, on the runner that stays up); "executable", EmuDevice.load on tensors in
device memory (one request per call, nothing copied). Per launch: the overhead's growth
from the smallest K to the largest, per launch added.

    .venv/bin/python benchmarks/host_overhead.py [--calls 200] [--launches 1,10,100]
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


def executable(device: EmuDevice, launches: list[Launch], calls: int) -> tuple[list, list]:
    """Overhead per call of an executable on device memory, and the runner's seconds."""
    program = device.load(SOURCE, launches, ["x"])
    tensors = {"x": device.empty((64,), torch.float32)}
    program(tensors)
    out, inside = [], []
    for _ in range(calls):
        start = time.perf_counter()
        program(tensors)
        wall = time.perf_counter() - start
        out.append(wall - program.last_seconds)
        inside.append(program.last_seconds)
    return out, inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per measurement")
    parser.add_argument("--launches", default="1,10,100", help="K: launches per program")
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


if __name__ == "__main__":
    main()
