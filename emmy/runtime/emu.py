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
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from emmy.base.device_records import BufferArg, DeviceCounters, Launch
from emmy.base.errors import KernelCompileError, KernelLaunchError, NoDeviceError
from emmy.base.identity import EMU
from emmy.base.paths import INCLUDE_DIR, cache_dir
from emmy.base.regime import DEPLOYABLE_FLAGS, host_compiler_flags, regime_for
from emmy.runtime.device import Device
from emmy.runtime.driver import Driver, PackedLaunch
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


#: implicit runs of the queue (an event, a host call, the end of a call) may take this long
QUEUE_TIMEOUT = 600.0


@dataclass(frozen=True)
class _Queued:
    """A launch as queued: its kernel object, and its arguments as they were at launch,
    pointers as (region, byte offset) of the device memory they point into."""

    so: Path
    launch: Launch
    pointers: tuple[tuple[int, int] | None, ...]


@dataclass
class _Event:
    """A point on the emulated stream: the device seconds run before it."""

    at: float = 0.0


class EmuGraph:
    """A captured graph: runs of launches, each a runner program bound to the device memory
    its arguments pointed at during capture, and the host calls between them. A replay runs
    those very arguments, as a CUDA graph does: a tensor that moved after capture is not
    where the graph reads or writes."""

    def __init__(self, items: list) -> None:
        self.items = items


#: an item of the queue as it runs: a runner program and its binding, a replayed graph, or
#: a host call
_Resolved = tuple[Program, list[tuple[int, int]]] | EmuGraph | Callable[[], object]


class EmuDriver(Driver):
    """The emulator below the runtime: device memory is shared memory (emu_memory.EmuMemory),
    CPU torch tensors that the runner reads and writes in place; launches are queued and run
    as one runner request per run of launches, when something needs their results (a host
    call, an event, a synchronisation, the end of a call). A kernel that crashes or hangs
    kills the runner and faults the context: every later call fails with that fault until
    `reset` starts a fresh runner, as a GPU's process must be replaced."""

    identity = EMU
    torch_device = "cpu"

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
        self.counters = DeviceCounters()
        self._memory: EmuMemory | None = None
        self._runner: Runner | None = None
        self._programs: OrderedDict[tuple, Program] = OrderedDict()
        self._queue: list[_Queued | EmuGraph] = []
        self._captured: list[_Queued | EmuGraph | Callable[[], object]] | None = None
        self._clock = 0.0
        self._schedule = "forward"
        self._run_workers: int | None = None
        self._fault: str | None = None

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

    def compile(self, source: str) -> Path:
        """The kernel object of `source` for this device's sanitizer and regime (cached)."""
        return compile_emu(source, sanitize=self.sanitize, extra_flags=self.host_flags)

    # -- memory ----------------------------------------------------------------------------

    def empty(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return self.memory.tensor(tuple(shape), dtype)

    def output(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return self.memory.tensor(tuple(shape), dtype, counted=False)

    def owns(self, tensor: torch.Tensor) -> bool:
        if tensor.device.type != "cpu":
            return False
        nbytes = tensor.numel() * tensor.element_size()
        return self.memory.resolve(tensor.data_ptr(), nbytes) is not None

    # -- modules ---------------------------------------------------------------------------

    def prepare(self, source: str) -> None:
        self.compile(source)

    def load_module(self, source: str) -> Path:
        return self.compile(source)

    def function(self, module: Path, launch: Launch) -> Path:
        if not launch.kernel.isidentifier():
            raise KernelLaunchError(f"bad kernel name {launch.kernel!r}")
        return module

    # -- the stream ------------------------------------------------------------------------

    def launch(self, packed: PackedLaunch) -> None:
        self.check_fault()
        pointers: list[tuple[int, int] | None] = []
        for arg, value in zip(packed.launch.args, packed.values(), strict=True):
            if not isinstance(arg, BufferArg):
                pointers.append(None)
                continue
            place = self.memory.resolve(int(value), 0)
            if place is None:
                raise KernelLaunchError(
                    f"launch of {packed.launch.kernel!r}: buffer {arg.name!r} is not device memory"
                )
            pointers.append(place)
        queued = _Queued(packed.function, packed.launch, tuple(pointers))
        (self._captured if self._captured is not None else self._queue).append(queued)

    def host_call(self, call: Callable[[], object]) -> None:
        if self._captured is not None:
            self._captured.append(call)
            return
        self._flush(QUEUE_TIMEOUT)
        self._timed_host_call(call)

    def _timed_host_call(self, call: Callable[[], object]) -> None:
        # the emulator's events time host calls as the wall time they take
        start = time.perf_counter()
        call()
        self._clock += time.perf_counter() - start

    def synchronize(self, timeout: float = 120.0, what: str = "the launches") -> None:
        self.check_fault()
        self._flush(timeout)

    def end_call(self, timeout: float = QUEUE_TIMEOUT) -> None:
        self._flush(timeout)

    @contextmanager
    def order(self, schedule: str) -> Iterator[None]:
        schedule_words(schedule)
        previous, self._schedule = self._schedule, schedule
        try:
            yield
        finally:
            self._schedule = previous

    def _flush(self, timeout: float) -> None:
        """Runs the queue: one runner request per run of launches of one kernel object, and
        the graphs replayed between them."""
        queue, self._queue = self._queue, []
        for item in self._resolved(queue):
            self._run_item(item, timeout)

    def _resolved(self, items: list) -> list:
        """The items with each run of queued launches as its runner programs and bindings;
        the others (host calls, replayed graphs) as they are."""
        resolved: list = []
        run: list[_Queued] = []
        for item in [*items, None]:
            if isinstance(item, _Queued):
                run.append(item)
                continue
            resolved.extend(self._programs_of(run))
            run = []
            if item is not None:
                resolved.append(item)
        return resolved

    def _run_item(self, item: _Resolved, timeout: float) -> None:
        if isinstance(item, tuple):
            program, binding = item
            self._run(program, binding, timeout)
        elif isinstance(item, EmuGraph):
            for each in item.items:
                self._run_item(each, timeout)
        else:
            self._timed_host_call(item)

    def _programs_of(self, queue: list[_Queued]) -> Iterator[tuple[Program, list[tuple[int, int]]]]:
        start = 0
        while start < len(queue):
            end = start + 1
            while end < len(queue) and queue[end].so == queue[start].so:
                end += 1
            yield self._program(queue[start:end])
            start = end

    def _program(self, run: list[_Queued]) -> tuple[Program, list[tuple[int, int]]]:
        """The runner program of a run of launches (defined once while cached), its slots
        the regions the arguments point into, in order of first use, and their binding."""
        regions: dict[int, int] = {}
        launches = []
        for queued in run:
            args = []
            for arg, place in zip(queued.launch.args, queued.pointers, strict=True):
                if place is None:
                    args.append(arg)
                    continue
                region, offset = place
                slot = regions.setdefault(region, len(regions))
                args.append(BufferArg(f"s{slot}", offset))
            launches.append(
                Launch(
                    queued.launch.kernel, queued.launch.grid, queued.launch.block,
                    queued.launch.smem, tuple(args),
                )
            )  # fmt: skip
        slots = tuple(f"s{slot}" for slot in range(len(regions)))
        key = (run[0].so, tuple(launches), slots)
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = Program(run[0].so, launches, slots)
            if len(self._programs) > CACHED_PROGRAMS:
                _, old = self._programs.popitem(last=False)
                self.runner().forget(old)
        else:
            self._programs.move_to_end(key)
        return program, [(region, 0) for region in regions]

    def _run(self, program: Program, binding: list[tuple[int, int]], timeout: float) -> None:
        self.check_fault()
        runner = self.runner()
        try:
            self._clock += runner.run(
                program,
                binding,
                workers=self._run_workers or self.workers,
                schedule=self._schedule,
                smem_limit=self.smem_limit,
                timeout=timeout,
            )
        except KernelLaunchError as error:
            if not runner.alive:  # a crash or a hang: the context is gone, as on a GPU
                self._fault = str(error)
            raise

    # -- events and graphs -----------------------------------------------------------------

    def event(self) -> _Event:
        return _Event()

    def record(self, event: _Event) -> None:
        self._flush(QUEUE_TIMEOUT)
        event.at = self._clock

    def elapsed(self, start: _Event, end: _Event) -> float:
        return end.at - start.at

    @contextmanager
    def capture(self) -> Iterator[EmuGraph]:
        self._flush(QUEUE_TIMEOUT)
        graph = EmuGraph([])
        self._captured = captured = []
        try:
            yield graph
        finally:
            self._captured = None
        graph.items.extend(self._resolved(captured))

    def replay(self, graph: EmuGraph) -> None:
        self.check_fault()
        (self._captured if self._captured is not None else self._queue).append(graph)

    # -- faults and contexts ---------------------------------------------------------------

    def fault(self) -> str | None:
        return self._fault

    def reset(self) -> None:
        """A fresh context: the queue dropped, the fault cleared, a fresh runner."""
        self._queue.clear()
        self._fault = None
        if self._runner is not None:
            self._runner.close()

    def timing_contexts(self, repetitions: int) -> Iterator[tuple[int, AbstractContextManager]]:
        """The repetitions spread over TIMING_PROCESSES fresh runners on TIMING_WORKERS (see
        EmuDevice)."""
        processes = max(1, min(TIMING_PROCESSES, repetitions))
        for process in range(processes):
            yield (repetitions + process) // processes, self._fresh_runner()

    @contextmanager
    def _fresh_runner(self) -> Iterator[None]:
        self._flush(QUEUE_TIMEOUT)
        previous = self._runner
        self._runner = Runner(build_runner(self.sanitize), self.memory, self.counters)
        self._run_workers = TIMING_WORKERS
        try:
            yield
        finally:
            self._runner.close()
            self._runner, self._run_workers = previous, None

    def close(self) -> None:
        """Stops the runner (a later call starts another)."""
        self._queue.clear()
        if self._runner is not None:
            self._runner.close()


class EmuDevice(Device):
    """Runs emitted kernels on the CPU, one fiber per CUDA thread: the runtime over an
    EmuDriver.

    Device memory is shared memory (emu_memory.EmuMemory): `empty` gives CPU torch tensors
    that the runner reads and writes in place. The kernels run in one runner process that
    stays up (emu_serve.Runner); a kernel that crashes or hangs kills it and faults the
    device until `reset`. `counters` counts allocations, copies in and out (uploads,
    host_copies), launches, runner starts and requests.

    workers: OS threads running blocks in parallel (default: the CPUs this process may use).
    time() runs on TIMING_WORKERS alone: the emulator's timings are those of one machine
    whatever the host's core count, and what else the host runs on its other cores does not
    reorder them (two workers on a shared 2-core host: the best of 13 configs measured again
    scored 0.94 against its own first measurement; one worker: 0.98). The repetitions are
    spread over TIMING_PROCESSES fresh runner processes: each process lays out its stacks
    anew (address-space randomisation), and one layout can make a kernel 10 to 30 % faster or
    slower for as the process lives, which more repetitions in one process never
    average out.
    sanitize: None, "address" or "undefined": builds kernels and runner with that g++
    sanitizer (best effort; the runner annotates fiber switches for AddressSanitizer), and
    sanitizer reports become KernelLaunchErrors.
    smem_limit: the most dynamic shared memory a launch may ask for, in bytes.
    flags: the regime, in NVRTC's spelling; the emulator honours `-Xnvvm -opt=N` (as g++'s
    -ON) and -D macros, and refuses the rest.

    run() takes schedule="forward" (threads resumed in thread order after each barrier),
    "reverse" or "shuffle:SEED" (a seeded permutation per block), so that kernels whose result
    depends on thread order (races) show it; "+eager" after any of them performs each cp.async
    at issue rather than at the wait that retires it, so that a stage refilled while another
    warp still reads it shows too.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        sanitize: str | None = None,
        smem_limit: int = DEFAULT_SMEM_LIMIT,
        flags: str | Sequence[str] = DEPLOYABLE_FLAGS,
    ) -> None:
        self.emu = EmuDriver(workers, sanitize=sanitize, smem_limit=smem_limit, flags=flags)
        super().__init__(self.emu)

    @property
    def workers(self) -> int:
        return self.emu.workers

    @property
    def sanitize(self) -> str | None:
        return self.emu.sanitize

    @property
    def smem_limit(self) -> int:
        return self.emu.smem_limit

    @property
    def host_flags(self) -> tuple[str, ...]:
        return self.emu.host_flags

    @property
    def memory(self) -> EmuMemory:
        return self.emu.memory

    def runner(self) -> Runner:
        return self.emu.runner()

    def _compile(self, source: str) -> Path:
        return self.emu.compile(source)
