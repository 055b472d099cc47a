"""The host emulator device `emu`: the emitted CUDA source, run on CPU threads.

The kernel source is compiled by g++ against emmy_device_emu.h (via emmy_device.cuh with
EMMY_EMU defined) into a shared object. Launches run in a child process that stays up, the
runner built from emu_src/emu_runner.cpp (its client: emu_serve.py), so that a crashing or
hanging kernel cannot take the caller down. Each CUDA thread is a user-space fiber; each worker
OS thread runs whole blocks. Device memory is shared memory mapped by both processes
(emu_memory.py): the kernels read and write the caller's tensors in place.

Both the kernels and the runner are cached under cache_dir()/emu/, keyed by a hash of every
input (source, flags, headers, g++ version) and written atomically, so a second run of the same
source never calls g++ and concurrent processes may share the cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from emmy import dtypes
from emmy.backend.regime import DEPLOYABLE_FLAGS, host_compiler_flags, regime_for
from emmy.errors import KernelCompileError, KernelLaunchError, NoDeviceError
from emmy.identity import EMU
from emmy.paths import INCLUDE_DIR, cache_dir
from emmy.runtime.device import BufferArg, Device, Executable, HostCall, Launch, Step, Timing
from emmy.runtime.emu_memory import EmuMemory
from emmy.runtime.emu_serve import Program, Runner, schedule_words

if TYPE_CHECKING:
    import torch

RUNNER_SOURCE = Path(__file__).resolve().parent / "emu_src" / "emu_runner.cpp"
# -fno-semantic-interposition lets each EMMY_EMU_ENTRY inline its kernel instead of a PLT call;
# -fstack-clash-protection probes big frames page by page, so that a kernel with too much local
# memory hits its fiber's guard page instead of silently writing over a neighbouring stack.
KERNEL_FLAGS = (
    "-DEMMY_EMU",
    "-O2",
    "-std=c++17",
    "-ffp-contract=off",
    "-fPIC",
    "-shared",
    "-fno-semantic-interposition",
    "-fstack-clash-protection",
)
RUNNER_FLAGS = ("-DEMMY_EMU", "-O2", "-std=c++17", "-rdynamic", "-pthread")
#: the largest dynamic shared memory per block of an H100/H200
DEFAULT_SMEM_LIMIT = 227 * 1024
# Sanitized code needs bigger fiber stacks; header and runner must agree on the size.
_SANITIZE_FLAGS = {
    "address": ("-fsanitize=address", "-fno-omit-frame-pointer", "-DEMMY_EMU_STACK_BITS=18"),
    "undefined": ("-fsanitize=undefined", "-fno-sanitize-recover=all", "-DEMMY_EMU_STACK_BITS=18"),
}


def _sanitize_flags(sanitize: str | None) -> tuple[str, ...]:
    if sanitize is None:
        return ()
    if sanitize not in _SANITIZE_FLAGS:
        raise ValueError(f"sanitize must be one of {sorted(_SANITIZE_FLAGS)}, not {sanitize!r}")
    return _SANITIZE_FLAGS[sanitize]


def _run_gxx(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Every g++ invocation goes through here (tests count the calls)."""
    try:
        return subprocess.run(["g++", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise NoDeviceError("the emu device needs g++, which is not installed") from e


@functools.cache
def _gxx_version() -> str:
    return _run_gxx(["--version"]).stdout


def _headers_digest() -> bytes:
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.iterdir()):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.digest()


def _cache_path(kind: str, parts: Sequence[bytes], suffix: str) -> Path:
    """Where the output built from `parts` (plus headers and g++ version) is cached."""
    h = hashlib.sha256(kind.encode())
    for part in (*parts, _headers_digest(), _gxx_version().encode()):
        h.update(len(part).to_bytes(8, "little") + part)
    out_dir = cache_dir() / "emu"
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / f"{h.hexdigest()}{suffix}"


def _build(kind: str, out: Path, args: list[str]) -> None:
    """Runs `g++ args -o out`, through a temporary file so readers never see a partial one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    os.close(fd)
    try:
        proc = _run_gxx([*args, "-o", tmp])
        if proc.returncode != 0:
            raise KernelCompileError(f"g++ failed to build the emulated {kind}:\n{proc.stderr}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _built(kind: str, text: bytes, flags: Sequence[str], suffix: str, build) -> Path:
    """The cached output of building `text` with `flags`, `build(out)` making it if missing.
    Hashing the headers for the cache key costs a millisecond or two, more than a run of small
    kernels: an output this process has found once is looked up by its inputs afterwards."""
    known = (kind, text, tuple(flags), os.environ.get("EMMY_CACHE_DIR", ""))
    out = _BUILT.get(known)
    if out is not None and out.exists():
        return out
    out = _cache_path(kind, [text, "\0".join(flags).encode()], suffix)
    if not out.exists():
        build(out)
    _BUILT[known] = out
    return out


#: _built's outputs in this process, by kind, input, flags and $EMMY_CACHE_DIR (cache_dir())
_BUILT: dict[tuple[str, bytes, tuple[str, ...], str], Path] = {}


def compile_emu(
    source: str, *, sanitize: str | None = None, extra_flags: Sequence[str] = ()
) -> Path:
    """Compiles kernel source (which includes "emmy_device.cuh") to a cached shared object;
    `extra_flags` (a regime's g++ meaning) come last, so an -O level there wins."""
    flags = [*KERNEL_FLAGS, *_sanitize_flags(sanitize), *extra_flags]

    def build(out: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="emmy-emu-src-") as tmp:
            src = Path(tmp) / "kernels.cu"
            src.write_text(source)
            _build("kernels", out, [*flags, "-I", str(INCLUDE_DIR), "-x", "c++", str(src)])

    return _built("kernels", source.encode(), flags, ".so", build)


def build_runner(sanitize: str | None = None) -> Path:
    """The cached runner executable (built once per runner source, headers and g++)."""
    flags = [*RUNNER_FLAGS, *_sanitize_flags(sanitize)]
    args = [*flags, "-I", str(INCLUDE_DIR), str(RUNNER_SOURCE), "-ldl"]
    return _built(
        "runner", RUNNER_SOURCE.read_bytes(), flags, "", lambda out: _build("runner", out, args)
    )


def _segments(steps: Sequence[Step]) -> list[HostCall | list[Launch]]:
    """The steps as runs of consecutive kernel launches, and the host calls between them."""
    segments: list[HostCall | list[Launch]] = []
    for step in steps:
        if isinstance(step, HostCall):
            segments.append(step)
        elif segments and isinstance(segments[-1], list):
            segments[-1].append(step)
        else:
            segments.append([step])
    return segments


def _host_call(call: HostCall, buffers: Mapping[str, np.ndarray]) -> None:
    # the vendor library runs through torch, loaded by a program's first host call alone
    from emmy.runtime.vendor import numpy_view, run_host_call

    def view(arg: BufferArg, shape: tuple[int, ...], dtype: str):
        if arg.name not in buffers:
            raise KernelLaunchError(f"{call.kernel} uses unknown buffer {arg.name!r}")
        return numpy_view(buffers[arg.name], arg, shape, dtype)

    run_host_call(call, view, "cpu")


def _time_host_calls(
    steps: Sequence[Step], buffers: dict[str, np.ndarray], warmup: int, repetitions: int
) -> list[float]:
    if not all(isinstance(step, HostCall) for step in steps):
        raise KernelLaunchError("the emulator times host calls alone, not among kernels")
    for _ in range(warmup):
        for step in steps:
            _host_call(step, buffers)  # type: ignore[arg-type]
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        for step in steps:
            _host_call(step, buffers)  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
    return times


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


#: worker threads that run a timed launch (see EmuDevice)
TIMING_WORKERS = 1
#: runner processes a timing's repetitions are spread over (see EmuDevice)
TIMING_PROCESSES = 3
#: programs run() keeps defined, the least recently used one beyond is dropped
CACHED_PROGRAMS = 64


class EmuDevice(Device):
    """Runs emitted kernels on the CPU, one fiber per CUDA thread.

    Device memory is shared memory (emu_memory.EmuMemory): `empty` gives CPU torch tensors
    that the runner reads and writes in place. The kernels run in one runner process that
    stays up (emu_serve.Runner); a kernel that crashes or hangs kills it, and the next call
    starts a fresh one. `counters` counts allocations, copies in and out (uploads,
    host_copies), launches, runner starts and requests.

    workers: OS threads running blocks in parallel (default: the CPUs this process may use).
    time() runs on TIMING_WORKERS alone: the emulator's timings are those of one machine
    whatever the host's core count, and what else the host runs on its other cores does not
    reorder them (two workers on a shared 2-core host: the best of 13 configs measured again
    scored 0.94 against its own first measurement; one worker: 0.98). The repetitions are
    spread over TIMING_PROCESSES fresh runner processes: each process lays out its stacks
    anew (address-space randomisation), and one layout can make a kernel 10 to 30 % faster or
    slower for as long as the process lives, which more repetitions in one process never
    average out.
    sanitize: None, "address" or "undefined": builds kernels and runner with that g++
    sanitizer (best effort; the runner annotates fiber switches for AddressSanitizer), and
    sanitizer reports become KernelLaunchErrors.
    smem_limit: the most dynamic shared memory a launch may ask for, in bytes.
    flags: the regime, in NVRTC's spelling; the emulator honours `-Xnvvm -opt=N` (as g++'s
    -ON) and -D macros, and refuses the rest.

    run() takes schedule="forward" (threads resumed in thread order after each barrier),
    "reverse" or "shuffle:SEED" (a seeded permutation per block), so that kernels whose result
    depends on thread order (races) show it.
    """

    identity = EMU

    def __init__(
        self,
        workers: int | None = None,
        *,
        sanitize: str | None = None,
        smem_limit: int = DEFAULT_SMEM_LIMIT,
        flags: str | Sequence[str] = DEPLOYABLE_FLAGS,
    ) -> None:
        _sanitize_flags(sanitize)
        self.regime = regime_for(EMU, flags)
        self.host_flags = host_compiler_flags(self.regime)
        self.workers = workers if workers is not None else _default_workers()
        self.sanitize = sanitize
        self.smem_limit = smem_limit
        self._memory: EmuMemory | None = None
        self._runner: Runner | None = None
        self._programs: OrderedDict[tuple, Program] = OrderedDict()

    @property
    def compiler(self) -> str:
        return "g++ " + _gxx_version().splitlines()[0].split()[-1]

    @property
    def memory(self) -> EmuMemory:
        """This device's memory (made on first use)."""
        if self._memory is None:
            self._memory = EmuMemory(self.counters)
        return self._memory

    def runner(self) -> Runner:
        """The client of this device's runner process (which starts on its first request)."""
        if self._runner is None:
            self._runner = Runner(build_runner(self.sanitize), self.memory, self.counters)
        return self._runner

    def close(self) -> None:
        """Stops the runner (a later call starts another)."""
        if self._runner is not None:
            self._runner.close()

    def prepare(self, source: str) -> None:
        self._compile(source)

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised CPU torch tensor of torch `dtype` in device memory: a program run
        on it reads and writes it in place."""
        return self.memory.tensor(tuple(shape), dtype)

    def empty_bytes(self, nbytes: int) -> torch.Tensor:
        """`nbytes` of device memory, as a uint8 CPU torch tensor."""
        # torch is heavy, and only a program run on torch tensors allocates them
        import torch

        return self.memory.tensor((nbytes,), torch.uint8)

    def output(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A call's output in device memory, from the region cache (as torch's caching
        allocator on a GPU: not counted as an allocation)."""
        return self.memory.tensor(tuple(shape), dtype, counted=False)

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
    ) -> EmuExecutable:
        """The steps as an executable over torch tensors bound to `slots` at each call (every
        buffer of the steps is a slot; roles as Device.load says, `cuda_graphs` ignored).
        A staged tensor is copied back when the steps may write it: fixed, mutated and
        outputs. The runner defines its programs here, once."""
        return EmuExecutable(self, source, steps, slots, {*fixed, *mutated, *outputs})

    def run(
        self,
        source: str,
        launches: Sequence[Step],
        buffers: dict[str, np.ndarray],
        *,
        schedule: str = "forward",
        timeout: float = 120.0,
    ) -> None:
        """Runs the launches; writeable arrays in `buffers` receive the results in place
        (read-only arrays are treated as inputs). The arrays are copied into device memory
        and back; host calls run here, between the runs of kernels, on device memory."""
        schedule_words(schedule)
        segments = _segments(launches)
        if all(isinstance(segment, HostCall) for segment in segments):
            for segment in segments:
                _host_call(segment, buffers)  # type: ignore[arg-type]
            return
        staged, slots = self._stage(buffers)
        for segment in segments:
            if isinstance(segment, HostCall):
                _host_call(segment, staged)
                continue
            program = self._program(source, segment, list(buffers))
            self.runner().run(
                program,
                slots,
                workers=self.workers,
                schedule=schedule,
                smem_limit=self.smem_limit,
                timeout=timeout,
            )
        self._unstage(buffers, staged)

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
        """Seconds per repetition of the whole launch list, measured inside fresh runners,
        each warmed up `warmup` times (host calls, which run here, are timed alone)."""
        if any(isinstance(step, HostCall) for step in launches):
            return Timing(tuple(_time_host_calls(launches, buffers, warmup, repetitions)))
        staged, slots = self._stage(buffers)
        program = Program(self._compile(source), launches, list(buffers))
        times: list[float] = []
        processes = max(1, min(TIMING_PROCESSES, repetitions))
        for process in range(processes):
            runner = Runner(build_runner(self.sanitize), self.memory, self.counters)
            try:
                times += runner.time(
                    program,
                    slots,
                    warmup=warmup,
                    repetitions=(repetitions + process) // processes,
                    workers=TIMING_WORKERS,
                    smem_limit=self.smem_limit,
                    timeout=timeout,
                )
            finally:
                runner.close()
        self._unstage(buffers, staged)
        return Timing(tuple(times))

    def _compile(self, source: str) -> Path:
        return compile_emu(source, sanitize=self.sanitize, extra_flags=self.host_flags)

    def _program(self, source: str, launches: Sequence[Launch], slots: Sequence[str]) -> Program:
        """The program of these launches over these slots, defined once while cached."""
        so = self._compile(source)
        key = (so, tuple(launches), tuple(slots))
        program = self._programs.get(key)
        if program is not None:
            self._programs.move_to_end(key)
            return program
        program = self._programs[key] = Program(so, launches, slots)
        if len(self._programs) > CACHED_PROGRAMS:
            _, old = self._programs.popitem(last=False)
            self.runner().forget(old)
        return program

    def _stage(
        self, buffers: Mapping[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[tuple[int, int]]]:
        """Copies of the arrays in device memory, and their (region, offset)s."""
        staged, slots = {}, []
        for name, array in buffers.items():
            copy, region, offset = self.memory.array(array.shape, array.dtype)
            copy[...] = array
            self.counters.uploads += 1
            staged[name] = copy
            slots.append((region, offset))
        return staged, slots

    def _unstage(self, buffers: Mapping[str, np.ndarray], staged: Mapping[str, np.ndarray]) -> None:
        for name, array in buffers.items():
            if array.flags.writeable and array.size:
                array[...] = staged[name]
                self.counters.host_copies += 1


class EmuExecutable(Executable):
    """Steps loaded on an EmuDevice, run on torch CPU tensors bound to its slots by name.

    A tensor in the device's memory (EmuDevice.empty, output) is used in place; any other is
    staged: copied into a device buffer (kept for the next call) before (an upload), and
    back after (a host copy) when it is one of `written`. Each run of consecutive launches is one request to the runner; host
    calls run here between them, on the tensors. `last_seconds`: the runner's own seconds
    for the kernels of the last call.
    """

    def __init__(
        self,
        device: EmuDevice,
        source: str,
        steps: Sequence[Step],
        slots: Sequence[str],
        written: Collection[str],
    ) -> None:
        self.device = device
        self.slots = tuple(slots)
        known = set(self.slots)
        for step in steps:
            for arg in step.args:
                if isinstance(arg, BufferArg) and arg.name not in known:
                    raise KernelLaunchError(
                        f"{step.kernel} uses buffer {arg.name!r}, which is not a slot"
                    )
        self.written = set(written)
        so = device._compile(source)
        self._segments = [
            segment if isinstance(segment, HostCall) else Program(so, segment, self.slots)
            for segment in _segments(steps)
        ]
        self._staging: dict[str, torch.Tensor] = {}
        self.last_seconds = 0.0
        runner = device.runner()
        for segment in self._segments:
            if isinstance(segment, Program):
                runner.define(segment)

    def __call__(
        self,
        tensors: Mapping[str, torch.Tensor],
        *,
        schedule: str = "forward",
        timeout: float = 120.0,
    ) -> None:
        """Runs the steps on `tensors` (one per slot), in place."""
        bound, slots, staged = self._bind(tensors)
        runner = self.device.runner()
        seconds = 0.0
        for segment in self._segments:
            if isinstance(segment, HostCall):
                _host_call_on_tensors(segment, bound)
                continue
            seconds += runner.run(
                segment,
                slots,
                workers=self.device.workers,
                schedule=schedule,
                smem_limit=self.device.smem_limit,
                timeout=timeout,
            )
        for name in staged:
            if name in self.written:
                tensors[name].copy_(bound[name])
                self.device.counters.host_copies += 1
        self.last_seconds = seconds

    def time(
        self, tensors: Mapping[str, torch.Tensor], *, warmup: int = 2, repetitions: int = 10
    ) -> Timing:
        """Seconds per call: measured in the runner (on TIMING_WORKERS) when the steps are
        kernels alone, else around whole calls here."""
        if len(self._segments) == 1 and isinstance(self._segments[0], Program):
            _, slots, _ = self._bind(tensors)
            return Timing(
                tuple(
                    self.device.runner().time(
                        self._segments[0],
                        slots,
                        warmup=warmup,
                        repetitions=repetitions,
                        workers=TIMING_WORKERS,
                        smem_limit=self.device.smem_limit,
                        timeout=600.0,
                    )
                )
            )
        for _ in range(warmup):
            self(tensors)
        times = []
        for _ in range(repetitions):
            start = time.perf_counter()
            self(tensors)
            times.append(time.perf_counter() - start)
        return Timing(tuple(times))

    def _bind(
        self, tensors: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], list[tuple[int, int]], list[str]]:
        """Per slot: the tensor in device memory, its (region, offset); the staged slots."""
        memory = self.device.memory
        bound, slots, staged = {}, [], []
        for name in self.slots:
            if name not in tensors:
                raise KernelLaunchError(f"no tensor for slot {name!r}")
            tensor = tensors[name]
            if tensor.device.type != "cpu":
                raise KernelLaunchError(
                    f"slot {name!r}: the emulator runs on CPU tensors, not {tensor.device}"
                )
            place = memory.locate(tensor)
            if place is None:
                copy = self._staging_for(name, tensor)
                copy.copy_(tensor)
                self.device.counters.uploads += 1
                staged.append(name)
                tensor = copy
                place = memory.locate(copy)
            bound[name] = tensor
            slots.append(place)
        return bound, slots, staged

    def _staging_for(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        copy = self._staging.get(name)
        if copy is None or copy.shape != tensor.shape or copy.dtype != tensor.dtype:
            copy = self._staging[name] = self.device.empty(tensor.shape, tensor.dtype)
        return copy


def _host_call_on_tensors(call: HostCall, tensors: Mapping[str, torch.Tensor]) -> None:
    # the vendor library runs through torch, loaded by a program's first host call alone
    import torch

    from emmy.runtime.vendor import run_host_call

    def view(arg: BufferArg, shape: tuple[int, ...], dtype: str) -> torch.Tensor:
        flat = tensors[arg.name].reshape(-1).view(torch.uint8)
        count = int(np.prod(shape, dtype=np.int64))
        size = dtypes.lookup(dtype).bytes
        raw = flat[arg.offset : arg.offset + count * size]
        if raw.numel() != count * size:
            raise KernelLaunchError(f"host call reads past the end of buffer {arg.name!r}")
        return raw.view(dtypes.torch_dtype(dtype)).reshape(shape)

    run_host_call(call, view, "cpu")
