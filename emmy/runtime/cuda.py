"""The `cuda` device: runs emitted kernels on an NVIDIA GPU through the CUDA driver API.

Sources are compiled with NVRTC (cached on disk) for the device's arch under the device's
regime; the device shares the primary context torch uses.

Two ways in (emmy.runtime.device). `run` and `time` take numpy buffers (a bench, a check):
they live in driver allocations (cuMemAlloc), so those work with a CPU-only torch; they
are queued on one stream of our own and finished by polling, so a kernel that never ends
becomes a KernelLaunchError after `timeout` instead of a hang. `load` gives a
CudaExecutable for a compiled program: torch CUDA tensors bound in place, every launch's
arguments packed once, everything queued on torch's current stream (so emmy's kernels,
the fallbacks' torch ops and the caller's own work are ordered without a synchronisation),
and from the second call on the whole launch list replayed as one CUDA graph.
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from cuda.bindings import driver as cu

from emmy import dtypes
from emmy.backend.nvrtc import compile_cuda, nvrtc_version
from emmy.backend.regime import DEPLOYABLE_FLAGS, Regime, normalise_flags
from emmy.errors import KernelLaunchError, NoDeviceError
from emmy.identity import arch_of, slug
from emmy.runtime.device import (
    BufferArg,
    Device,
    Executable,
    HostCall,
    Launch,
    Step,
    Timing,
)

if TYPE_CHECKING:
    import torch

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_NOT_READY = cu.CUresult.CUDA_ERROR_NOT_READY
#: dynamic shared memory a kernel may use without opting in
_DEFAULT_SMEM_LIMIT = 48 * 1024
#: the storage types a kernel takes by value
_SCALAR_DTYPES = ("i32", "i64", "f32")
#: a timed window holds at least this many seconds of back-to-back passes: a kernel of a
#: few microseconds timed alone measures the events' own resolution and the host's delays
MIN_WINDOW_SECONDS = 1e-3
#: the most passes one timed window batches
MAX_BATCH = 100_000


def _error_text(err: cu.CUresult) -> str:
    try:
        status, text = cu.cuGetErrorString(err)
        described = text.decode() if status == _SUCCESS and text else ""
    except RuntimeError:  # no driver library to describe it
        described = ""
    return f"{err.name}: {described}" if described else err.name


def _check(result: tuple, what: str, error: type[Exception] = KernelLaunchError) -> Any:
    """Unwrap a cuda-bindings (status, *values) tuple, raising `error` on failure."""
    status, *values = result
    if status != _SUCCESS:
        raise error(f"{what} failed: {_error_text(status)}")
    return values[0] if len(values) == 1 else tuple(values)


class _DeviceArray:
    """Device memory as torch reads it without a copy (the CUDA array interface)."""

    def __init__(self, address: int, shape: tuple[int, ...], dtype: str) -> None:
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": np.dtype(dtypes.lookup(dtype).numpy).str,
            "data": (address, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }


def _init_driver() -> int:
    """cuInit and the device count; NoDeviceError when there is no driver or no device."""
    try:
        (status,) = cu.cuInit(0)
    except RuntimeError as e:  # cuda.pathfinder's DynamicLibNotFoundError: no libcuda.so
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NoDeviceError(f"no CUDA device: {reason}") from None
    if status != _SUCCESS:
        raise NoDeviceError(f"no CUDA device: {_error_text(status)}")
    return _check(cu.cuDeviceGetCount(), "cuDeviceGetCount", NoDeviceError)


def driver_cuda_version() -> tuple[int, int]:
    """The newest CUDA version the installed driver supports, e.g. (13, 0)."""
    version = _check(cu.cuDriverGetVersion(), "cuDriverGetVersion", NoDeviceError)
    return version // 1000, version % 1000 // 10


def check_driver(driver: tuple[int, int], compiler: str) -> None:
    """A one-line NoDeviceError when the driver is older than the CUDA of NVRTC (`compiler`
    "13.0"): it could not load the cubins NVRTC writes."""
    major, minor = (int(part) for part in compiler.split(".")[:2])
    if driver < (major, minor):
        raise NoDeviceError(
            f"the CUDA driver supports CUDA {driver[0]}.{driver[1]} but NVRTC is CUDA "
            f"{major}.{minor}: install a driver for CUDA {major}.{minor} or newer (580 or "
            f"later for 13.0), or an nvidia-cuda-nvrtc wheel of the driver's CUDA"
        )


def cuda_available() -> bool:
    """Whether a CUDA device can be used in this process."""
    try:
        return _init_driver() > 0
    except NoDeviceError:
        return False


def device_identities() -> list[str]:
    """The identity of every CUDA device this process sees, by ordinal; none without a
    driver or a device. No context is created."""
    try:
        count = _init_driver()
    except NoDeviceError:
        return []
    attr = cu.CUdevice_attribute
    identities = []
    for ordinal in range(count):
        dev = _check(cu.cuDeviceGet(ordinal), "cuDeviceGet", NoDeviceError)
        raw = _check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName", NoDeviceError)
        major, minor = (
            _check(cu.cuDeviceGetAttribute(a, dev), a.name, NoDeviceError)
            for a in (
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
            )
        )
        identities.append(slug(raw.split(b"\0")[0].decode().strip(), major, minor))
    return identities


class CudaDevice(Device):
    """One GPU, by ordinal. `flags` picks the regime kernels are compiled under."""

    def __init__(self, ordinal: int = 0, flags: str | Sequence[str] = DEPLOYABLE_FLAGS) -> None:
        count = _init_driver()
        if not 0 <= ordinal < count:
            raise NoDeviceError(f"no CUDA device: ordinal {ordinal}, but {count} device(s)")
        check_driver(driver_cuda_version(), nvrtc_version())
        self.ordinal = ordinal
        self.torch_device = f"cuda:{ordinal}"
        self._dev = _check(cu.cuDeviceGet(ordinal), "cuDeviceGet", NoDeviceError)
        raw = _check(cu.cuDeviceGetName(256, self._dev), "cuDeviceGetName", NoDeviceError)
        self.name: str = raw.split(b"\0")[0].decode().strip()
        attr = cu.CUdevice_attribute
        major = self._attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = self._attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        self.identity = slug(self.name, major, minor)
        self.arch = arch_of(self.identity)
        self.regime = Regime(normalise_flags(flags), self.arch)
        # the primary context is the one torch and other libraries share on this device
        self._ctx = _check(cu.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
        self._bind()
        self._stream = _check(
            cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate"
        )
        self._modules: dict[str, Any] = {}  # compile key -> CUmodule
        self._functions: dict[tuple[str, str], Any] = {}  # (key, kernel) -> CUfunction
        self._smem_opt_in: dict[tuple[str, str], int] = {}
        # read-only host arrays (a program's weights) keep one device copy until close()
        self._resident: dict[int, tuple[np.ndarray, Any, np.ndarray]] = {}
        self._closed = False

    def _attribute(self, attribute: cu.CUdevice_attribute) -> int:
        return _check(cu.cuDeviceGetAttribute(attribute, self._dev), attribute.name, NoDeviceError)

    def _bind(self) -> None:
        # a context is current per thread: bind it on every entry point
        _check(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")

    def close(self) -> None:
        """Unload modules and release the context; the device is unusable afterwards."""
        if self._closed:
            return
        self._closed = True
        self._bind()
        for module in self._modules.values():
            cu.cuModuleUnload(module)
        for _, pointer, _ in self._resident.values():
            cu.cuMemFree(pointer)
        self._resident.clear()
        cu.cuStreamDestroy(self._stream)
        cu.cuDevicePrimaryCtxRelease(self._dev)
        self._modules.clear()
        self._functions.clear()

    def __enter__(self) -> CudaDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- Device -----------------------------------------------------------------------------

    @property
    def compiler(self) -> str:
        return f"nvrtc {nvrtc_version()}"

    def prepare(self, source: str) -> None:
        compile_cuda(source, self.arch, self.regime.flags)

    def run(
        self,
        source: str,
        launches: Sequence[Step],
        buffers: dict[str, np.ndarray],
        *,
        schedule: str = "forward",
        timeout: float = 120.0,
    ) -> None:
        """Run the launches in order. `schedule` is for the emulator: the GPU orders blocks."""
        functions = self._prepare(source, launches)
        deadline = _time.monotonic() + timeout
        with self._device_buffers(buffers, deadline) as pointers:
            for launch, function in zip(launches, functions, strict=True):
                self._step(function, launch, pointers)
            self._wait(deadline, f"{len(launches)} launch(es)")
            for name, array in buffers.items():
                self._copy_back(array, pointers[name])

    def time(
        self,
        source: str,
        launches: Sequence[Step],
        buffers: dict[str, np.ndarray],
        *,
        warmup: int = 2,
        repetitions: int = 10,
        timeout: float = 600.0,
    ) -> Timing:
        """GPU seconds of one pass of the launch list, per repetition: CUDA events around
        `batch` passes queued back to back with their arguments packed beforehand, `batch`
        chosen so that a window lasts MIN_WINDOW_SECONDS or more. Buffers are not copied
        back."""
        functions = self._prepare(source, launches)
        deadline = _time.monotonic() + timeout
        flags = cu.CUevent_flags.CU_EVENT_DEFAULT.value
        events = [
            (_check(cu.cuEventCreate(flags), "cuEventCreate"),
             _check(cu.cuEventCreate(flags), "cuEventCreate"))
            for _ in range(repetitions + 1)
        ]  # fmt: skip

        def window(start: Any, end: Any, passes: int) -> None:
            _check(cu.cuEventRecord(start, self._stream), "cuEventRecord")
            for _ in range(passes):
                issue()
            _check(cu.cuEventRecord(end, self._stream), "cuEventRecord")

        def seconds(start: Any, end: Any) -> float:
            return _check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime") / 1000.0

        try:
            with self._device_buffers(buffers, deadline) as pointers:
                issue = self._issuer(functions, launches, pointers)
                for _ in range(warmup):
                    issue()
                window(*events[-1], 1)
                self._wait(deadline, "a probe of the launch list")
                one = max(seconds(*events[-1]), 1e-7)
                batch = max(1, min(MAX_BATCH, math.ceil(MIN_WINDOW_SECONDS / one)))
                for start, end in events[:-1]:
                    window(start, end, batch)
                self._wait(deadline, f"{repetitions} timed window(s) of {batch} pass(es)")
            return Timing(tuple(seconds(s, e) / batch for s, e in events[:-1]), batch)
        finally:
            for pair in events:
                for event in pair:
                    cu.cuEventDestroy(event)

    def _issuer(self, functions: list[Any], steps: Sequence[Step], pointers: dict[str, int]) -> Any:
        """A function that queues one pass of `steps` on our stream, every launch's
        arguments packed now, once."""
        queued: list[Any] = []
        for function, step in zip(functions, steps, strict=True):
            if isinstance(step, HostCall):
                queued.append(lambda call=step: self._host_call(call, pointers))
                continue
            packed = PackedLaunch(function, step)
            packed.bind(pointers)
            queued.append(lambda packed=packed: packed.issue(self._stream))

        def issue() -> None:
            for each in queued:
                each()

        return issue

    # -- programs on torch tensors ----------------------------------------------------------

    def _torch(self) -> Any:
        # torch is loaded by a program's run alone: a bench on numpy buffers never needs it
        import torch

        if not torch.cuda.is_available():
            raise NoDeviceError(
                "a program on the cuda device runs on torch tensors: this torch has no CUDA"
            )
        return torch

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        torch = self._torch()
        tensor = torch.empty(tuple(shape), dtype=dtype, device=self.torch_device)
        self.counters.allocations += 1
        self.counters.allocated_bytes += tensor.numel() * tensor.element_size()
        return tensor

    def upload(self, tensor: torch.Tensor) -> torch.Tensor:
        """A device copy of a host tensor, queued on torch's current stream of this device:
        the stream the program's kernels read it on."""
        torch = self._torch()
        with torch.cuda.device(self.ordinal):
            copy = tensor.to(self.torch_device)
        self.counters.uploads += 1
        return copy

    def synchronize(self) -> None:
        self._torch().cuda.synchronize(self.ordinal)

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
    ) -> CudaExecutable:
        """`steps` loaded on torch CUDA tensors. `fixed` are the slots whose tensors are the
        same at every call (weights, the arena), `mutated` the inputs the steps write (a
        KV cache), `outputs` the slots bound to each call's fresh outputs; the others are
        inputs the steps only read."""
        self._torch()
        functions = self._prepare(source, steps)
        roles = _Roles(frozenset(fixed), frozenset(mutated), frozenset(outputs))
        return CudaExecutable(self, functions, steps, slots, cuda_graphs, roles)

    # -- internals ----------------------------------------------------------------------------

    def _prepare(self, source: str, launches: Sequence[Step]) -> list[Any]:
        """Compile (or recall) and load the source; the CUfunction of each launch (None for
        a host call)."""
        if self._closed:
            raise KernelLaunchError("the CUDA device was closed")
        self._bind()
        if all(isinstance(launch, HostCall) for launch in launches):
            return [None] * len(launches)
        compiled = compile_cuda(source, self.arch, self.regime.flags)
        key = compiled.key
        if key not in self._modules:
            self._modules[key] = _check(cu.cuModuleLoadData(compiled.cubin), "cuModuleLoadData")
        functions = []
        for launch in launches:
            if isinstance(launch, HostCall):
                functions.append(None)
                continue
            if (key, launch.kernel) not in self._functions:
                status, function = cu.cuModuleGetFunction(
                    self._modules[key], launch.kernel.encode()
                )
                if status != _SUCCESS:
                    raise KernelLaunchError(
                        f"kernel {launch.kernel!r} is not in the compiled source"
                        f" ({_error_text(status)})"
                    )
                self._functions[key, launch.kernel] = function
            function = self._functions[key, launch.kernel]
            if launch.smem > _DEFAULT_SMEM_LIMIT:
                if self._smem_opt_in.get((key, launch.kernel), 0) < launch.smem:
                    _check(
                        cu.cuFuncSetAttribute(
                            function,
                            cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            launch.smem,
                        ),
                        f"opting {launch.kernel!r} in to {launch.smem} bytes of shared memory",
                    )
                    self._smem_opt_in[key, launch.kernel] = launch.smem
            functions.append(function)
        return functions

    @contextmanager
    def _device_buffers(
        self, buffers: dict[str, np.ndarray], deadline: float
    ) -> Iterator[dict[str, int]]:
        """Device copies of the buffers, freed afterwards unless the GPU may still use them."""
        pointers: dict[str, Any] = {}
        staged = []  # host copies must outlive their (asynchronous) transfers
        finished = False
        try:
            for name, array in buffers.items():
                if not array.flags.writeable and array.nbytes:
                    pointers[name] = self._resident_copy(name, array)
                    continue
                # cuMemAlloc refuses 0 bytes; a 1-byte allocation keeps empty buffers uniform
                pointers[name] = _check(cu.cuMemAlloc(max(array.nbytes, 1)), "cuMemAlloc")
                if array.nbytes:
                    host = np.ascontiguousarray(array)
                    staged.append(host)
                    _check(
                        cu.cuMemcpyHtoDAsync(
                            pointers[name], host.ctypes.data, host.nbytes, self._stream
                        ),
                        f"copying buffer {name!r} to the device",
                    )
            yield {name: int(pointer) for name, pointer in pointers.items()}
            finished = True
        finally:
            if not finished:
                # earlier launches may still be queued: let them drain before freeing
                with suppress(KernelLaunchError):
                    self._wait(deadline, "cleanup")
            if finished or self._idle():
                resident = {int(pointer) for _, pointer, _ in self._resident.values()}
                for pointer in pointers.values():
                    if int(pointer) not in resident:
                        cu.cuMemFree(pointer)
            # else a kernel is still running (timeout): freeing would block on it, so leak

    def _resident_copy(self, name: str, array: np.ndarray) -> Any:
        """The device copy of a read-only array, made on its first run and kept: a
        program's weights cross to the GPU once, not at every call."""
        cached = self._resident.get(id(array))
        if cached is not None and cached[0] is array:
            return cached[1]
        pointer = _check(cu.cuMemAlloc(array.nbytes), "cuMemAlloc")
        host = np.ascontiguousarray(array)
        # on the stream the kernels read it on, so no launch can start before it landed
        _check(
            cu.cuMemcpyHtoDAsync(pointer, host.ctypes.data, host.nbytes, self._stream),
            f"copying buffer {name!r} to the device",
        )
        self.counters.uploads += 1
        # the array (and the contiguous copy the transfer reads) kept alive: its id stays its
        self._resident[id(array)] = (array, pointer, host)
        return pointer

    def _idle(self) -> bool:
        (status,) = cu.cuStreamQuery(self._stream)
        return status != _NOT_READY

    def _step(self, function: Any, step: Step, pointers: dict[str, int]) -> None:
        if isinstance(step, HostCall):
            self._host_call(step, pointers)
            return
        packed = PackedLaunch(function, step)
        packed.bind(pointers)
        packed.issue(self._stream)

    def _host_call(self, call: HostCall, pointers: dict[str, int]) -> None:
        """The vendor library through torch (cuBLAS), on tensors over our buffers and
        queued on our stream, in the primary context torch shares."""
        # torch is loaded by a program's first host call alone: kernels never need it
        import torch

        from emmy.runtime.vendor import run_host_call

        if not torch.cuda.is_available():
            raise KernelLaunchError(f"{call.kernel} runs through torch: this torch has no CUDA")

        def view(arg: BufferArg, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
            if arg.name not in pointers:
                raise KernelLaunchError(f"{call.kernel} names unknown buffer {arg.name!r}")
            address = int(pointers[arg.name]) + arg.offset
            tensor = torch.as_tensor(_DeviceArray(address, shape, dtype), device="cuda")
            return tensor.view(dtypes.torch_dtype(dtype))

        with (
            torch.cuda.device(self.ordinal),
            torch.cuda.stream(torch.cuda.ExternalStream(int(self._stream))),
        ):
            run_host_call(call, view, "cuda")

    def _wait(self, deadline: float, what: str) -> None:
        pause = 1e-5
        while True:
            (status,) = cu.cuStreamQuery(self._stream)
            if status == _SUCCESS:
                return
            if status != _NOT_READY:
                raise KernelLaunchError(
                    f"{what} failed on the GPU: {_error_text(status)}"
                    " (a fault in a kernel leaves this process's CUDA context unusable)"
                )
            if _time.monotonic() > deadline:
                raise KernelLaunchError(f"{what} did not finish in time; the GPU is still busy")
            _time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def _copy_back(self, array: np.ndarray, pointer: int) -> None:
        if not array.nbytes or not array.flags.writeable:
            return  # a read-only array can only have been an input
        direct = array.flags.c_contiguous
        host = array if direct else np.empty_like(array, order="C")
        _check(cu.cuMemcpyDtoH(host.ctypes.data, pointer, host.nbytes), "copying a buffer back")
        if not direct:
            array[...] = host


class PackedLaunch:
    """One launch's kernel parameters packed once: each argument's value in a cell of its
    own, and the array of the cells' addresses that cuLaunchKernel reads (it copies the
    values at launch, so a cell may change before the next). Rebinding a buffer rewrites
    its cells alone."""

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
            elif arg.dtype in _SCALAR_DTYPES:
                cell = np.array([arg.value], dtype=dtypes.lookup(arg.dtype).numpy)
            else:
                raise KernelLaunchError(f"unknown scalar dtype {arg.dtype!r}")
            self.cells.append(cell)
        self.params = np.array([cell.ctypes.data for cell in self.cells], dtype=np.uint64)
        self.address = self.params.ctypes.data if self.cells else 0

    def buffers(self) -> set[str]:
        return {name for _, name, _ in self.pointer_cells}

    def bind(self, pointers: Mapping[str, int]) -> None:
        for cell, name, offset in self.pointer_cells:
            if name not in pointers:
                raise KernelLaunchError(
                    f"launch of {self.launch.kernel!r} names unknown buffer {name!r}"
                )
            cell[0] = pointers[name] + offset

    def issue(self, stream: Any) -> None:
        launch = self.launch
        (status,) = cu.cuLaunchKernel(
            self.function, *launch.grid, *launch.block, launch.smem, stream, self.address, 0
        )
        if status != _SUCCESS:
            raise KernelLaunchError(
                f"launch of {launch.kernel!r} (grid {launch.grid}, block {launch.block},"
                f" smem {launch.smem}) failed: {_error_text(status)}"
            )


@dataclass(frozen=True)
class _Roles:
    fixed: frozenset[str]
    mutated: frozenset[str]
    outputs: frozenset[str]


#: graphs an executable keeps, one per set of addresses of the tensors it reads in place
#: (a KV cache per concurrent generation); the oldest goes first
MAX_GRAPHS = 8


class CudaExecutable(Executable):
    """A launch list on torch CUDA tensors. The first call issues the launches one by one
    (and warms up what torch loads lazily: cuBLAS's handle, a fallback's kernels); the
    second captures them as one CUDA graph, and every later call replays it.

    A graph reads and writes fixed addresses. It is captured in place on the tensors the
    caller passes again: the fixed slots (weights, the arena), the mutated inputs (a KV
    cache) and every read input whose tensor was the same at the first two calls (an
    AOTAutograd graph's parameters). Every other slot gets a static buffer, as torch's
    CUDA-graph trees keep them: an input is copied into its buffer before the replay, an
    output out of its buffer after. A call whose in-place tensors moved replays the graph
    captured on those (captured then, at most MAX_GRAPHS kept); a read input that moved
    is copied from then on. A launch list that cannot be captured (a fallback op that
    synchronises) runs launch by launch."""

    def __init__(
        self,
        device: CudaDevice,
        functions: list[Any],
        steps: Sequence[Step],
        slots: Sequence[str],
        cuda_graphs: bool,
        roles: _Roles,
    ) -> None:
        self.device = device
        self.slots = tuple(slots)
        self.roles = roles
        self.cuda_graphs = cuda_graphs
        self.steps: list[PackedLaunch | HostCall] = [
            step if isinstance(step, HostCall) else PackedLaunch(function, step)
            for function, step in zip(functions, steps, strict=True)
        ]
        self.bound: dict[str, int] = {}
        self.previous: dict[str, int] = {}
        #: the slots graphs are captured on in place, chosen at the first capture
        self.in_place: frozenset[str] | None = None
        self.graphs: dict[tuple[int, ...], _Graph] = {}
        #: why the launch list runs launch by launch, once capture failed
        self.uncapturable: str | None = None

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        pointers = {name: tensors[name].data_ptr() for name in self.slots}
        first = not self.previous
        previous, self.previous = self.previous, pointers
        if not self.cuda_graphs or self.uncapturable or first:
            self._issue(tensors, pointers)
            return
        if self.in_place is None:
            read = set(self.slots) - self.roles.outputs - self.roles.mutated - self.roles.fixed
            again = {name for name in read if pointers[name] == previous[name]}
            self.in_place = self.roles.fixed | self.roles.mutated | frozenset(again)
        graph = self.graphs.get(self._key(pointers))
        if graph is None:
            graph = self._recapture(tensors, pointers)
            if graph is None:
                self._issue(tensors, pointers)
                return
        graph.replay(tensors)
        self.device.counters.replays += 1

    def _key(self, pointers: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(pointers[name] for name in sorted(self.in_place or ()))

    def _recapture(
        self, tensors: Mapping[str, torch.Tensor], pointers: Mapping[str, int]
    ) -> _Graph | None:
        """A graph for this call's in-place tensors; read inputs that moved since the last
        capture are copied from now on (their graphs would differ at every call)."""
        in_place = self.in_place or frozenset()
        if self.graphs:
            last = next(reversed(self.graphs.values()))
            pinned = self.roles.fixed | self.roles.mutated
            moved = {
                name for name in in_place - pinned if last.static[name].data_ptr() != pointers[name]
            }
            if moved:
                self.in_place = in_place - moved
                self.graphs.clear()
        while len(self.graphs) >= MAX_GRAPHS:
            self.graphs.pop(next(iter(self.graphs)))
        graph = self._capture(tensors)
        if graph is not None:
            self.graphs[self._key(pointers)] = graph
        return graph

    def _issue(self, tensors: Mapping[str, torch.Tensor], pointers: Mapping[str, int]) -> None:
        """Queues every step on torch's current stream of the device; `pointers` are the
        tensors' addresses."""
        torch = self.device._torch()
        stream = torch.cuda.current_stream(self.device.ordinal).cuda_stream
        for step in self.steps:
            if isinstance(step, HostCall):
                _torch_host_call(step, tensors)
                continue
            if any(self.bound.get(name) != pointers[name] for name in step.buffers()):
                step.bind(pointers)
            step.issue(stream)
            self.device.counters.launches += 1
        self.bound = dict(pointers)

    def _capture(self, tensors: Mapping[str, torch.Tensor]) -> _Graph | None:
        torch = self.device._torch()
        in_place = self.in_place or frozenset()
        static: dict[str, torch.Tensor] = {}
        for name in self.slots:
            given = tensors[name]
            if name in in_place:
                static[name] = given
                continue
            static[name] = torch.empty_like(given)
            self.device.counters.allocations += 1
            if name not in self.roles.outputs:
                static[name].copy_(given)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.device(self.device.ordinal), torch.cuda.graph(graph):
                self._issue(static, {name: static[name].data_ptr() for name in self.slots})
        except RuntimeError as error:  # a fallback op that cannot be captured
            self.uncapturable = str(error).splitlines()[0] if str(error) else type(error).__name__
            return None
        copied = [name for name in self.slots if name not in in_place]
        copied_in = [name for name in copied if name not in self.roles.outputs]
        copied_out = [name for name in copied if name in self.roles.outputs]
        return _Graph(graph, static, copied_in, copied_out)


class _Graph:
    """One captured graph and the static buffers it reads and writes."""

    def __init__(
        self,
        graph: Any,
        static: dict[str, torch.Tensor],
        copied_in: list[str],
        copied_out: list[str],
    ) -> None:
        self.graph = graph
        self.static = static
        self.copied_in = copied_in
        self.copied_out = copied_out

    def replay(self, tensors: Mapping[str, torch.Tensor]) -> None:
        for name in self.copied_in:
            if tensors[name].data_ptr() != self.static[name].data_ptr():
                self.static[name].copy_(tensors[name])
        self.graph.replay()
        for name in self.copied_out:
            tensors[name].copy_(self.static[name])


def _torch_host_call(call: HostCall, tensors: Mapping[str, torch.Tensor]) -> None:
    """A host call on the bound tensors themselves, on torch's current stream."""
    # the vendor library runs through torch, loaded by a program's first host call alone
    from emmy.runtime.vendor import run_host_call, tensor_view

    def view(arg: BufferArg, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
        if arg.name not in tensors:
            raise KernelLaunchError(f"{call.kernel} names unknown buffer {arg.name!r}")
        return tensor_view(tensors[arg.name], arg, shape, dtype)

    run_host_call(call, view, "cuda")
