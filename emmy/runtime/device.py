"""A device: the one runtime over a driver (emmy.runtime.driver), the same code on a GPU and on
the emulator.

Two ways in. `run` and `time` take numpy arrays (a bench's fresh inputs, a check's
references): they are staged into device memory, the steps run with a synchronisation after
each launch (so a fault names the launch that made it), and written arrays are copied back.
`load` gives an Executable (emmy.runtime.executable): the launch list prepared once, then
called any number of times on tensors that live on the device, in place, with nothing copied
to the host: that is how a compiled program runs (emmy.runtime.bound).

`time` measures windows of back-to-back passes between two events, long enough to time
honestly; a batch of passes is captured once as a graph and replayed, so that a short
kernel is not timed at the speed Python issues it. Beside each window it records the host's
time to enqueue it: a window the host bounds says so (Timing.host_bound).
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from emmy.base.device_records import (  # noqa: F401 - the records, as every caller names them
    Arg,
    BufferArg,
    DeviceCounters,
    HostCall,
    Launch,
    ScalarArg,
    Step,
    Timing,
    TorchFallback,
    VendorAttention,
    VendorAttentionBackward,
    VendorConv,
    VendorMatmul,
)
from emmy.base.errors import KernelLaunchError
from emmy.runtime.driver import Driver
from emmy.runtime.executable import Executable, Roles

if TYPE_CHECKING:
    import torch

    from emmy.base.regime import Regime

#: the most passes one timed window batches
MAX_BATCH = 100_000
#: the most passes one captured graph holds; a longer window replays it several times
GRAPH_PASSES = 256
#: launch lists on numpy buffers a device keeps loaded; the least recently used goes first
CACHED_EXECUTABLES = 64


class Device:
    """A place where emitted kernels run: the runtime over `driver`."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        # read-only host arrays (a program's weights) keep one device copy
        self._resident: dict[int, tuple[np.ndarray, torch.Tensor]] = {}
        # launch lists run on numpy buffers, by source, launches, buffers and outputs
        self._executables: dict[tuple, Executable] = {}

    # -- what the driver says --------------------------------------------------------------

    @property
    def identity(self) -> str:
        """The device identity slug, e.g. "emu" or "nvidia-h200-sm90"."""
        return self.driver.identity

    @property
    def torch_device(self) -> str:
        """torch's name of this device's memory ("cpu" for the emulator, "cuda:0")."""
        return self.driver.torch_device

    @property
    def regime(self) -> Regime:
        return self.driver.regime

    @property
    def compiler(self) -> str:
        """The compiler and its version, as recorded beside measurements ("nvrtc 13.0")."""
        return self.driver.compiler

    @property
    def counters(self) -> DeviceCounters:
        """This device's counts, from its creation on."""
        return self.driver.counters

    # -- memory ----------------------------------------------------------------------------

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Uninitialised device memory that the device's executables use in place."""
        return self.driver.empty(tuple(shape), dtype)

    def output(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A call's output: device memory from the device's allocator (torch's caching
        allocator on a GPU), not counted as the device's own allocation."""
        return self.driver.output(tuple(shape), dtype)

    def owns(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` lives in this device's memory."""
        return self.driver.owns(tensor)

    def upload(self, tensor: torch.Tensor) -> torch.Tensor:
        """A device copy of `tensor` (a weight), made in stream order."""
        copy = self.driver.empty(tuple(tensor.shape), tensor.dtype)
        self.driver.host_call(lambda: copy.copy_(tensor))
        self.driver.end_call()
        self.counters.uploads += 1
        return copy

    # -- the stream and the context --------------------------------------------------------

    def prepare(self, source: str) -> None:
        """Compiles `source` for this device ahead of any launch (cached); a compile error
        raises KernelCompileError here."""
        self.driver.prepare(source)

    def synchronize(self) -> None:
        """Waits until everything queued on the device has finished."""
        self.driver.synchronize()

    def fault(self) -> str | None:
        """The sticky fault of this device's context, if it suffered one."""
        return self.driver.fault()

    def reset(self) -> None:
        """A fresh context after a fault (the emulator's; a GPU's process must be replaced)."""
        self._resident.clear()
        self._executables.clear()
        self.driver.reset()

    def close(self) -> None:
        self._resident.clear()
        self._executables.clear()
        self.driver.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- programs on the device's tensors --------------------------------------------------

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
        only read. The launch list is replayed as one graph unless `cuda_graphs` is False."""
        roles = Roles(frozenset(fixed), frozenset(mutated), frozenset(outputs))
        return Executable(self.driver, source, steps, slots, cuda_graphs=cuda_graphs, roles=roles)

    # -- launch lists on numpy buffers -----------------------------------------------------

    def run(
        self,
        source: str,
        launches: Sequence[Step],
        buffers: dict[str, np.ndarray],
        *,
        schedule: str = "forward",
        timeout: float = 120.0,
    ) -> None:
        """Runs the launches in order, each waited for (a fault names its launch); results
        are written back into the writeable arrays of `buffers` in place (read-only arrays
        are inputs). `schedule` orders the emulator's threads; a GPU orders its own."""
        tensors, copied = self._host_tensors(buffers)
        executable = self._executable(source, launches, buffers)
        executable(tensors, sync_each_launch=True, timeout=timeout, schedule=schedule)
        for array, host in copied:
            array[...] = host

    def time(
        self,
        source: str,
        launches: Sequence[Step],
        buffers: dict[str, np.ndarray],
        *,
        warmup: int = 2,
        repetitions: int = 10,
        timeout: float = 600.0,
        graphs: bool = True,
    ) -> Timing:
        """Device seconds of one pass of the launch list, per repetition: events around
        `batch` passes back to back, `batch` chosen so that a window lasts the driver's
        min_window_seconds or more, replayed from a captured graph unless `graphs` is False
        or the steps cannot be captured. Buffers are not copied back."""
        self.driver.check_fault()
        executable = self._executable(source, launches, buffers)
        tensors = executable.bind(self._host_tensors(buffers)[0])
        pointers = {name: tensor.data_ptr() for name, tensor in tensors.items()}

        def issue() -> None:
            executable.issue(tensors, pointers)

        return self._timed(issue, warmup, repetitions, timeout, graphs)

    def time_call(
        self,
        function: Callable[[], object],
        *,
        launches: bool = False,
        warmup: int = 2,
        repetitions: int = 10,
        timeout: float = 600.0,
    ) -> Timing:
        """Device seconds of one call of `function`, timed as `time` times a launch list
        (events around back-to-back calls, never captured). `function` does torch work on
        this device's tensors (torch eager, a vendor op, a torch.compile'd model), issued
        in stream order as a host call; with `launches`, it issues this device's own
        launches (a compiled program's call), on the stream as they are."""
        self.driver.check_fault()

        def issue() -> None:
            if launches:
                function()
            else:
                self.driver.host_call(function)

        return self._timed(issue, warmup, repetitions, timeout, graphs=False)

    def _timed(
        self,
        issue: Callable[[], object],
        warmup: int,
        repetitions: int,
        timeout: float,
        graphs: bool,
    ) -> Timing:
        """Seconds of one `issue()` per repetition, each a window of back-to-back issues
        between two events (see `time`)."""
        driver = self.driver
        deadline = _time.monotonic() + timeout

        def left() -> float:
            return max(1.0, deadline - _time.monotonic())

        window: _Window | None = None
        seconds: list[float] = []
        hosts: list[float] = []
        for count, context in driver.timing_contexts(repetitions):
            with context:
                for _ in range(warmup):
                    issue()
                driver.synchronize(left(), "the warm-up")
                window = window or _Window.fitted(driver, issue, graphs, left)
                marks = [window.measure(driver, issue) for _ in range(count)]
                driver.synchronize(left(), f"{count} timed window(s) of {window.batch} pass(es)")
                for start, end, host in marks:
                    seconds.append(driver.elapsed(start, end) / window.batch)
                    hosts.append(host / window.batch)
        driver.end_call()
        if window is None:
            raise KernelLaunchError("a timing needs at least one repetition")
        return Timing(tuple(seconds), window.batch, tuple(hosts), window.graph is not None)

    def _executable(
        self, source: str, launches: Sequence[Step], buffers: dict[str, np.ndarray]
    ) -> Executable:
        """The executable of a launch list on numpy buffers, kept while used (its kernels
        loaded, its arguments packed and its staging buffers allocated once); the writeable
        buffers are its outputs, written back after each run."""
        written = frozenset(name for name, array in buffers.items() if array.flags.writeable)
        key = (source, tuple(launches), tuple(buffers), written)
        executable = self._executables.pop(key, None)
        if executable is None:
            roles = Roles(outputs=written)
            executable = Executable(
                self.driver, source, launches, list(buffers), cuda_graphs=False, roles=roles
            )
        self._executables[key] = executable  # the most recently used last
        while len(self._executables) > CACHED_EXECUTABLES:
            self._executables.pop(next(iter(self._executables)))
        return executable

    def _host_tensors(
        self, buffers: dict[str, np.ndarray]
    ) -> tuple[dict[str, torch.Tensor], list[tuple[np.ndarray, np.ndarray]]]:
        """Per buffer a tensor over the array's bytes, which the executable stages into
        device memory (and writes back where the array is writeable); a read-only array
        keeps one device copy (a program's weights cross once, not at every run). Also the
        (array, contiguous copy) pairs to copy back after a run."""
        import torch  # the runtime's tensors; a compile never comes here

        tensors: dict[str, torch.Tensor] = {}
        copied: list[tuple[np.ndarray, np.ndarray]] = []
        for name, array in buffers.items():
            if not array.flags.writeable and array.nbytes:
                tensors[name] = self._resident_tensor(array)
                continue
            host = array if array.flags.c_contiguous else np.ascontiguousarray(array)
            if host is not array:
                copied.append((array, host))
            tensors[name] = torch.from_numpy(host.reshape(-1).view(np.uint8))
        return tensors, copied

    def _resident_tensor(self, array: np.ndarray) -> torch.Tensor:
        import torch  # the runtime's tensors; a compile never comes here

        resident = self._resident.get(id(array))
        if resident is not None and resident[0] is array:
            return resident[1]
        host = torch.from_numpy(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        tensor = self.upload(host)
        # the array kept alive beside its copy: its id stays its own
        self._resident[id(array)] = (array, tensor)
        return tensor


class _Window:
    """How one timed window runs: `batch` passes, as `replays` replays of a graph of
    `batch / replays` passes, or issued one by one (`graph` None)."""

    def __init__(self, batch: int, graph: Any, replays: int) -> None:
        self.batch = batch
        self.graph = graph
        self.replays = replays

    @classmethod
    def fitted(cls, driver: Driver, issue: Any, graphs: bool, left: Any) -> _Window:
        """A window long enough to time: one probed pass sets the batch."""
        start, end = driver.event(), driver.event()
        driver.record(start)
        issue()
        driver.record(end)
        driver.synchronize(left(), "a probe of the launch list")
        one = max(driver.elapsed(start, end), 1e-7)
        batch = max(1, min(MAX_BATCH, math.ceil(driver.min_window_seconds / one)))
        if not graphs:
            return cls(batch, None, batch)
        passes = min(batch, GRAPH_PASSES)
        replays = math.ceil(batch / passes)
        try:
            with driver.capture() as graph:
                for _ in range(passes):
                    issue()
        except RuntimeError:  # a host call that cannot be captured: pass by pass
            return cls(batch, None, batch)
        return cls(passes * replays, graph, replays)

    def measure(self, driver: Driver, issue: Any) -> tuple[Any, Any, float]:
        """Queues one window between two events; the events and the host's enqueue time."""
        start, end = driver.event(), driver.event()
        driver.record(start)
        begun = _time.perf_counter()
        for _ in range(self.replays):
            if self.graph is not None:
                driver.replay(self.graph)
            else:
                issue()
        host = _time.perf_counter() - begun
        driver.record(end)
        return start, end, host
