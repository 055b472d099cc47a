"""The one runtime over its two drivers (emmy.runtime.driver): every driver implements the whole
interface, and the emulator's driver keeps CUDA's semantics where a GPU program depends on
them. Each semantic test runs on every driver this machine has: the emulator everywhere, the
CUDA driver where there is a GPU (scripts/gpu-day runs this file there)."""

from __future__ import annotations

import inspect
import os
import threading

import numpy as np
import pytest
import torch

from emmy.base.errors import KernelLaunchError
from emmy.measure.bench_worker import DeviceSpec, DeviceWorker
from emmy.runtime import cuda as cuda_module  # imported without a GPU: CI loads the CUDA driver
from emmy.runtime.device import BufferArg, Device, Launch, ScalarArg
from emmy.runtime.driver import Driver
from emmy.runtime.emu import EmuDevice, EmuDriver
from emmy.runtime.faults import ends_worker, is_fault

SOURCE = """#include "emmy_device.cuh"
EMMY_KERNEL void nop(float* x) {}
EMMY_EMU_ENTRY(nop)

EMMY_KERNEL void add_one(float* out, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + 1.0f;
}
EMMY_EMU_ENTRY(add_one)

// 16-byte vector loads and stores: the address of every buffer must be 16-byte aligned
EMMY_KERNEL void scale_vec4(float* out, const float* x) {
  float v[4];
  emmy::load_vec<4>(x + 4 * threadIdx.x, v);
  for (int i = 0; i < 4; ++i) v[i] *= 2.0f;
  emmy::store_vec<4>(out + 4 * threadIdx.x, v);
}
EMMY_EMU_ENTRY(scale_vec4)

EMMY_KERNEL void null_write(float* out, long long address) {
  if (threadIdx.x == 3) *reinterpret_cast<float*>(address) = out[0];
}
EMMY_EMU_ENTRY(null_write)
"""
N = 64


def _launch(kernel: str, *args, block: int = N) -> Launch:
    return Launch(kernel, (1, 1, 1), (block, 1, 1), 0, tuple(args))


ADD_ONE = _launch("add_one", BufferArg("out"), BufferArg("x"), ScalarArg("i32", N))
SCALE = _launch("scale_vec4", BufferArg("out"), BufferArg("x"), block=N // 4)
CRASH = _launch("null_write", BufferArg("out"), ScalarArg("i64", 0))


def _devices() -> list:
    return [pytest.param("emu", id="emu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=_devices())
def device(request) -> Device:
    made = EmuDevice(workers=1) if request.param == "emu" else cuda_module.CudaDevice()
    yield made
    made.close()


# --- the interface ----------------------------------------------------------------------


@pytest.mark.parametrize("driver", [EmuDriver, cuda_module.CudaDriver], ids=["emu", "cuda"])
def test_every_driver_implements_every_method_of_the_interface(driver: type[Driver]) -> None:
    required = Driver.__abstractmethods__
    assert required, "the interface declares its methods abstract"
    assert not inspect.isabstract(driver), sorted(driver.__abstractmethods__)
    # each one written by the driver itself, not inherited from the interface
    own = driver.__mro__[: driver.__mro__.index(Driver)]
    missing = [name for name in required if not any(name in k.__dict__ for k in own)]
    assert not missing, missing


# --- semantics on every driver ------------------------------------------------------------


def test_a_launch_is_queued_and_a_host_call_sees_it_in_order(device: Device) -> None:
    x = device.empty((N,), torch.float32)
    x.copy_(torch.arange(N, dtype=torch.float32))
    out = device.empty((N,), torch.float32)
    program = device.load(SOURCE, [ADD_ONE], ["out", "x"], cuda_graphs=False, outputs={"out"})
    seen = []
    program({"out": out, "x": x})
    device.driver.host_call(lambda: seen.append(out.clone()))
    device.synchronize()
    torch.testing.assert_close(seen[0].cpu(), torch.arange(N, dtype=torch.float32) + 1)


def test_a_launch_from_another_thread_runs(device: Device) -> None:
    """A program loaded in one thread and called from another (autograd's backward, a
    server's worker thread): a GPU's context is current per thread, and the driver makes
    it current where the launch comes from."""
    x = device.empty((N,), torch.float32)
    x.copy_(torch.arange(N, dtype=torch.float32))
    out = device.empty((N,), torch.float32)
    program = device.load(SOURCE, [ADD_ONE], ["out", "x"], cuda_graphs=False, outputs={"out"})
    failed: list[BaseException] = []

    def call() -> None:
        try:
            program({"out": out, "x": x})
            device.synchronize()
        except BaseException as error:  # noqa: BLE001 - the thread's failure is the test's
            failed.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(timeout=120)
    assert not failed, failed
    torch.testing.assert_close(out.cpu(), torch.arange(N, dtype=torch.float32) + 1)


def test_a_graph_replays_what_it_captured_and_the_runtime_recaptures(device: Device) -> None:
    """Hardware's rule, kept by the emulator: a graph reads the addresses it captured, so a
    replay after an input moved computes from the old input. The runtime's executable never
    replays a graph on addresses that moved."""
    driver = device.driver
    old = device.empty((N,), torch.float32).fill_(1.0)
    moved = device.empty((N,), torch.float32).fill_(5.0)
    out = device.empty((N,), torch.float32)
    program = device.load(SOURCE, [ADD_ONE], ["out", "x"], fixed={"x", "out"})
    with driver.capture() as graph:
        program.issue({"out": out, "x": old}, {"out": out.data_ptr(), "x": old.data_ptr()})
    driver.replay(graph)
    device.synchronize()
    assert out.eq(2.0).all()
    # the input moved: the same graph still reads the old one, as on a GPU
    old.fill_(10.0)
    driver.replay(graph)
    device.synchronize()
    assert out.eq(11.0).all()
    # through the executable: the third call replays, and a moved tensor gets its own graph
    for x, want in ((old, 11.0), (moved, 6.0), (moved, 6.0), (old, 11.0)):
        program({"out": out, "x": x})
        device.synchronize()
        assert out.eq(want).all(), (want, out[:4])
    assert device.counters.replays >= 2


def test_a_tensor_at_an_odd_offset_is_copied_not_faulted_on(device: Device) -> None:
    backing = device.empty((N + 1,), torch.float32)
    backing.copy_(torch.arange(N + 1, dtype=torch.float32))
    x = backing[1:]  # 4 bytes past a 16-byte boundary: a float4 load from it faults
    assert x.data_ptr() % 16 == 4
    out = device.empty((N,), torch.float32)
    program = device.load(SOURCE, [SCALE], ["out", "x"], outputs={"out"})
    program({"out": out, "x": x})
    device.synchronize()
    torch.testing.assert_close(out.cpu(), 2 * torch.arange(1, N + 1, dtype=torch.float32))
    assert device.counters.realigned == 1 and device.counters.uploads == 0
    assert device.fault() is None


@pytest.mark.sticky_fault
def test_a_planted_fault_is_reported_against_its_own_launch(device: Device) -> None:
    """Launches are asynchronous: without a synchronisation per launch the fault surfaces at
    a later one. A check and a bench synchronise per launch, so the message names the launch
    that faulted, and it leaves the context unusable."""
    buffers = {"out": np.zeros(N, np.float32), "x": np.ones(N, np.float32)}
    with pytest.raises(KernelLaunchError) as error:
        device.run(SOURCE, [ADD_ONE, CRASH, ADD_ONE], buffers)
    message = str(error.value)
    assert message.startswith("launch 2 of 3, 'null_write': "), message
    assert is_fault(message) and ends_worker(message)
    assert device.fault() is not None
    with pytest.raises(KernelLaunchError, match="unusable after a fault"):
        device.run(SOURCE, [ADD_ONE], buffers)


def test_host_bound_windows_are_flagged_and_graphs_are_not(device: Device) -> None:
    buffers = {"x": np.zeros(N, np.float32)}
    nop = _launch("nop", BufferArg("x"), block=1)
    issued = device.time(SOURCE, [nop], buffers, warmup=1, repetitions=3, graphs=False)
    # a kernel of a few hundred nanoseconds issued pass by pass from Python: the host
    # enqueues slower than the device runs, and the timing says so
    assert not issued.graphed and issued.batch > 1 and issued.host_bound, issued
    graphed = device.time(SOURCE, [nop], buffers, warmup=1, repetitions=3)
    assert graphed.graphed and not graphed.host_bound, graphed


def test_a_call_is_timed_by_the_devices_events(device: Device) -> None:
    """Device.time_call: torch's work on the device's tensors, in stream order (a host call),
    or a call that issues the device's own launches, in windows between the driver's events
    as a launch list is timed (what gpu-check times torch and emmy.compile's programs by)."""
    x = device.empty((N,), torch.float32)
    x.zero_()
    torch_work = device.time_call(lambda: x.add_(1.0), warmup=1, repetitions=3)
    assert len(torch_work.seconds) == 3 and min(torch_work.seconds) > 0, torch_work
    assert not torch_work.graphed
    device.synchronize()
    calls = int(x[0].item())
    assert calls >= 1 + 3 * torch_work.batch  # the probe and every window's calls ran
    out = device.empty((N,), torch.float32)
    program = device.load(SOURCE, [ADD_ONE], ["out", "x"], cuda_graphs=False, outputs={"out"})
    launches = device.time_call(
        lambda: program({"out": out, "x": x}), launches=True, warmup=1, repetitions=3
    )
    assert len(launches.seconds) == 3 and min(launches.seconds) > 0, launches
    torch.testing.assert_close(out.cpu(), torch.full((N,), calls + 1.0))


# --- the emulator's side of it ----------------------------------------------------------


def test_a_planted_fault_in_a_device_worker_replaces_the_worker() -> None:
    buffers = {"out": np.zeros(N, np.float32), "x": np.ones(N, np.float32)}
    with DeviceWorker(DeviceSpec.of(EmuDevice(workers=1))) as worker:
        with pytest.raises(KernelLaunchError, match="launch 2 of 3, 'null_write'"):
            worker.run(SOURCE, [ADD_ONE, CRASH, ADD_ONE], buffers)
        worker.run(SOURCE, [ADD_ONE], buffers)
        np.testing.assert_array_equal(buffers["out"], np.full(N, 2.0, np.float32))
        assert worker.starts == 2


def test_a_process_holding_over_a_thousand_descriptors_still_runs_kernels() -> None:
    """A large model's tensors in the emulator's shared memory hold a descriptor each, so the
    runner's pipes and a device worker's are numbered past 1023, which select() refuses."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        buffers = {"out": np.zeros(N, np.float32), "x": np.ones(N, np.float32)}
        with EmuDevice(workers=1) as device:
            device.run(SOURCE, [ADD_ONE], buffers)
        np.testing.assert_array_equal(buffers["out"], np.full(N, 2.0, np.float32))
        buffers["out"][:] = 0
        with DeviceWorker(DeviceSpec.of(EmuDevice(workers=1))) as worker:
            worker.run(SOURCE, [ADD_ONE], buffers)
        np.testing.assert_array_equal(buffers["out"], np.full(N, 2.0, np.float32))
    finally:
        for fd in held:
            os.close(fd)


def test_fault_classification_knows_torchs_wording_and_the_drivers() -> None:
    torch_words = (
        "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be"
        " asynchronously reported at some other API call"
    )
    assert ends_worker(torch_words) and ends_worker("CUDA error: misaligned address")
    assert ends_worker("launch of 'k' failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory")
    assert ends_worker("emulated launch of k timed out after 2s")
    assert not ends_worker("block of 2048 threads is over the limit of 1024")
    assert not ends_worker("CUDA error: out of memory")
