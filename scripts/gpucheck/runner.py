"""Running a part: its worker process (forked, its own process group, cut at its limit), what
it streamed, and the device probe part; PARTS lists every part in the order they run."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gpucheck.attention_parts import attention_part
from gpucheck.context import Context, Unusable, flushed_fork
from gpucheck.loop_parts import campaign_part, decode_part, training_part
from gpucheck.memory_parts import copy_part, memory_bound_part
from gpucheck.model_parts import (
    correctness_part,
    forward_part,
    models_part,
    real_models_part,
    runtime_part,
)
from gpucheck.process_parts import gpu_tests_part
from gpucheck.product_parts import conv_part, matmul_part, split_k_part
from gpucheck.settings import STOPPED


def probe_part(ctx: Context) -> None:
    """The device and torch: the card (its name and compute capability, as the device
    reads them), versions, whether torch has CUDA."""
    ctx.emit(("device",), ctx.device.identity)
    ctx.emit(("card",), card_of(ctx.device))
    ctx.emit(("torch",), torch.__version__)
    ctx.emit(("torch_cuda",), torch.cuda.is_available())
    if torch.cuda.is_available():
        ctx.emit(("gpu",), torch.cuda.get_device_name())
    print(f"  device {card_of(ctx.device)}, torch {torch.__version__}", flush=True)


def card_of(device) -> str:
    """The device as its results are labelled: a GPU's name and compute capability as its
    driver reads them, and its identity ("NVIDIA H100 80GB HBM3, sm_90 (nvidia-h100-80gb-
    hbm3-sm90)"); the emulator's identity."""
    name = getattr(device, "name", None)
    if name is None:
        return f"{device.identity} (the CPU emulator)"
    return f"{name}, {device.arch} ({device.identity})"


# --- parts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One part: its function, its time limit (seconds), the report's section it fills
    (under "speed" or at the top), whether a failure of what it checks fails the run, and
    whether its worker starts the device first (a part whose work makes its own devices
    in processes it forks must not touch CUDA before: a forked child gets none)."""

    run: Callable[[Context], None]
    limit: float
    speed: bool = False
    checks: bool = False
    starts_device: bool = True


#: every part, in the order they run: the issue's targets first, so that a budget spent
#: early still leaves them measured
PARTS: dict[str, Part] = {
    "probe": Part(probe_part, 30),
    "copy": Part(copy_part, 25, speed=True),
    "softmax": Part(lambda ctx: memory_bound_part(ctx, "softmax"), 30, speed=True),
    "layer_norm": Part(lambda ctx: memory_bound_part(ctx, "layer_norm"), 30, speed=True),
    "rms_norm": Part(lambda ctx: memory_bound_part(ctx, "rms_norm"), 30, speed=True),
    "elementwise": Part(lambda ctx: memory_bound_part(ctx, "elementwise"), 30, speed=True),
    "matmul_tc": Part(matmul_part, 120, speed=True),
    "split_k": Part(split_k_part, 25, speed=True),
    "conv": Part(conv_part, 90, speed=True),
    "attention": Part(attention_part, 90, speed=True),
    "forward": Part(forward_part, 90, speed=True),
    "correctness": Part(correctness_part, 60, checks=True),
    "models": Part(models_part, 40, checks=True),
    "real_models": Part(real_models_part, 40, checks=True),
    "runtime": Part(runtime_part, 30),
    "decode": Part(decode_part, 40, checks=True),
    "training": Part(training_part, 90),
    "gpu_tests": Part(gpu_tests_part, 60, checks=True, starts_device=False),
    "campaign": Part(campaign_part, 90, checks=True),
}


def _child(name: str, ctx: Context) -> int:
    """A part's worker process: runs it; its exit status says how it ended."""
    try:
        if PARTS[name].starts_device:
            ctx.device  # noqa: B018 - a device that cannot start fails the part in one line
        PARTS[name].run(ctx)
        return 0
    except Unusable as stop:
        ctx.note(f"the CUDA context is unusable {stop}: the rest of {name} was not measured")
        return STOPPED
    except Exception as error:  # noqa: BLE001 - the part's failure is its line
        where = traceback.extract_tb(error.__traceback__)[-1]
        text = f"{type(error).__name__}: {error}".strip().splitlines()[0][:300]
        ctx.note(f"{name} failed: {text} ({Path(where.filename).name}:{where.lineno})")
        return 1


@dataclass
class Outcome:
    status: str  # ok, stopped, failed, died, cut, skipped
    seconds: float
    data: dict
    notes: list[str]


def run_part(
    name: str, limit: float, options: dict, stream: Path | None = None, label: str | None = None
) -> Outcome:
    """Forks a worker for one part, waits at most `limit` seconds (then ends its process
    group: what it started goes with it), and collects what it streamed: to `stream` (a
    JSON-lines file it appends to, each line flushed and labelled `label`, by default the
    part's name), else to a file of its own."""
    with tempfile.NamedTemporaryFile("w+", prefix=f"gpu-check-{name}-", suffix=".jsonl") as file:
        path = stream or Path(file.name)
        offset = path.stat().st_size if path.exists() else 0
        start = time.monotonic()
        pid = flushed_fork()
        if pid == 0:
            code = 1
            try:
                os.setsid()  # its own process group, which a cut ends whole
                with open(path, "a", buffering=1) as results:
                    ctx = Context(
                        results=results, deadline=start + limit, label=label or name, **options
                    )
                    code = _child(name, ctx)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        status = None
        while time.monotonic() - start < limit:
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = code
                break
            time.sleep(0.05)
        cut = status is None
        if cut:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                os.kill(pid, signal.SIGKILL)  # killed before it made its group
            _, status = os.waitpid(pid, 0)
        seconds = time.monotonic() - start
        data, notes = collect(path, offset)
    if cut:
        notes.append(f"cut after {seconds:.0f} s (its limit)")
        return Outcome("cut", seconds, data, notes)
    if os.WIFSIGNALED(status):
        how = signal.Signals(os.WTERMSIG(status)).name
        notes.append(f"its worker died of {how}; the report goes on")
        return Outcome("died", seconds, data, notes)
    code = os.WEXITSTATUS(status)
    outcome = {0: "ok", STOPPED: "stopped"}.get(code, "failed")
    return Outcome(outcome, seconds, data, notes)


def collect(path: Path, offset: int = 0) -> tuple[dict, list[str]]:
    """A part's streamed results (the lines of `path` from byte `offset` on) as one nested
    dict, and its notes; the outputs found wrong are listed under "wrong_results"; a line
    the part did not finish writing is dropped."""
    data: dict = {}
    notes: list[str] = []
    with open(path, "rb") as file:
        file.seek(offset)
        text = file.read().decode(errors="replace")
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        *parents, last = record["path"]
        if parents == [] and last == "_notes":
            notes.append(record["value"])
            continue
        if parents == [] and last == "_wrong":
            data.setdefault("wrong_results", []).append(record["value"])
            continue
        node = data
        for step in parents:
            node = node.setdefault(step, {})
        node[last] = record["value"]
    return data, notes
