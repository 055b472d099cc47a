"""The emulator faults where a GPU faults, and brackets what a GPU may do with cp.async: each
test plants a bug that a run on hardware could show, and checks that the emulator shows it.

A misaligned vector access or cp_async faults with the CUDA driver's error name, so that the
fault is classified as the GPU's would be (sticky: the worker that ran it ends). A GPU lands a
cp_async any time between its issue and the wait that retires its group; the emulator lands
it at the wait (deferred, the default) or at issue ("+eager" on the schedule), and a pipeline
that refills a stage before every warp has read it is wrong in the eager mode only.

All kernels live in one source so the module costs a single g++ invocation.
"""

from __future__ import annotations

import numpy as np
import pytest

from emmy.base.errors import KernelLaunchError
from emmy.check import Case, emu_schedules
from emmy.runtime.device import BufferArg, Launch, ScalarArg
from emmy.runtime.emu import EmuDevice, compile_emu
from emmy.runtime.emu_serve import schedule_words
from emmy.runtime.faults import is_fault

SOURCE = r"""
#include "emmy_device.cuh"

// A float4 load 4 bytes past the start of an allocation (which is 16-byte aligned).
EMMY_KERNEL void misaligned_load(const float* x, float* out) {
  float v[4];
  emmy::load_vec<4>(x + 1, v);
  out[threadIdx.x] = v[0];
}
EMMY_EMU_ENTRY(misaligned_load)

// A 16-byte cp_async from a source 4 bytes past a 16-byte boundary.
EMMY_KERNEL void misaligned_cp_async(const float* x, float* out) {
  float* s = reinterpret_cast<float*>(emmy::smem());
  emmy::cp_async<16>(s + 4 * threadIdx.x, x + 1 + 4 * threadIdx.x);
  emmy::cp_async_wait_all();
  out[threadIdx.x] = s[4 * threadIdx.x];
}
EMMY_EMU_ENTRY(misaligned_cp_async)

// out[k][t] = x[k][n - 1 - t] for `tiles` tiles of blockDim.x floats, through two stages of
// shared memory: each thread copies one word of a tile and reads the word a thread of another
// warp copied. refill_barrier = 0 plants the bug: a stage is refilled before every warp has
// read it, one barrier too early.
EMMY_KERNEL void pipelined(const float* x, float* out, int tiles, int refill_barrier) {
  float* stage = reinterpret_cast<float*>(emmy::smem());
  const int t = threadIdx.x, n = blockDim.x;
  for (int k = 0; k < 2; ++k) {
    emmy::cp_async<4>(stage + k * n + t, x + k * n + t);
    emmy::cp_async_commit();
  }
  for (int k = 0; k < tiles; ++k) {
    float* s = stage + k % 2 * n;
    emmy::cp_async_wait<1>();  // this thread's copy of tile k has landed
    emmy::sync_threads();      // and everybody else's
    out[k * n + t] = s[n - 1 - t];
    if (refill_barrier) emmy::sync_threads();
    if (k + 2 < tiles) emmy::cp_async<4>(s + t, x + (k + 2) * n + t);
    emmy::cp_async_commit();  // empty groups too, so that wait<1> always means tile k
  }
}
EMMY_EMU_ENTRY(pipelined)
"""

THREADS = 128  # four warps
TILES = 4


@pytest.fixture(scope="module")
def dev() -> EmuDevice:
    compile_emu(SOURCE)
    device = EmuDevice(workers=1)
    yield device
    device.close()


def _fault(kernel: str, smem: int = 0) -> str:
    """The launch error of a kernel that faults, on a device of its own: a fault is sticky."""
    buffers = {"x": np.zeros(4 * 64 + 4, np.float32), "out": np.zeros(64, np.float32)}
    launch = Launch(kernel, (1, 1, 1), (64, 1, 1), smem, (BufferArg("x"), BufferArg("out")))
    compile_emu(SOURCE)
    device = EmuDevice(workers=1)
    try:
        with pytest.raises(KernelLaunchError) as raised:
            device.run(SOURCE, [launch], buffers)
    finally:
        device.close()
    return str(raised.value)


def test_a_misaligned_float4_load_faults_as_a_gpu_does() -> None:
    message = _fault("misaligned_load")
    assert (
        "CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address: vector load of 4 x f32 at " in message
    )
    assert "not 16-byte aligned (kernel 'misaligned_load', block (0,0,0), thread (" in message
    assert "\n" not in message
    assert is_fault(message)  # sticky, as the GPU's fault is


def test_a_misaligned_cp_async_faults_as_a_gpu_does() -> None:
    message = _fault("misaligned_cp_async", smem=64 * 16)
    assert "CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address: " in message
    assert "16 x b8 (cp_async source)" in message and "not 16-byte aligned" in message
    assert "kernel 'misaligned_cp_async'" in message
    assert is_fault(message)


def _pipelined(dev: EmuDevice, schedule: str, refill_barrier: int) -> tuple[np.ndarray, np.ndarray]:
    """What the pipeline wrote, and what it should have."""
    x = np.arange(TILES * THREADS, dtype=np.float32)
    out = np.full_like(x, np.nan)
    args = (
        BufferArg("x"),
        BufferArg("out"),
        ScalarArg("i32", TILES),
        ScalarArg("i32", refill_barrier),
    )
    launch = Launch("pipelined", (1, 1, 1), (THREADS, 1, 1), 2 * THREADS * 4, args)
    dev.run(SOURCE, [launch], {"x": x, "out": out}, schedule=schedule)
    return out, x.reshape(TILES, THREADS)[:, ::-1].reshape(-1)


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle:5"])
def test_a_stage_refilled_one_barrier_too_early_fails_only_when_copies_are_eager(
    dev: EmuDevice, order: str
) -> None:
    out, want = _pipelined(dev, order, refill_barrier=0)
    np.testing.assert_array_equal(out, want)  # the deferred copy lands after every read
    out, want = _pipelined(dev, order + "+eager", refill_barrier=0)
    got, want = out.reshape(TILES, THREADS), want.reshape(TILES, THREADS)
    # of each two threads that read each other's word, the one resumed second reads the refill
    assert (got[:2] != want[:2]).sum(axis=1).tolist() == [THREADS // 2] * 2
    np.testing.assert_array_equal(got[2:], want[2:])  # nothing overwrites the last two tiles


@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle:5"])
@pytest.mark.parametrize("copies", ["", "+eager"])
def test_the_pipeline_with_its_barrier_is_right_in_both_modes(
    dev: EmuDevice, order: str, copies: str
) -> None:
    out, want = _pipelined(dev, order + copies, refill_barrier=1)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(
    "schedule, words",
    [
        ("forward", "forward 0 deferred"),
        ("reverse", "reverse 0 deferred"),
        ("shuffle", "shuffle 0 deferred"),
        ("shuffle:3", "shuffle 3 deferred"),
        ("forward+eager", "forward 0 eager"),
        ("reverse+eager", "reverse 0 eager"),
        ("shuffle:3+eager", "shuffle 3 eager"),
    ],
)
def test_schedule_spellings(schedule: str, words: str) -> None:
    assert schedule_words(schedule) == words


@pytest.mark.parametrize(
    "schedule",
    [
        "eager",
        "+eager",
        "forward+",
        "forward+lazy",
        "forward+eager+eager",
        "eager+forward",
        "shuffle:x+eager",
    ],
)
def test_bad_schedules_are_refused(dev: EmuDevice, schedule: str) -> None:
    with pytest.raises(ValueError, match="optionally \\+eager"):
        schedule_words(schedule)
    with pytest.raises(ValueError, match="schedule must be"):
        dev.run(SOURCE, [], {}, schedule=schedule)


def test_the_family_check_runs_cp_async_kernels_in_both_modes() -> None:
    def schedules(source: str, schedule: str) -> list[str]:
        return emu_schedules(Case(source, [], {}, {}, {}, "f32", "family"), schedule)

    pipelined = '#include "emmy_device.cuh"\n... emmy::cp_async<16>(s, g); ...'
    assert schedules(pipelined, "forward") == ["forward", "forward+eager"]
    assert schedules(pipelined, "shuffle:2") == ["shuffle:2", "shuffle:2+eager"]
    assert schedules(pipelined, "reverse+eager") == ["reverse+eager"]
    assert schedules('#include "emmy_device.cuh"\n... x[i] = y[i]; ...', "reverse") == ["reverse"]
