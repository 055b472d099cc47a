"""The parts that run in processes of their own: the tests marked gpu, each pytest process
forked with its own CUDA context, their outcomes streamed as they end."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from gpucheck.context import Context, flushed_fork
from gpucheck.settings import GPU_TESTS, LAST_SECONDS


def _subprocess_part(ctx: Context, command: list[str]) -> None:
    """`command` in the repository, ended before the part's limit: its exit status and its
    last lines (status "timeout" where it was ended)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]  # the repository
    # ends before the part's limit, so that its lines are reported rather than cut
    left = max(1.0, ctx.deadline - time.monotonic() - 2.0)
    try:
        done = subprocess.run(
            command, cwd=root, capture_output=True, text=True, check=False, timeout=left
        )
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        status = "timeout"
        output = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (expired.stdout, expired.stderr)
        )
        output += f"\n(ended after {left:.0f} s, the part's time)"
    lines = output.strip().splitlines()
    print("\n".join(lines[-15:]), flush=True)
    ctx.emit(("run",), {"ok": status == 0, "status": status, "tail": lines[-15:]})


class PytestRecorder:
    """A pytest plugin: each test's outcome on the part's results as it ends, and the GPU
    tests a run leaves out for their sticky faults (`sticky`), for processes of their own."""

    def __init__(self, ctx: Context, counts: dict[str, int]) -> None:
        self.ctx = ctx
        self.session = None
        self.counts = counts
        self.sticky: list[str] = []

    def pytest_deselected(self, items) -> None:
        self.sticky += [
            item.nodeid
            for item in items
            if item.get_closest_marker("gpu") and item.get_closest_marker("sticky_fault")
        ]

    def pytest_collection_finish(self, session) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "call" or report.outcome != "passed":
            outcome = "error" if report.failed and report.when != "call" else report.outcome
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            self.ctx.emit(("tests", report.nodeid), outcome)
            self.ctx.emit(("counts",), self.counts)
        if report.when == "teardown" and time.monotonic() > self.ctx.deadline - LAST_SECONDS:
            if self.session is not None and not self.session.shouldstop:
                ran = sum(self.counts.values())
                self.session.shouldstop = f"the part's time is up after {ran} tests"
                self.ctx.emit(("stopped",), self.session.shouldstop)
                self.ctx.note(f"pytest stopped: {self.session.shouldstop}")


def pytest_process(ctx: Context, argv: list[str], counts: dict[str, int]) -> tuple[object, list]:
    """pytest.main(argv) in a process of its own, forked from this one (which has torch and
    emmy loaded and never touches CUDA), each test's outcome streamed as it ends: a sticky
    fault costs that process alone. Its exit status ("cut" where the part's time ran out
    first), and the sticky GPU tests it left out; `counts` (by outcome) goes on from it."""
    with tempfile.NamedTemporaryFile("w+", prefix="gpu-check-pytest-") as told:
        pid = flushed_fork()
        if pid == 0:
            code = 1
            try:
                import pytest

                recorder = PytestRecorder(ctx, counts)
                code = int(pytest.main(argv, plugins=[recorder]))
                json.dump({"counts": recorder.counts, "sticky": recorder.sticky}, told)
                told.flush()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        status: object = None
        while status is None and time.monotonic() < ctx.deadline - 1.0:
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(code)
            else:
                time.sleep(0.05)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "cut", []
        told.seek(0)
        text = told.read()
    result = json.loads(text) if text else {"counts": {}, "sticky": []}
    counts.update(result["counts"])  # the child counted on from this process's counts
    return status, result["sticky"]


def gpu_tests_part(ctx: Context) -> None:
    """pytest over the tests marked `gpu` in GPU_TESTS: in one process those that keep the
    CUDA context usable, then each that plants a sticky fault (marked `sticky_fault`) in a
    process of its own, as the bench's device worker does. Off a GPU they run all the same
    and each skips, saying why: the selection and the processes cannot rot."""
    root = Path(__file__).resolve().parents[2]  # the repository
    tests = [str(root / path) for path in GPU_TESTS]
    common = ["-q", "-rs", "-p", "no:cacheprovider", f"--rootdir={root}"]
    counts: dict[str, int] = {}
    status, sticky = pytest_process(
        ctx, [*common, "-m", "gpu and not sticky_fault", *tests], counts
    )
    statuses = [status]
    for nodeid in sticky:
        if "cut" in statuses or time.monotonic() > ctx.deadline - LAST_SECONDS:
            ctx.note(f"not run, the part's time being up: {nodeid}")
            statuses.append("cut")
            continue
        status, _ = pytest_process(ctx, [*common, "-m", "gpu", str(root / nodeid)], counts)
        statuses.append(status)
    died = [s for s in statuses if isinstance(s, int) and s < 0]
    if died:
        ctx.note(f"{len(died)} pytest process(es) died of a signal")
    if "cut" in statuses:
        ctx.emit(("stopped",), "the part's time ran out before all the GPU tests ran")
    failures = counts.get("failed", 0) + counts.get("error", 0)
    # pytest's 5: nothing selected; a process cut for time is partial, not failed
    ok = not failures and all(s in (0, 5, "cut") for s in statuses)
    ran = counts.get("passed", 0) + failures
    ctx.emit(("run",), {"ok": ok, "statuses": statuses, "sticky": sticky, "dry": ran == 0})
