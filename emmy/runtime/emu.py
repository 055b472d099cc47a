"""The host emulator device `emu`: the emitted CUDA source, run on CPU threads.

The kernel source is compiled by g++ against emmy_device_emu.h (via emmy_device.cuh with
EMMY_EMU defined) into a shared object. Launches run in a child process, the runner built
from emu_src/emu_runner.cpp, so that a crashing or hanging kernel cannot take the caller down.
Each CUDA thread is a user-space fiber; each worker OS thread runs whole blocks. Buffers
travel through files in /dev/shm, and results are copied back into the caller's arrays.

Both the kernels and the runner are cached under cache_dir()/emu/, keyed by a hash of every
input (source, flags, headers, g++ version) and written atomically, so a second run of the same
source never calls g++ and concurrent processes may share the cache.
"""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from emmy.backend.regime import DEPLOYABLE_FLAGS, host_compiler_flags, regime_for
from emmy.errors import KernelCompileError, KernelLaunchError, NoDeviceError
from emmy.identity import EMU
from emmy.paths import INCLUDE_DIR, cache_dir
from emmy.runtime.device import BufferArg, Device, HostCall, Launch, ScalarArg, Step, Timing

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


def compile_emu(
    source: str, *, sanitize: str | None = None, extra_flags: Sequence[str] = ()
) -> Path:
    """Compiles kernel source (which includes "emmy_device.cuh") to a cached shared object;
    `extra_flags` (a regime's g++ meaning) come last, so an -O level there wins."""
    flags = [*KERNEL_FLAGS, *_sanitize_flags(sanitize), *extra_flags]
    out = _cache_path("kernels", [source.encode(), "\0".join(flags).encode()], ".so")
    if not out.exists():
        with tempfile.TemporaryDirectory(prefix="emmy-emu-src-") as tmp:
            src = Path(tmp) / "kernels.cu"
            src.write_text(source)
            _build("kernels", out, [*flags, "-I", str(INCLUDE_DIR), "-x", "c++", str(src)])
    return out


def build_runner(sanitize: str | None = None) -> Path:
    """The cached runner executable (built once per runner source, headers and g++)."""
    flags = [*RUNNER_FLAGS, *_sanitize_flags(sanitize)]
    out = _cache_path("runner", [RUNNER_SOURCE.read_bytes(), "\0".join(flags).encode()], "")
    if not out.exists():
        _build("runner", out, [*flags, "-I", str(INCLUDE_DIR), str(RUNNER_SOURCE), "-ldl"])
    return out


def _schedule_line(schedule: str) -> str:
    name, _, seed = schedule.partition(":")
    if name in ("forward", "reverse") and not seed:
        return f"schedule {name} 0"
    if name == "shuffle" and (not seed or seed.isdigit()):
        return f"schedule shuffle {int(seed or 0)}"
    raise ValueError(f"schedule must be forward, reverse or shuffle[:SEED], not {schedule!r}")


def _arg_line(arg: BufferArg | ScalarArg, index: dict[str, int], kernel: str) -> str:
    if isinstance(arg, BufferArg):
        if arg.name not in index:
            raise KernelLaunchError(f"launch of {kernel} uses unknown buffer {arg.name!r}")
        return f"arg buf {index[arg.name]} {int(arg.offset)}"
    if arg.dtype in ("i32", "i64"):
        return f"arg {arg.dtype} {int(arg.value)}"
    if arg.dtype == "f32":
        (bits,) = struct.unpack("<I", struct.pack("<f", float(arg.value)))
        return f"arg f32 {bits:x}"
    raise KernelLaunchError(f"launch of {kernel}: unknown scalar dtype {arg.dtype!r}")


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


def _host_call(call: HostCall, buffers: dict[str, np.ndarray]) -> None:
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


class EmuDevice(Device):
    """Runs emitted kernels on the CPU, one fiber per CUDA thread.

    workers: OS threads running blocks in parallel (default: the CPUs this process may use).
    time() runs on TIMING_WORKERS alone: the emulator's timings are those of one machine
    whatever the host's core count, and what else the host runs on its other cores does not
    reorder them (two workers on a shared 2-core host: the best of 13 configs measured again
    scored 0.94 against its own first measurement; one worker: 0.98). The repetitions are
    spread over TIMING_PROCESSES runner processes: each process lays out its stacks and
    buffers anew (address-space randomisation), and one layout can make a kernel 10 to 30 %
    faster or slower for as long as the process lives, which more repetitions in one process
    never average out.
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

    @property
    def compiler(self) -> str:
        return "g++ " + _gxx_version().splitlines()[0].split()[-1]

    def prepare(self, source: str) -> None:
        compile_emu(source, sanitize=self.sanitize, extra_flags=self.host_flags)

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
        (read-only arrays are treated as inputs). Host calls run here, on the arrays, between
        the runs of the kernels before and after them."""
        for segment in _segments(launches):
            if isinstance(segment, HostCall):
                _host_call(segment, buffers)
            else:
                self._execute(source, segment, buffers, schedule, timeout)

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
        """Seconds per repetition of the whole launch list, measured inside the runners, each
        warmed up `warmup` times (host calls, which run here, are timed alone)."""
        if any(isinstance(step, HostCall) for step in launches):
            return Timing(tuple(_time_host_calls(launches, buffers, warmup, repetitions)))
        processes = max(1, min(TIMING_PROCESSES, repetitions))
        times = []
        for process in range(processes):
            timing = (warmup, (repetitions + process) // processes)
            out = self._execute(
                source, launches, buffers, "forward", timeout, timing, TIMING_WORKERS
            )
            times += [
                float(line.split()[1]) for line in out.splitlines() if line.startswith("time ")
            ]
        return Timing(tuple(times))

    def _execute(
        self,
        source: str,
        launches: Sequence[Launch],
        buffers: dict[str, np.ndarray],
        schedule: str,
        timeout: float,
        timing: tuple[int, int] | None = None,
        workers: int | None = None,
    ) -> str:
        lines = [_schedule_line(schedule)]
        so = compile_emu(source, sanitize=self.sanitize, extra_flags=self.host_flags)
        runner = build_runner(self.sanitize)
        names = list(buffers)
        index = {name: i for i, name in enumerate(names)}
        kernels = ", ".join(dict.fromkeys(launch.kernel for launch in launches)) or "nothing"
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        with tempfile.TemporaryDirectory(prefix="emmy-emu-", dir=shm) as tmp:
            paths = [Path(tmp) / f"{i}.bin" for i in range(len(names))]
            lines += [
                f"so {so}",
                f"workers {workers or self.workers}",
                f"smem_limit {self.smem_limit}",
            ]
            if timing is not None:
                lines.append(f"time {timing[0]} {timing[1]}")
            for name, path in zip(names, paths, strict=True):
                np.ascontiguousarray(buffers[name]).tofile(path)
                lines.append(f"buffer {buffers[name].nbytes} {path}")
            for launch in launches:
                if not launch.kernel.isidentifier():
                    raise KernelLaunchError(f"bad kernel name {launch.kernel!r}")
                geometry = " ".join(str(int(v)) for v in (*launch.grid, *launch.block))
                lines.append(f"launch {launch.kernel} {geometry} {int(launch.smem)}")
                lines += [_arg_line(arg, index, launch.kernel) for arg in launch.args]
            plan = Path(tmp) / "plan"
            plan.write_text("\n".join(lines) + "\n")
            env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0"}
            try:
                proc = subprocess.run(
                    [str(runner), str(plan)],
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    env=env,
                    check=False,
                )
            except subprocess.TimeoutExpired as e:
                raise KernelLaunchError(
                    f"emulated launch of {kernels} timed out after {timeout:g}s"
                ) from e
            if proc.returncode != 0:
                raise KernelLaunchError(_failure(proc, kernels))
            for name, path in zip(names, paths, strict=True):
                array = buffers[name]
                if array.flags.writeable and array.size:
                    array[...] = np.fromfile(path, dtype=array.dtype).reshape(array.shape)
        return proc.stdout


def _failure(proc: subprocess.CompletedProcess[str], kernels: str) -> str:
    """One message from a failed runner: its error line, else the sanitizer's or signal's."""
    lines = proc.stderr.splitlines()
    errors = [ln[len("error: ") :] for ln in lines if ln.startswith("error: ")]
    sanitizer = [ln for ln in lines if "Sanitizer" in ln or "runtime error" in ln]
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        detail = errors[0] if errors else sanitizer[0] if sanitizer else f"running {kernels}"
        return f"the emulator died of {name}: {detail}"
    if errors:
        return errors[0]
    if sanitizer:
        return f"sanitizer report while running {kernels}: {sanitizer[0]}"
    tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
    return f"emulated launch of {kernels} failed with status {proc.returncode}: {tail[0]}"
