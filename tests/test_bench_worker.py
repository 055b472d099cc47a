"""Benches that survive kernel faults: a config that crashes or hangs is a row, and the
configs after it are still measured, through a device worker (the path a GPU takes, with an
emulator inside), on the emulator in-process, and on a GPU where there is one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from stores import scaling_family, single_site_module

from emmy.base.compile_options import CompileOptions
from emmy.base.errors import KernelCompileError, KernelLaunchError
from emmy.base.regime import regime_for
from emmy.check import Case, check
from emmy.compiler import compile_graph
from emmy.families.registry import FAMILIES
from emmy.measure.bench import Bench, BenchOptions
from emmy.measure.bench_worker import DeviceSpec, DeviceWorker
from emmy.recall.tuning_db import TuningDB
from emmy.runtime.cuda import CudaDevice
from emmy.runtime.device import BufferArg, Device, Launch
from emmy.runtime.emu import EmuDevice, build_runner
from emmy.runtime.faults import ends_worker

LIBRARY = Path(__file__).parent / "library"
#: long enough for a 64-element kernel's run and timing on a busy emulator host, short
#: enough that waiting out the hang is cheap
TIMEOUT = 5.0
CRASH = "the emulator died of SIGSEGV"


@pytest.fixture
def fault_family(monkeypatch):
    """tests/library/fault.emmy: mode=oob writes 4 GiB past its output, mode=spin hangs."""
    monkeypatch.setenv("EMMY_LIBRARY_PATH", str(LIBRARY))
    build_runner()  # g++ building it at the first launch would count against TIMEOUT
    fault = scaling_family("fault", 2)
    monkeypatch.setitem(FAMILIES, "fault", fault)


def _bench(device: Device, db_path: Path, mode: str) -> list[tuple[dict, str, str | None]]:
    """A bench of the fault family's site: the pick (mode=right, threads=32), the planted
    `mode`, then mode=right at threads=64; each row's config, status and message."""
    module = single_site_module("fault", {"n": 64, "T": "f32"}, [64])
    program = compile_graph(module, CompileOptions(target=device.identity, db=db_path))
    options = BenchOptions(pins={"mode": [mode]}, sweep=["threads"], repetitions=3, timeout=TIMEOUT)
    regime = regime_for(device.identity)
    with TuningDB(db_path) as db:
        outcomes = Bench(device, regime, db, options, lambda line: None).run(program)
        stored = db.rows(device.identity, regime.id, "fault", "n=64,T=f32")
    assert [r.status for r in stored] == [o.row.status for o in outcomes]  # each one recorded
    return [(o.config, o.row.status, o.row.message) for o in outcomes]


def _check_rows(rows: list, mode: str, status: str, message: str) -> None:
    assert [config for config, _, _ in rows] == [
        {"mode": "right", "threads": 32},
        {"mode": mode, "threads": 32},
        {"mode": "right", "threads": 64},
    ]
    (_, first, _), (_, planted, text), (_, after, _) = rows
    # a busy host can leave an emulator timing unstable, never failed
    assert first in ("ok", "unstable") and after in ("ok", "unstable"), rows
    assert planted == status and message in (text or ""), rows


def test_a_crash_in_a_worker_is_a_row_and_a_fresh_worker_measures_the_next(
    tmp_path, fault_family
) -> None:
    with DeviceWorker(DeviceSpec.of(EmuDevice(workers=1))) as worker:
        rows = _bench(worker, tmp_path / "crash.db", "oob")
        _check_rows(rows, "oob", "launch_error", CRASH)
        assert worker.starts == 2  # the crash ended the first worker

        # a hang: the worker is ended at the timeout, with the runner it started
        hung = worker.pid
        rows = _bench(worker, tmp_path / "hang.db", "spin")
        _check_rows(rows, "spin", "timeout", f"timed out after {TIMEOUT:g}s")
        assert worker.starts == 3 and worker.pid != hung
    assert _group_ends(hung), "the hung worker's runner is still spinning"


def _group_ends(pgid: int, within: float = 10.0) -> bool:
    """Whether process group `pgid` is gone within `within` seconds (its killed members
    are reaped by init, a moment after they die)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_a_crash_on_the_emulator_in_process_gives_the_same_rows(tmp_path, fault_family) -> None:
    rows = _bench(EmuDevice(workers=1), tmp_path / "crash.db", "oob")
    _check_rows(rows, "oob", "launch_error", CRASH)


SOURCE = """#include "emmy_device.cuh"
EMMY_KERNEL void double_it(const float* x, float* y) { y[threadIdx.x] = 2.0f * x[threadIdx.x]; }
EMMY_EMU_ENTRY(double_it)
EMMY_KERNEL void far_write(const float* x, float* y) { y[(1ll << 36) + threadIdx.x] = x[0]; }
EMMY_EMU_ENTRY(far_write)
"""


def _launch(kernel: str) -> Launch:
    return Launch(kernel, (1, 1, 1), (8, 1, 1), 0, (BufferArg("x"), BufferArg("y")))


def test_a_worker_that_dies_is_reported_and_replaced() -> None:
    launch = _launch("double_it")
    x = np.arange(8, dtype=np.float32)
    x.flags.writeable = False
    with DeviceWorker(DeviceSpec.of(EmuDevice(workers=1))) as worker:
        buffers = {"x": x, "y": np.zeros(8, np.float32)}
        worker.run(SOURCE, [launch], buffers)
        np.testing.assert_array_equal(buffers["y"], 2 * x)
        assert worker.identity == "emu" and worker.compiler.startswith("g++ ")
        with pytest.raises(KernelCompileError, match=r"g\+\+ failed"):  # reported as itself
            worker.prepare(SOURCE + "not C++\n")
        os.kill(worker.pid, signal.SIGKILL)
        with pytest.raises(KernelLaunchError, match="the device worker died of SIGKILL"):
            worker.run(SOURCE, [launch], buffers)
        buffers["y"][...] = 0
        timing = worker.time(SOURCE, [launch], buffers, warmup=0, repetitions=2)
        assert len(timing.seconds) == 2 and timing.batch >= 1 and worker.starts == 2
        worker.run(SOURCE, [launch], buffers)
        np.testing.assert_array_equal(buffers["y"], 2 * x)


def test_the_faults_that_end_a_worker() -> None:
    cuda = "launch(es) failed on the GPU: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"
    assert ends_worker(cuda) and ends_worker("the emulator died of SIGBUS: running k")
    assert ends_worker("1 launch(es) did not finish in time; the GPU is still busy")
    # a launch the device refused leaves it usable
    assert not ends_worker("block of 2048 threads is over the limit of 1024")


def test_a_check_through_a_worker_makes_a_fault_its_cases_failure() -> None:
    buffers = {"x": np.ones(8, np.float32), "y": np.zeros(8, np.float32)}
    crash = Case(SOURCE, [_launch("far_write")], buffers, {}, {}, "f32", "planted")
    fine = Case(SOURCE, [_launch("double_it")], buffers, {}, {}, "f32", "planted")
    with DeviceWorker(DeviceSpec.of(EmuDevice(workers=1))) as worker:
        (failure,) = check(crash, worker)
        assert failure.startswith(f"planted f32: launch 1 of 1, 'far_write': {CRASH}"), failure
        assert check(fine, worker) == [] and worker.starts == 2
    with pytest.raises(KernelLaunchError, match=CRASH):  # in place, the error is the caller's
        check(crash, EmuDevice(workers=1))


@pytest.mark.gpu
def test_a_gpu_fault_is_a_row_and_the_next_config_is_measured(tmp_path, fault_family) -> None:
    # the bench runs the configs in a worker of its own: the parent's context stays usable
    with CudaDevice() as device:
        rows = _bench(device, tmp_path / "crash.db", "oob")
        _check_rows(rows, "oob", "launch_error", "CUDA_ERROR_ILLEGAL_ADDRESS")
        rows = _bench(device, tmp_path / "hang.db", "spin")
        _check_rows(rows, "spin", "timeout", f"timed out after {TIMEOUT:g}s")
        buffers = {"x": np.ones(8, np.float32), "y": np.zeros(8, np.float32)}
        device.run(GPU_SOURCE, [_launch("double_it")], buffers)
        np.testing.assert_array_equal(buffers["y"], 2 * buffers["x"])


GPU_SOURCE = """
extern "C" __global__ void double_it(const float* x, float* y) { y[threadIdx.x] = 2.0f * x[threadIdx.x]; }
extern "C" __global__ void far_write(const float* x, float* y) { y[(1ll << 40) + threadIdx.x] = x[0]; }
"""


@pytest.mark.gpu
def test_a_sticky_cuda_error_ends_the_worker_and_the_next_run_gets_a_fresh_one() -> None:
    buffers = {"x": np.ones(8, np.float32), "y": np.zeros(8, np.float32)}
    with DeviceWorker(DeviceSpec("cuda")) as worker:
        with pytest.raises(KernelLaunchError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
            worker.run(GPU_SOURCE, [_launch("far_write")], buffers)
        worker.run(GPU_SOURCE, [_launch("double_it")], buffers)
        np.testing.assert_array_equal(buffers["y"], 2 * buffers["x"])
        assert worker.starts == 2
        timing = worker.time(GPU_SOURCE, [_launch("double_it")], buffers, repetitions=3)
        assert len(timing.seconds) == 3 and timing.batch >= 1
