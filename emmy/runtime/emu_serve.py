"""The client of the emulator's runner process (`emu_runner --serve`, protocol at the top of
emu_src/emu_runner.cpp): it keeps one runner up, maps device memory, loads kernel objects and
defines programs in it once each, and runs a program in one request.

A runner is a crash boundary: a kernel that crashes, deadlocks or hangs kills it (the client
kills a hung one), the caller gets a KernelLaunchError naming the kernel, block and thread,
and the next request starts a fresh runner, which is given again, as each request needs them,
the regions, kernel objects and programs the dead one held.
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from emmy.base.errors import KernelLaunchError
from emmy.runtime.device import BufferArg, DeviceCounters, Launch, ScalarArg
from emmy.runtime.emu_memory import EmuMemory

#: kernel objects a runner keeps loaded; the least recently used one beyond is unloaded
LOADED_OBJECTS = 32
#: seconds a request that runs no kernel may take (mapping, loading, defining)
SETUP_TIMEOUT = 60.0

_program_ids = itertools.count()


def _arg_word(arg: BufferArg | ScalarArg, index: dict[str, int], kernel: str) -> str:
    if isinstance(arg, BufferArg):
        if arg.name not in index:
            raise KernelLaunchError(f"launch of {kernel} uses unknown buffer {arg.name!r}")
        return f"s:{index[arg.name]}:{int(arg.offset)}"
    if arg.dtype in ("i32", "i64"):
        return f"{arg.dtype}:{int(arg.value)}"
    if arg.dtype == "f32":
        (bits,) = struct.unpack("<I", struct.pack("<f", float(arg.value)))
        return f"f32:{bits:x}"
    raise KernelLaunchError(f"launch of {kernel}: unknown scalar dtype {arg.dtype!r}")


#: the suffix of a schedule whose cp_asyncs land at issue instead of at their wait
EAGER = "+eager"


def schedule_words(schedule: str) -> str:
    """ "forward", "reverse" or "shuffle:SEED", each optionally followed by "+eager", as the
    runner's three words: thread order, seed, and when cp_asyncs land (deferred or eager)."""
    order = schedule.removesuffix(EAGER)
    copies = "deferred" if order == schedule else "eager"
    name, _, seed = order.partition(":")
    if name in ("forward", "reverse") and not seed:
        return f"{name} 0 {copies}"
    if name == "shuffle" and (not seed or seed.isdigit()):
        return f"shuffle {int(seed or 0)} {copies}"
    raise ValueError(
        f"schedule must be forward, reverse or shuffle[:SEED], optionally +eager, not {schedule!r}"
    )


class Program:
    """Consecutive launches over named buffer slots, as a runner holds them: the launch lines
    are made (and checked) once here, the runner packs them once at definition, and each run
    binds every slot to a (region, offset)."""

    def __init__(self, so: Path, launches: Sequence[Launch], slots: Sequence[str]) -> None:
        self.id = next(_program_ids)
        self.so = so
        self.slots = tuple(slots)
        index = {name: i for i, name in enumerate(self.slots)}
        self.lines = []
        for launch in launches:
            if not launch.kernel.isidentifier():
                raise KernelLaunchError(f"bad kernel name {launch.kernel!r}")
            geometry = " ".join(str(int(v)) for v in (*launch.grid, *launch.block))
            args = " ".join(_arg_word(arg, index, launch.kernel) for arg in launch.args)
            self.lines.append(f"launch {launch.kernel} {geometry} {int(launch.smem)} {args}")
        #: the kernels, for messages
        self.kernels = ", ".join(dict.fromkeys(launch.kernel for launch in launches)) or "nothing"

    def definition(self, so_id: int) -> str:
        header = f"program {self.id} {so_id} {len(self.slots)} {len(self.lines)}"
        return "\n".join([header, *self.lines])


class _Died(Exception):
    pass


class _TimedOut(Exception):
    pass


class Runner:
    """One runner process at a time, started on the first request and after each death."""

    def __init__(self, executable: Path, memory: EmuMemory, counters: DeviceCounters) -> None:
        self.executable = executable
        self.memory = memory
        self.counters = counters
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stderr = tempfile.TemporaryFile()
        self._pending = b""
        self._mapped: set[int] = set()
        self._objects: OrderedDict[Path, int] = OrderedDict()
        self._defined: dict[int, int] = {}  # program id -> its kernel object's id
        self._object_ids = itertools.count()
        self._live: list[subprocess.Popen] = []  # the process, for the finalizer
        weakref.finalize(self, _stop, self._live)

    def run(
        self,
        program: Program,
        slots: Sequence[tuple[int, int]],
        *,
        workers: int,
        schedule: str,
        smem_limit: int,
        timeout: float,
    ) -> float:
        """Runs the program with its slots bound to (region, offset); the runner's seconds."""
        words = schedule_words(schedule)
        with self._lock:
            self._prepare(program, slots)
            binding = " ".join(f"{r}:{o}" for r, o in slots)
            line = f"run {program.id} {workers} {words} {smem_limit} {binding}"
            return float(self._request(line, program.kernels, timeout))

    def time(
        self,
        program: Program,
        slots: Sequence[tuple[int, int]],
        *,
        warmup: int,
        repetitions: int,
        workers: int,
        smem_limit: int,
        timeout: float,
    ) -> list[float]:
        """Seconds of each repetition of the program, after `warmup` runs, measured inside."""
        with self._lock:
            self._prepare(program, slots)
            binding = " ".join(f"{r}:{o}" for r, o in slots)
            line = f"time {program.id} {warmup} {repetitions} {workers} {smem_limit} {binding}"
            answer = self._request(line, program.kernels, timeout)
        return [float(word) for word in answer.split()]

    @property
    def alive(self) -> bool:
        """Whether no runner died since the last request started one (a crash or a hang
        ends the process; the next request starts a fresh one)."""
        return self._proc is not None and self._proc.poll() is None

    def define(self, program: Program) -> None:
        """Defines the program in the runner now (else on its first run)."""
        with self._lock:
            self._prepare(program, ())

    def forget(self, program: Program) -> None:
        """The runner may drop the program (sent with the next request)."""
        if self._defined.pop(program.id, None) is not None:
            self._pending += f"drop {program.id}\n".encode()

    def close(self) -> None:
        with self._lock:
            if self._proc is None:
                return
            _pipe(self._proc.stdin).close()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._reset()

    # ---- one runner's state, given lazily ----

    def _prepare(self, program: Program, slots: Sequence[tuple[int, int]]) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            self._reset()  # died between requests
        for rid in self.memory.take_removed():
            if rid in self._mapped:
                self._mapped.discard(rid)
                self._pending += f"unmap {rid}\n".encode()
        for rid, _ in slots:
            if rid not in self._mapped:
                region = self.memory.regions[rid]
                self._request(f"map {rid} {region.size} {region.path}", "nothing")
                self._mapped.add(rid)
        if program.id in self._defined:
            self._objects.move_to_end(program.so)
            return
        so_id = self._object(program.so)
        self._request(program.definition(so_id), program.kernels)
        self._defined[program.id] = so_id

    def _object(self, so: Path) -> int:
        if so in self._objects:
            self._objects.move_to_end(so)
            return self._objects[so]
        while len(self._objects) >= LOADED_OBJECTS:
            _, old = self._objects.popitem(last=False)
            self._request(f"unload {old}", "nothing")
            self._defined = {p: o for p, o in self._defined.items() if o != old}
        so_id = next(self._object_ids)
        self._request(f"so {so_id} {so}", "nothing")
        self._objects[so] = so_id
        return so_id

    # ---- the process ----

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0"}
        self._proc = subprocess.Popen(
            [str(self.executable), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            bufsize=0,
        )
        self._live[:] = [self._proc]
        self._answers = b""
        self.counters.runner_starts += 1
        return self._proc

    def _reset(self) -> None:
        self._proc = None
        self._pending = b""
        self._mapped.clear()
        self._objects.clear()
        self._defined.clear()

    def _request(self, line: str, kernels: str, timeout: float = SETUP_TIMEOUT) -> str:
        """Sends one request (after any pending ones) and returns its answer after "ok"."""
        proc = self._proc or self._start()
        pending, self._pending = self._pending, b""
        count = pending.count(b"\n") + 1
        self.counters.requests += count
        mark = os.fstat(self._stderr.fileno()).st_size
        deadline = time.monotonic() + timeout
        try:
            _write_all(_pipe(proc.stdin).fileno(), pending + line.encode() + b"\n")
            answers = [self._answer(proc, deadline) for _ in range(count)]
        except (BrokenPipeError, _Died):
            raise KernelLaunchError(self._death(proc, kernels, mark)) from None
        except _TimedOut:
            proc.kill()
            proc.wait()
            self._reset()
            raise KernelLaunchError(
                f"emulated launch of {kernels} timed out after {timeout:g}s"
            ) from None
        for answer in answers:
            if answer.startswith("error "):
                raise KernelLaunchError(answer[len("error ") :])
        return answers[-1][len("ok ") :]

    def _answer(self, proc: subprocess.Popen, deadline: float) -> str:
        fd = _pipe(proc.stdout).fileno()
        while b"\n" not in self._answers:
            left = deadline - time.monotonic()
            if left <= 0 or not readable(fd, left):
                raise _TimedOut
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _Died
            self._answers += chunk
        line, _, self._answers = self._answers.partition(b"\n")
        return line.decode()

    def _death(self, proc: subprocess.Popen, kernels: str, mark: int) -> str:
        try:
            returncode = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            returncode = proc.wait()
        self._reset()
        stderr = os.pread(self._stderr.fileno(), 1 << 20, mark).decode(errors="replace")
        return failure(returncode, stderr, kernels)


def readable(fd: int, seconds: float) -> bool:
    """Whether `fd` has data (or its end) to read within `seconds`. poll, not select:
    select refuses a descriptor numbered past 1023, which a process holding a large model's
    tensors in the emulator's shared memory reaches."""
    waiting = select.poll()
    waiting.register(fd, select.POLLIN)
    return bool(waiting.poll(max(0.0, seconds) * 1000.0))


def _pipe(stream: IO[bytes] | None) -> IO[bytes]:
    """A runner's stdin or stdout: the pipes `_start` opens."""
    assert stream is not None, "a runner's stdin and stdout are pipes"
    return stream


def _stop(live: list[subprocess.Popen]) -> None:
    """Ends a runner whose client is gone: EOF on its stdin ends it."""
    for proc in live:
        _pipe(proc.stdin).close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def failure(returncode: int, stderr: str, kernels: str) -> str:
    """One message from a dead runner: its error line, else the sanitizer's or signal's."""
    lines = stderr.splitlines()
    errors = [ln[len("error: ") :] for ln in lines if ln.startswith("error: ")]
    sanitizer = [ln for ln in lines if "Sanitizer" in ln or "runtime error" in ln]
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        detail = errors[0] if errors else sanitizer[0] if sanitizer else f"running {kernels}"
        return f"the emulator died of {name}: {detail}"
    if errors:
        return errors[0]
    if sanitizer:
        return f"sanitizer report while running {kernels}: {sanitizer[0]}"
    tail = stderr.strip().splitlines()[-1:] or ["no output"]
    return f"emulated launch of {kernels} failed with status {returncode}: {tail[0]}"
