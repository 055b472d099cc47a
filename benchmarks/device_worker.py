"""What running a bench's configs in a device worker costs (emmy.measure.bench_worker), on the
emulator: a worker's start (a process, its device, the emulator's runner checked), one run
of a small kernel through a worker against the same run in place, and the recovery from a
crash (the faulting run, then the next run in a fresh worker).

    .venv/bin/python benchmarks/device_worker.py [--repeats 10]

A GPU bench pays the start once per fault and the round trip once per run or timing; the
emulator's own runner process dominates both figures here.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from emmy.base.errors import KernelLaunchError
from emmy.measure.bench_worker import DeviceSpec, DeviceWorker
from emmy.runtime.device import BufferArg, Launch
from emmy.runtime.emu import EmuDevice, compile_emu

SOURCE = """#include "emmy_device.cuh"
EMMY_KERNEL void double_it(const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 2.0f * x[i];
}
EMMY_EMU_ENTRY(double_it)
EMMY_KERNEL void far_write(const float* x, float* y) { y[(1ll << 36) + threadIdx.x] = x[0]; }
EMMY_EMU_ENTRY(far_write)
"""
ELEMENTS = 4096


def _launch(kernel: str) -> Launch:
    return Launch(kernel, (ELEMENTS // 256, 1, 1), (256, 1, 1), 0, (BufferArg("x"), BufferArg("y")))


def _buffers() -> dict[str, np.ndarray]:
    x = np.arange(ELEMENTS, dtype=np.float32)
    x.flags.writeable = False
    return {"x": x, "y": np.zeros(ELEMENTS, np.float32)}


def _ms(seconds: list[float]) -> str:
    return f"median {statistics.median(seconds) * 1e3:7.1f} ms, min {min(seconds) * 1e3:7.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="measurements of each figure")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be 1 or more")
    compile_emu(SOURCE)
    device = EmuDevice(workers=1)
    spec = DeviceSpec.of(device)
    launch, crash = _launch("double_it"), _launch("far_write")

    starts, worker_runs, local_runs, recoveries = [], [], [], []
    for _ in range(args.repeats):
        with DeviceWorker(spec) as worker:
            begin = time.perf_counter()
            worker.identity  # noqa: B018 - asking for it starts the worker
            starts.append(time.perf_counter() - begin)
            worker.run(SOURCE, [launch], _buffers())  # the first run loads the kernels
            begin = time.perf_counter()
            worker.run(SOURCE, [launch], _buffers())
            worker_runs.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            try:
                worker.run(SOURCE, [crash], _buffers())
            except KernelLaunchError:
                pass  # the planted fault: it ends the worker
            worker.run(SOURCE, [launch], _buffers())
            recoveries.append(time.perf_counter() - begin)
            assert worker.starts == 2, "the crash did not end the worker"
        begin = time.perf_counter()
        device.run(SOURCE, [launch], _buffers())
        local_runs.append(time.perf_counter() - begin)

    print(f"device worker on emu, {args.repeats} repeat(s), a {ELEMENTS}-element kernel:")
    print(f"  worker start (to ready):      {_ms(starts)}")
    print(f"  run in place:                 {_ms(local_runs)}")
    print(f"  run through the worker:       {_ms(worker_runs)}")
    overhead = statistics.median(worker_runs) - statistics.median(local_runs)
    print(f"  worker round trip (median):   {overhead * 1e3:7.1f} ms")
    print(f"  crash, then the next run:     {_ms(recoveries)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
