"""The interface every device implements: run a list of kernel launches over named buffers.

A device takes the emitted CUDA source as text and compiles it the way it needs to (NVRTC to
a cubin for `cuda`, g++ against the emulation header for `emu`), caching the result.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BufferArg:
    """A kernel parameter bound to the named buffer, `offset` bytes in (passed as a device
    pointer): a launch plan places its temporaries at offsets of one arena."""

    name: str
    offset: int = 0


@dataclass(frozen=True)
class ScalarArg:
    """A kernel parameter passed by value; dtype is one of "i32", "i64", "f32"."""

    dtype: str
    value: int | float


Arg = BufferArg | ScalarArg


@dataclass(frozen=True)
class Launch:
    """One kernel launch: the kernel's symbol, its geometry and its arguments in order."""

    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class HostCall:
    """A step of a launch plan that the device runs through torch rather than as an emitted
    kernel (emmy.runtime.vendor):
    - op "matmul": the vendor library's matmul (cuBLAS on a GPU, the CPU's BLAS on the
      emulator), c = a · b, or a · bᵀ with `transpose_b`; b is shared by the batch when it
      has one matrix. `args` are a, b, c; `shapes` their shapes; `dtype` their storage type.
    - op "torch": an op emmy has no kernel for (a fallback): `spec` is the call as JSON
      (emmy.program.Program.fallback_call), `args` its input buffers then its output
      buffers, `shapes` and `dtypes` theirs."""

    op: str
    args: tuple[BufferArg, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    transpose_b: bool = False
    dtypes: tuple[str, ...] = ()
    spec: str = ""

    @property
    def kernel(self) -> str:
        if self.op == "torch":
            return f"torch {json.loads(self.spec)['target']}"
        return f"vendor {self.op}"

    def dtype_of(self, index: int) -> str:
        """The storage type of buffer `index`."""
        return self.dtypes[index] if self.dtypes else self.dtype


Step = Launch | HostCall


@dataclass
class DeviceCounters:
    """What a device did, counted by the device itself so that tests can assert on it.

    allocations, allocated_bytes: buffers of device memory handed out (each tensor a device
    allocates, staging buffers included, whether or not its allocator reused the memory) and
    their bytes; staged_copies: tensors copied into device memory before a call or out of it
    after one, because they did not live there; runner_starts: processes started to run
    kernels (the emulator's runner); requests: requests sent to such a process."""

    allocations: int = 0
    allocated_bytes: int = 0
    staged_copies: int = 0
    runner_starts: int = 0
    requests: int = 0


@dataclass(frozen=True)
class Timing:
    """What a device's time() measured: seconds of one pass of the launch list, one per
    repetition, each the mean of `batch` passes run back to back inside one timed window
    (a GPU batches short kernels until the window is long enough to time honestly)."""

    seconds: tuple[float, ...]
    batch: int = 1


class Device(ABC):
    """A place where emitted kernels run."""

    #: the device identity slug, e.g. "emu" or "nvidia-h200-sm90"
    identity: str
    #: the compiler and its version, as recorded beside measurements ("nvrtc 13.0")
    compiler: str

    def prepare(self, source: str) -> None:  # noqa: B027 - optional for devices
        """Compiles `source` for this device ahead of any launch (cached); a compile error
        raises KernelCompileError here."""

    @abstractmethod
    def run(
        self,
        source: str,
        launches: Sequence[Launch],
        buffers: dict[str, np.ndarray],
        *,
        schedule: str = "forward",
        timeout: float = 120.0,
    ) -> None:
        """Run the launches in order; results are written back into `buffers` in place."""

    @abstractmethod
    def time(
        self,
        source: str,
        launches: Sequence[Launch],
        buffers: dict[str, np.ndarray],
        *,
        warmup: int = 2,
        repetitions: int = 10,
        timeout: float = 600.0,
    ) -> Timing:
        """Seconds taken by each repetition of the whole launch list (after warm-up)."""
