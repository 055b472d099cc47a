"""The interface every device implements: run a list of kernel launches over named buffers.

A device takes the emitted CUDA source as text and compiles it the way it needs to (NVRTC to
a cubin for `cuda`, g++ against the emulation header for `emu`), caching the result.

Two ways in. `run` and `time` take numpy arrays (a bench's fresh inputs, a check's
references) and copy them to the device and back. `load` gives an Executable: the launch
list prepared once (its arguments packed, its kernels loaded), then called any number of
times on torch tensors that live on the device, in place, with nothing copied to the host:
that is how a compiled program runs (emmy.runtime.bound).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from emmy.errors import KernelLaunchError

if TYPE_CHECKING:
    import torch


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
    - op "attention": torch's scaled_dot_product_attention (FlashAttention-2, cuDNN or the
      memory-efficient kernel on a GPU), o = softmax(q kᵀ · scale [+ mask] [causal]) v on
      q, k, v, [mask], o in SDPA's [groups, heads, len, d] shapes; `spec` is JSON
      {"causal", "scale"}.
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


@dataclass(frozen=True)
class Timing:
    """What a device's time() measured: seconds of one pass of the launch list, one per
    repetition, each the mean of `batch` passes run back to back inside one timed window
    (a GPU batches short kernels until the window is long enough to time honestly)."""

    seconds: tuple[float, ...]
    batch: int = 1


@dataclass
class DeviceCounters:
    """What a device did, counted by the device itself, so that a test can check that a
    program's later calls allocate nothing and copy nothing to the host."""

    #: device memory the device allocated itself (arenas, workspaces, staging, graphs'
    #: static buffers), not outputs drawn from torch's caching allocator
    allocations: int = 0
    allocated_bytes: int = 0
    #: host-to-device copies (weights uploaded, a CPU tensor staged into device memory)
    uploads: int = 0
    #: device-to-host copies
    host_copies: int = 0
    #: kernel launches issued (a graph replay counts its launches once, at capture)
    launches: int = 0
    #: graph replays (cuda) or runner requests (emu)
    replays: int = 0
    requests: int = 0
    #: emulator runner processes started
    runner_starts: int = 0


class Executable(ABC):
    """A launch list loaded on a device: kernels loaded and arguments packed once. A call
    runs it on the device's tensors, one per buffer name (its slots), in place, ordered on
    the device's current stream; it returns before the device has finished."""

    @abstractmethod
    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Runs the launches on `tensors` (every slot bound)."""


class Device(ABC):
    """A place where emitted kernels run."""

    #: the device identity slug, e.g. "emu" or "nvidia-h200-sm90"
    identity: str
    #: the compiler and its version, as recorded beside measurements ("nvrtc 13.0")
    compiler: str
    #: torch's name of this device's memory ("cpu" for the emulator, "cuda:0")
    torch_device: str = "cpu"

    @property
    def counters(self) -> DeviceCounters:
        """This device's counts, from its creation on."""
        if "_counters" not in self.__dict__:
            self._counters = DeviceCounters()
        return self._counters

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Uninitialised device memory that the device's executables use in place."""
        raise self._no_programs()

    def output(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A call's output: device memory from the device's allocator (torch's caching
        allocator on a GPU), not counted as the device's own allocation."""
        raise self._no_programs()

    def upload(self, tensor: torch.Tensor) -> torch.Tensor:
        """A device copy of `tensor` (a weight), made on the stream that later reads it."""
        copy = self.empty(tuple(tensor.shape), tensor.dtype)
        copy.copy_(tensor)
        self.counters.uploads += 1
        return copy

    def load(
        self,
        source: str,
        steps: Sequence[Step],
        slots: Sequence[str],
        *,
        cuda_graphs: bool = True,
        fixed: Collection[str] = (),
        mutated: Collection[str] = (),
        outputs: Collection[str] = (),
    ) -> Executable:
        """Prepares `steps` to run on tensors bound by name; every buffer the steps name is
        one of `slots`. The roles of the slots: `fixed` are bound to the same tensors at
        every call (weights, the arena), `mutated` are inputs the steps write (a KV cache),
        `outputs` are bound to each call's fresh outputs; the others are inputs the steps
        only read. A GPU replays the launch list as one CUDA graph unless `cuda_graphs` is
        False; other devices ignore it."""
        raise self._no_programs()

    def _no_programs(self) -> KernelLaunchError:
        return KernelLaunchError(
            f"the {self.identity} device runs launch lists on numpy buffers alone (run, "
            "time), not programs on its tensors"
        )

    def synchronize(self) -> None:  # noqa: B027 - a device with no queue has nothing to wait on
        """Waits until everything queued on the device has finished."""

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
