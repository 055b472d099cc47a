"""A device in a worker process, for work that can wedge the process it runs in.

A kernel fault on a GPU (an illegal address, a misaligned access) is sticky: the process's
CUDA context is unusable afterwards, so a bench that went on in it would record every later
config as `launch_error`. A `DeviceWorker` is a `Device` whose runs and timings happen in a
child process (`python -m emmy.measure.bench_worker`) that builds the real device from a picklable
`DeviceSpec`. The child answers one request at a time and ends itself after reporting a
fault that leaves it unusable (`ends_worker`); a request the child does not answer within its
timeout ends it too (the whole process group, so an emulator runner it started goes with
it), and a child that dies is reported with what it printed. Each case raises
KernelLaunchError in the parent, and the next request starts a fresh child.

The protocol: frames of an 8-byte little-endian length and a pickle, on the child's stdin and
its original stdout (the child points fd 1 at its stderr, so that nothing a library prints
can corrupt a frame). Its stderr goes to a file, read back when it dies.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

import numpy as np

from emmy.base.errors import EmmyError, KernelCompileError, KernelLaunchError, NoDeviceError
from emmy.base.identity import EMU
from emmy.base.regime import DEPLOYABLE_FLAGS, Regime, regime_for
from emmy.runtime.device import Device, Step, Timing
from emmy.runtime.emu import DEFAULT_SMEM_LIMIT, EmuDevice, build_runner
from emmy.runtime.emu_serve import readable
from emmy.runtime.faults import ends_worker

#: seconds the device inside the worker is given beyond a request's timeout: the worker's
#: own watchdog fires first, and ends a kernel that never returns with its process
INNER_GRACE = 5.0
#: seconds a fresh worker may take to build its device and say it is ready (loading the
#: CUDA bindings and creating a context, on a busy host)
START_TIMEOUT = 120.0
#: the folder that holds the `emmy` package
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DeviceSpec:
    """What a worker builds its device from: `kind` "emu" or "cuda", the regime's flags,
    and the device's own options (the GPU's ordinal; the emulator's workers, sanitizer and
    shared-memory limit)."""

    kind: str
    flags: tuple[str, ...] = DEPLOYABLE_FLAGS
    ordinal: int = 0
    workers: int | None = None
    sanitize: str | None = None
    smem_limit: int = DEFAULT_SMEM_LIMIT

    @classmethod
    def of(cls, device: Device) -> DeviceSpec:
        """The spec that builds another `device` like this one."""
        if isinstance(device, DeviceWorker):
            return device.spec
        flags = tuple(device.regime.flags)  # type: ignore[attr-defined]
        if isinstance(device, EmuDevice):
            return cls(EMU, flags, 0, device.workers, device.sanitize, device.smem_limit)
        return cls("cuda", flags, getattr(device, "ordinal", 0))

    def build(self) -> Device:
        if self.kind == EMU:
            # g++ builds the emulator's runner at its first launch otherwise, inside that
            # launch's timeout; a worker has START_TIMEOUT for it
            build_runner(self.sanitize)
            return EmuDevice(
                self.workers, sanitize=self.sanitize, smem_limit=self.smem_limit, flags=self.flags
            )
        if self.kind == "cuda":
            # the CUDA bindings take ~0.25 s to load and need a driver; only a GPU worker does
            from emmy.runtime.cuda import CudaDevice

            return CudaDevice(self.ordinal, flags=self.flags)
        raise EmmyError(f"device worker: unknown device kind {self.kind!r} (emu or cuda)")


def isolated(device: Device) -> Device:
    """Where work that may fault runs: a GPU's in a fresh worker process (the caller closes
    it), the emulator's in place (its kernels run in a runner process already), a worker's
    in that worker."""
    if device.identity == EMU or isinstance(device, DeviceWorker):
        return device
    return DeviceWorker(DeviceSpec.of(device))


# --- frames -------------------------------------------------------------------------------

_LENGTH = struct.Struct("<Q")


def _write_frame(stream: IO[bytes], message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _read_exact(fd: int, count: int, deadline: float | None) -> bytes | None:
    """`count` bytes from `fd`; None at end of file; TimeoutError past `deadline`."""
    chunks, left = [], count
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not readable(fd, remaining):
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None) -> Any:
    """The next message on `fd`; None at end of file."""
    head = _read_exact(fd, _LENGTH.size, deadline)
    if head is None:
        return None
    data = _read_exact(fd, _LENGTH.unpack(head)[0], deadline)
    return None if data is None else pickle.loads(data)


# --- the parent's side --------------------------------------------------------------------


class DeviceWorker(Device):
    """A device whose work runs in a worker process (see the module's docstring).

    `starts` counts the worker processes started so far: a fault ends one, and the next
    request starts another."""

    def __init__(self, spec: DeviceSpec) -> None:
        self.spec = spec
        self.starts = 0
        self._process: subprocess.Popen | None = None
        self._stderr: BinaryIO | None = None
        self._identity: str | None = None
        self._compiler: str | None = None

    # the device's identity and compiler are the worker's: a GPU's are known once it runs

    @property
    def identity(self) -> str:  # type: ignore[override]
        if self._identity is None:
            self._start()
        assert self._identity is not None
        return self._identity

    @property
    def compiler(self) -> str:  # type: ignore[override]
        if self._compiler is None:
            self._start()
        assert self._compiler is not None
        return self._compiler

    @property
    def regime(self) -> Regime:
        return regime_for(self.identity, self.spec.flags)

    @property
    def pid(self) -> int | None:
        """The running worker's process id, or None when none runs."""
        return self._process.pid if self._process is not None else None

    def prepare(self, source: str) -> None:
        self._request(("prepare", source), START_TIMEOUT, "compiling a kernel source")

    def run(
        self,
        source: str,
        launches: Sequence[Step],
        buffers: dict[str, np.ndarray],
        *,
        schedule: str = "forward",
        timeout: float = 120.0,
    ) -> None:
        kernels = _kernels(launches)
        request = ("run", source, list(launches), buffers, _read_only(buffers), schedule, timeout)
        results = self._request(request, timeout, f"running {kernels}")
        for name, array in results.items():
            buffers[name][...] = array

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
        request = (
            "time", source, list(launches), buffers, _read_only(buffers), warmup, repetitions,
            timeout,
        )  # fmt: skip
        return self._request(request, timeout, f"timing {_kernels(launches)}")

    def close(self) -> None:
        """Ends the worker, if one runs."""
        self._end()

    def fault(self) -> str | None:
        """None: a fault ends the worker process, and the next request starts a fresh one."""
        return None

    def reset(self) -> None:
        self._end()

    def __enter__(self) -> DeviceWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # process ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._process is not None:
            return
        self._stderr = tempfile.TemporaryFile(prefix="emmy-worker-")
        # the worker imports this emmy, wherever the caller found it
        paths = [str(_PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        # a session of its own: ending the worker ends what it started (an emulator runner)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "emmy.measure.bench_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        )
        self.starts += 1
        reply = self._exchange(self.spec, START_TIMEOUT, "starting the device worker")
        self._identity, self._compiler = reply

    def _request(self, request: tuple, timeout: float, what: str) -> Any:
        self._start()
        return self._exchange(request, timeout, what)

    def _exchange(self, message: object, timeout: float, what: str) -> Any:
        """Sends one message and returns the worker's answer, or raises its error (ending a
        worker that timed out, died or said it is unusable)."""
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            _write_frame(process.stdin, message)
            reply = _read_frame(process.stdout.fileno(), time.monotonic() + timeout)
        except TimeoutError:
            self._end()
            raise KernelLaunchError(
                f"{what} timed out after {timeout:g}s; its device worker was ended"
            ) from None
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:
            raise KernelLaunchError(f"{what}: {self._death()}")
        status, *rest = reply
        if status == "ok":
            return rest[0]
        kind, text, fatal = rest
        if fatal:
            self._end()
        raise _ERRORS.get(kind, EmmyError)(text)

    def _death(self) -> str:
        """How the worker ended, with the last lines it printed; it is cleaned up."""
        assert self._process is not None and self._stderr is not None
        code = self._process.wait()
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        self._end()
        if code < 0:
            try:
                how = f"died of {signal.Signals(-code).name}"
            except ValueError:
                how = f"died of signal {-code}"
        else:
            how = f"exited with status {code}"
        printed = " | ".join(lines[-3:]) if lines else "it printed nothing"
        return f"the device worker {how}: {printed}"

    def _end(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # it ended on its own after its answer
            process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass  # a pipe the killed worker left half-written
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


#: the errors a worker reports as themselves, by name; any other is an EmmyError naming it
_ERRORS: dict[str, type[Exception]] = {
    error.__name__: error
    for error in (KernelLaunchError, KernelCompileError, NoDeviceError, EmmyError)
}


def _kernels(launches: Sequence[Step]) -> str:
    return ", ".join(dict.fromkeys(step.kernel for step in launches)) or "nothing"


def _read_only(buffers: dict[str, np.ndarray]) -> list[str]:
    # a device treats a read-only array as an input; pickling loses the flag
    return [name for name, array in buffers.items() if not array.flags.writeable]


# --- the worker's side --------------------------------------------------------------------


def _handle(device: Device, request: tuple) -> Any:
    op, source, *rest = request
    if op == "prepare":
        device.prepare(source)
        return None
    launches, buffers, read_only, *options = rest
    for name in read_only:
        buffers[name].flags.writeable = False
    if op == "run":
        schedule, timeout = options
        device.run(source, launches, buffers, schedule=schedule, timeout=timeout + INNER_GRACE)
        return {n: a for n, a in buffers.items() if a.flags.writeable}
    if op == "time":
        warmup, repetitions, timeout = options
        return device.time(
            source,
            launches,
            buffers,
            warmup=warmup,
            repetitions=repetitions,
            timeout=timeout + INNER_GRACE,
        )
    raise EmmyError(f"device worker: unknown request {op!r}")


def _error_reply(error: Exception, fatal: bool = False) -> tuple[str, str, str, bool]:
    """The reply that reports `error`; `fatal` (or a fault) says the worker ends after it."""
    kind = type(error).__name__
    text = str(error) if kind in _ERRORS else f"{kind}: {error}"
    fatal = fatal or (isinstance(error, KernelLaunchError) and ends_worker(text))
    return ("error", kind, text, fatal)


def main() -> int:
    """The worker: builds the device the first frame describes, then answers requests
    until its stdin closes or a fault leaves it unusable."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what anything prints goes to stderr, not into a frame
    requests = sys.stdin.buffer.fileno()
    spec = _read_frame(requests, None)
    try:
        device = spec.build()
        _write_frame(replies, ("ok", (device.identity, device.compiler)))
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it
        _write_frame(replies, _error_reply(error, fatal=True))
        return 1
    while (request := _read_frame(requests, None)) is not None:
        try:
            reply: tuple = ("ok", _handle(device, request))
        except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it
            reply = _error_reply(error)
        _write_frame(replies, reply)
        if reply[0] == "error" and reply[3]:
            return 1  # unusable: the parent starts a fresh worker for the next request
    return 0


if __name__ == "__main__":
    sys.exit(main())
