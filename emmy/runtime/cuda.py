"""The `cuda` device: runs emitted kernels on an NVIDIA GPU through the CUDA driver API.

Sources are compiled with NVRTC (cached on disk) for the device's arch under the device's
regime. Buffers live in driver allocations (cuMemAlloc) rather than torch tensors, so the
device works with a CPU-only torch; it shares the primary context torch would use.
Everything is queued on one stream of our own and finished by polling, so a kernel that
never ends becomes a KernelLaunchError after `timeout` instead of a hang.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np
from cuda.bindings import driver as cu

from emmy import dtypes
from emmy.backend.nvrtc import compile_cuda, nvrtc_version
from emmy.backend.regime import DEPLOYABLE_FLAGS, Regime, normalise_flags
from emmy.errors import KernelLaunchError, NoDeviceError
from emmy.identity import arch_of, slug
from emmy.runtime.device import BufferArg, Device, HostCall, Launch, ScalarArg, Step, Timing

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_NOT_READY = cu.CUresult.CUDA_ERROR_NOT_READY
#: dynamic shared memory a kernel may use without opting in
_DEFAULT_SMEM_LIMIT = 48 * 1024
#: the storage types a kernel takes by value
_SCALAR_DTYPES = ("i32", "i64", "f32")


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


def cuda_available() -> bool:
    """Whether a CUDA device can be used in this process."""
    try:
        return _init_driver() > 0
    except NoDeviceError:
        return False


class CudaDevice(Device):
    """One GPU, by ordinal. `flags` picks the regime kernels are compiled under."""

    def __init__(self, ordinal: int = 0, flags: str | Sequence[str] = DEPLOYABLE_FLAGS) -> None:
        count = _init_driver()
        if not 0 <= ordinal < count:
            raise NoDeviceError(f"no CUDA device: ordinal {ordinal}, but {count} device(s)")
        self.ordinal = ordinal
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
        self._resident: dict[int, tuple[np.ndarray, int]] = {}
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
        for _, pointer in self._resident.values():
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
        launches: Sequence[Launch],
        buffers: dict[str, np.ndarray],
        *,
        warmup: int = 2,
        repetitions: int = 10,
        timeout: float = 600.0,
    ) -> Timing:
        """GPU seconds of each repetition, from CUDA events; buffers are not copied back."""
        functions = self._prepare(source, launches)
        deadline = _time.monotonic() + timeout
        flags = cu.CUevent_flags.CU_EVENT_DEFAULT.value
        events = [
            (_check(cu.cuEventCreate(flags), "cuEventCreate"),
             _check(cu.cuEventCreate(flags), "cuEventCreate"))
            for _ in range(repetitions)
        ]  # fmt: skip
        try:
            with self._device_buffers(buffers, deadline) as pointers:
                for _ in range(warmup):
                    for launch, function in zip(launches, functions, strict=True):
                        self._step(function, launch, pointers)
                for start, end in events:
                    _check(cu.cuEventRecord(start, self._stream), "cuEventRecord")
                    for launch, function in zip(launches, functions, strict=True):
                        self._step(function, launch, pointers)
                    _check(cu.cuEventRecord(end, self._stream), "cuEventRecord")
                self._wait(deadline, f"{warmup + repetitions} timed repetition(s)")
            return Timing(
                tuple(
                    _check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime") / 1000.0
                    for start, end in events
                )
            )
        finally:
            for pair in events:
                for event in pair:
                    cu.cuEventDestroy(event)

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
                resident = {int(pointer) for _, pointer in self._resident.values()}
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
        _check(
            cu.cuMemcpyHtoD(pointer, host.ctypes.data, host.nbytes),
            f"copying buffer {name!r} to the device",
        )
        self._resident[id(array)] = (array, pointer)  # the array kept alive: its id stays its
        return pointer

    def _idle(self) -> bool:
        (status,) = cu.cuStreamQuery(self._stream)
        return status != _NOT_READY

    def _step(self, function: Any, step: Step, pointers: dict[str, int]) -> None:
        if isinstance(step, HostCall):
            self._host_call(step, pointers)
        else:
            self._launch(function, step, pointers)

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

    def _launch(self, function: Any, launch: Launch, pointers: dict[str, int]) -> None:
        values = []
        for arg in launch.args:
            if isinstance(arg, BufferArg):
                if arg.name not in pointers:
                    raise KernelLaunchError(
                        f"launch of {launch.kernel!r} names unknown buffer {arg.name!r}"
                    )
                values.append(np.array([pointers[arg.name] + arg.offset], dtype=np.uint64))
            elif isinstance(arg, ScalarArg):
                if arg.dtype not in _SCALAR_DTYPES:
                    raise KernelLaunchError(f"unknown scalar dtype {arg.dtype!r}")
                values.append(np.array([arg.value], dtype=dtypes.lookup(arg.dtype).numpy))
        # kernelParams: an array of pointers to each argument's value, copied at launch
        params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
        (status,) = cu.cuLaunchKernel(
            function,
            *launch.grid,
            *launch.block,
            launch.smem,
            self._stream,
            params.ctypes.data if values else 0,
            0,
        )
        if status != _SUCCESS:
            raise KernelLaunchError(
                f"launch of {launch.kernel!r} (grid {launch.grid}, block {launch.block},"
                f" smem {launch.smem}) failed: {_error_text(status)}"
            )

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
