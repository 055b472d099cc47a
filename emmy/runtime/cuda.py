"""The CUDA driver: the thin layer over cuda-bindings and torch.cuda below emmy's runtime
(emmy.runtime.driver says what a driver holds; emmy.runtime.device is the runtime above it).

Sources are compiled with NVRTC (cached on disk) for the GPU's arch under the device's regime
and loaded with the driver API into the primary context torch shares. Launches are queued on
torch's current stream, so emmy's kernels, the fallbacks' torch ops and the caller's own work
are ordered without a synchronisation; graphs are torch's CUDA graphs, events torch's. A
synchronisation polls the stream, so a kernel that never ends becomes a KernelLaunchError
after its timeout instead of a hang. A fault, seen by the driver or in torch's wording, is
sticky: the process's context is unusable afterwards, and every later call says so.
"""

from __future__ import annotations

import threading
import time as _time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import cuda.bindings.driver as cu

from emmy.backend.nvrtc import compile_cuda, nvrtc_version
from emmy.base.device_records import DeviceCounters, Launch
from emmy.base.errors import KernelLaunchError, NoDeviceError
from emmy.base.identity import arch_of, slug
from emmy.base.regime import DEPLOYABLE_FLAGS, Regime, normalise_flags
from emmy.runtime.device import Device
from emmy.runtime.driver import Driver, PackedLaunch
from emmy.runtime.faults import is_fault

if TYPE_CHECKING:
    import torch

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_NOT_READY = cu.CUresult.CUDA_ERROR_NOT_READY
#: dynamic shared memory a kernel may use without opting in
_DEFAULT_SMEM_LIMIT = 48 * 1024


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


def _torch() -> Any:
    # torch's CUDA is loaded when a launch list runs: compiling for a GPU never needs it
    import torch

    if not torch.cuda.is_available():
        raise NoDeviceError("the cuda device runs on torch CUDA tensors: this torch has no CUDA")
    return torch


class CudaDriver(Driver):
    """One GPU, by ordinal. `flags` picks the regime kernels are compiled under."""

    def __init__(self, ordinal: int = 0, flags: str | Sequence[str] = DEPLOYABLE_FLAGS) -> None:
        count = _init_driver()
        if not 0 <= ordinal < count:
            raise NoDeviceError(f"no CUDA device: ordinal {ordinal}, but {count} device(s)")
        check_driver(driver_cuda_version(), nvrtc_version())
        self.ordinal = ordinal
        self.torch_device = f"cuda:{ordinal}"
        self.counters = DeviceCounters()
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
        #: the threads this driver made its context current in
        self._threads = threading.local()
        self._bind()
        self._modules: dict[str, Any] = {}  # compile key -> CUmodule
        self._functions: dict[tuple[int, str], Any] = {}  # (module, kernel) -> CUfunction
        self._smem_opt_in: dict[tuple[int, str], int] = {}
        self._fault: str | None = None
        self._closed = False

    def _attribute(self, attribute: cu.CUdevice_attribute) -> int:
        return _check(cu.cuDeviceGetAttribute(attribute, self._dev), attribute.name, NoDeviceError)

    def _bind(self) -> None:
        # a context is current per thread: bind it where a thread may enter
        _check(cu.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        self._threads.bound = True

    def _bound_here(self) -> None:
        """Makes the context current in this thread, once per thread: a launch may come from
        a thread that never loaded a module (autograd's, a server's worker)."""
        if not getattr(self._threads, "bound", False):
            self._bind()

    @property
    def compiler(self) -> str:
        return f"nvrtc {nvrtc_version()}"

    # -- memory ----------------------------------------------------------------------------

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        tensor = _torch().empty(tuple(shape), dtype=dtype, device=self.torch_device)
        self.counters.allocations += 1
        self.counters.allocated_bytes += tensor.numel() * tensor.element_size()
        return tensor

    def output(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return _torch().empty(tuple(shape), dtype=dtype, device=self.torch_device)

    def owns(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type == "cuda" and tensor.device.index == self.ordinal

    # -- modules ---------------------------------------------------------------------------

    def prepare(self, source: str) -> None:
        compile_cuda(source, self.arch, self.regime.flags)

    def load_module(self, source: str) -> Any:
        if self._closed:
            raise KernelLaunchError("the CUDA device was closed")
        self._bound_here()
        compiled = compile_cuda(source, self.arch, self.regime.flags)
        if compiled.key not in self._modules:
            self._modules[compiled.key] = _check(
                cu.cuModuleLoadData(compiled.cubin), "cuModuleLoadData"
            )
        return self._modules[compiled.key]

    def function(self, module: Any, launch: Launch) -> Any:
        self._bound_here()
        key = (int(module), launch.kernel)
        if key not in self._functions:
            status, function = cu.cuModuleGetFunction(module, launch.kernel.encode())
            if status != _SUCCESS:
                raise KernelLaunchError(
                    f"kernel {launch.kernel!r} is not in the compiled source ({_error_text(status)})"
                )
            self._functions[key] = function
        function = self._functions[key]
        if launch.smem > _DEFAULT_SMEM_LIMIT and self._smem_opt_in.get(key, 0) < launch.smem:
            _check(
                cu.cuFuncSetAttribute(
                    function,
                    cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    launch.smem,
                ),
                f"opting {launch.kernel!r} in to {launch.smem} bytes of shared memory",
            )
            self._smem_opt_in[key] = launch.smem
        return function

    # -- the stream ------------------------------------------------------------------------

    def _stream(self) -> int:
        return _torch().cuda.current_stream(self.ordinal).cuda_stream

    def launch(self, packed: PackedLaunch) -> None:
        self._bound_here()
        launch = packed.launch
        (status,) = cu.cuLaunchKernel(
            packed.function, *launch.grid, *launch.block, launch.smem, self._stream(),
            packed.address, 0,
        )  # fmt: skip
        if status == _SUCCESS:
            return
        message = (
            f"launch of {launch.kernel!r} (grid {launch.grid}, block {launch.block},"
            f" smem {launch.smem}) failed: {_error_text(status)}"
        )
        self._note(message)
        raise KernelLaunchError(message)

    def host_call(self, call: Callable[[], object]) -> None:
        torch = _torch()
        try:
            with torch.cuda.device(self.ordinal):
                call()
        except RuntimeError as error:
            # a fault of an earlier kernel surfaces in the first torch op after it
            if not is_fault(str(error)):
                raise
            message = str(error).splitlines()[0]
            self._note(message)
            raise KernelLaunchError(message) from None

    def synchronize(self, timeout: float = 120.0, what: str = "the launches") -> None:
        self.check_fault()
        self._bound_here()
        stream = self._stream()
        deadline = _time.monotonic() + timeout
        pause = 1e-5
        while True:
            (status,) = cu.cuStreamQuery(stream)
            if status == _SUCCESS:
                return
            if status != _NOT_READY:
                message = (
                    f"{what} failed on the GPU: {_error_text(status)}"
                    " (a fault in a kernel leaves this process's CUDA context unusable)"
                )
                self._note(message)
                raise KernelLaunchError(message)
            if _time.monotonic() > deadline:
                message = f"{what} did not finish in time; the GPU is still busy"
                self._fault = message
                raise KernelLaunchError(message)
            _time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def end_call(self, timeout: float = 600.0) -> None:
        """The caller's torch work is queued on the same stream: nothing to do."""

    def order(self, schedule: str) -> AbstractContextManager[None]:
        return nullcontext()  # the GPU orders its threads itself

    # -- events and graphs -----------------------------------------------------------------

    def event(self) -> Any:
        return _torch().cuda.Event(enable_timing=True)

    def record(self, event: Any) -> None:
        event.record(_torch().cuda.current_stream(self.ordinal))

    def elapsed(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1000.0

    @contextmanager
    def capture(self) -> Iterator[Any]:
        torch = _torch()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.ordinal), torch.cuda.graph(graph):
            yield graph

    def replay(self, graph: Any) -> None:
        graph.replay()

    # -- faults and contexts ---------------------------------------------------------------

    def _note(self, message: str) -> None:
        if is_fault(message):
            self._fault = message

    def fault(self) -> str | None:
        return self._fault

    def reset(self) -> None:
        if self._fault is not None:
            raise KernelLaunchError(
                "a faulted CUDA context cannot be replaced in its process: run the work in a"
                f" device worker (emmy.measure.bench_worker) and replace that ({self._fault})"
            )

    def timing_contexts(self, repetitions: int) -> Iterator[tuple[int, AbstractContextManager]]:
        yield repetitions, nullcontext()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._bind()
        for module in self._modules.values():
            cu.cuModuleUnload(module)
        self._modules.clear()
        self._functions.clear()
        cu.cuDevicePrimaryCtxRelease(self._dev)


class CudaDevice(Device):
    """One GPU, by ordinal: the runtime over a CudaDriver. `flags` picks the regime."""

    def __init__(self, ordinal: int = 0, flags: str | Sequence[str] = DEPLOYABLE_FLAGS) -> None:
        driver = CudaDriver(ordinal, flags)
        super().__init__(driver)
        self.ordinal = ordinal
        self.name = driver.name
        self.arch = driver.arch

    def __enter__(self) -> CudaDevice:
        return self
