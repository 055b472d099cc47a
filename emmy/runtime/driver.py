"""What differs between a GPU and the emulator, and nothing else: the driver interface.

Everything a program does on a device (binding tensors, packing launch arguments, graph
bookkeeping, host calls, timing windows, naming the launch that faulted) is written once, in
emmy.runtime.device and emmy.runtime.executable, over a Driver. A driver holds memory, module
load and function attributes, the launch of one packed kernel on its stream, stream order
(host calls queued between launches, synchronisation), events, graph capture and replay, and
the fault state. Two drivers implement it: emmy.runtime.cuda (cuda-bindings and torch.cuda)
and emmy.runtime.emu (the runner process), which keeps CUDA's semantics where they matter:
launches are queued, a graph replays the arguments it captured, events time the device, and a
fault is sticky until the context is replaced (`reset`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from emmy.base import dtypes
from emmy.base.device_records import BufferArg, DeviceCounters, Launch
from emmy.base.errors import KernelLaunchError

if TYPE_CHECKING:
    import torch

    from emmy.base.regime import Regime

#: the storage types a kernel takes by value
SCALAR_DTYPES = ("i32", "i64", "f32")


class PackedLaunch:
    """One launch's kernel parameters packed once: each argument's value in a cell of its
    own, and the array of the cells' addresses that cuLaunchKernel reads (it copies the
    values at launch, so a cell may change before the next; the emulator reads the cells
    at launch too). Rebinding a buffer rewrites its cells alone."""

    def __init__(self, function: Any, launch: Launch) -> None:
        self.function = function
        self.launch = launch
        self.cells: list[np.ndarray] = []
        #: (cell, buffer name, byte offset) of every pointer argument
        self.pointer_cells: list[tuple[np.ndarray, str, int]] = []
        for arg in launch.args:
            if isinstance(arg, BufferArg):
                cell = np.zeros(1, dtype=np.uint64)
                self.pointer_cells.append((cell, arg.name, int(arg.offset)))
            elif arg.dtype in SCALAR_DTYPES:
                cell = np.array([arg.value], dtype=dtypes.lookup(arg.dtype).numpy)
            else:
                raise KernelLaunchError(f"unknown scalar dtype {arg.dtype!r}")
            self.cells.append(cell)
        self.params = np.array([cell.ctypes.data for cell in self.cells], dtype=np.uint64)
        self.address = self.params.ctypes.data if self.cells else 0
        self.buffers = frozenset(name for _, name, _ in self.pointer_cells)

    def bind(self, pointers: dict[str, int]) -> None:
        for cell, name, offset in self.pointer_cells:
            if name not in pointers:
                raise KernelLaunchError(
                    f"launch of {self.launch.kernel!r} names unknown buffer {name!r}"
                )
            cell[0] = pointers[name] + offset

    def values(self) -> list[int | float]:
        """The arguments as they are now: pointers as addresses, scalars as numbers."""
        return [cell[0].item() for cell in self.cells]


class Driver(ABC):
    """One device's memory, modules, stream, events, graphs and fault state."""

    #: the device identity slug, e.g. "emu" or "nvidia-h200-sm90"
    identity: str
    #: torch's name of this device's memory ("cpu" for the emulator, "cuda:0")
    torch_device: str
    #: the code-generation flags kernels are compiled under
    regime: Regime
    #: what the device did, counted by the driver
    counters: DeviceCounters
    #: the alignment, in bytes, that the kernels assume of every buffer (16-byte vectors)
    alignment: int = 16
    #: timing windows hold at least this many seconds of back-to-back passes
    min_window_seconds: float = 1e-3

    @property
    @abstractmethod
    def compiler(self) -> str:
        """The compiler and its version, as recorded beside measurements ("nvrtc 13.0")."""

    # -- memory --------------------------------------------------------------------------

    @abstractmethod
    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Uninitialised device memory the driver allocates itself (counted)."""

    @abstractmethod
    def output(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A call's output from the device's allocator (torch's caching allocator on a GPU),
        not counted as the driver's own allocation."""

    @abstractmethod
    def owns(self, tensor: torch.Tensor) -> bool:
        """Whether kernels can use `tensor` in place (it lives in this device's memory)."""

    # -- modules ---------------------------------------------------------------------------

    @abstractmethod
    def prepare(self, source: str) -> None:
        """Compiles `source` ahead of any launch (cached); a compile error raises
        KernelCompileError here."""

    @abstractmethod
    def load_module(self, source: str) -> Any:
        """The module of `source`, compiled (or recalled) and loaded once."""

    @abstractmethod
    def function(self, module: Any, launch: Launch) -> Any:
        """The kernel `launch` calls in `module`, opted in to the launch's shared memory."""

    # -- the stream ------------------------------------------------------------------------

    @abstractmethod
    def launch(self, packed: PackedLaunch) -> None:
        """Queues one packed launch on the current stream."""

    @abstractmethod
    def host_call(self, call: Callable[[], object]) -> None:
        """Runs torch work (a vendor call, a fallback) in stream order between launches."""

    @abstractmethod
    def synchronize(self, timeout: float = 120.0, what: str = "the launches") -> None:
        """Waits for everything queued; a fault raises KernelLaunchError, and stays."""

    @abstractmethod
    def end_call(self, timeout: float = 600.0) -> None:
        """A call into the runtime returns: the torch work its caller issues next must see
        its results (a GPU orders it on the stream; the emulator runs its queue now)."""

    @abstractmethod
    def order(self, schedule: str) -> AbstractContextManager[None]:
        """Runs what is issued inside it under a thread order ("forward", "reverse",
        "shuffle:SEED", each optionally "+eager": cp.async copies at issue): the emulator's
        way to show races; a GPU orders its own threads."""

    # -- events ----------------------------------------------------------------------------

    @abstractmethod
    def event(self) -> Any:
        """A new event."""

    @abstractmethod
    def record(self, event: Any) -> None:
        """Records `event` on the current stream."""

    @abstractmethod
    def elapsed(self, start: Any, end: Any) -> float:
        """Device seconds between two recorded events, once both have completed."""

    # -- graphs ----------------------------------------------------------------------------

    @abstractmethod
    def capture(self) -> AbstractContextManager[Any]:
        """Captures the launches and host calls queued inside it into a graph (yielded),
        which replays them with the arguments they had at capture."""

    @abstractmethod
    def replay(self, graph: Any) -> None:
        """Queues one replay of a captured graph."""

    # -- faults and contexts ---------------------------------------------------------------

    @abstractmethod
    def fault(self) -> str | None:
        """The sticky fault this context suffered, if any."""

    @abstractmethod
    def reset(self) -> None:
        """Replaces a faulted context with a fresh one, or says why it cannot."""

    @abstractmethod
    def timing_contexts(self, repetitions: int) -> Iterator[tuple[int, AbstractContextManager]]:
        """How a timing's repetitions are spread: (count, context to run them in) pairs."""

    @abstractmethod
    def close(self) -> None:
        """Releases what the driver holds; a later call may start afresh."""

    # -- shared helpers --------------------------------------------------------------------

    def check_fault(self) -> None:
        """Raises the sticky fault, if there is one: a faulted context runs nothing."""
        fault = self.fault()
        if fault is not None:
            raise KernelLaunchError(f"the device context is unusable after a fault: {fault}")
