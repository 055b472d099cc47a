"""A lit test format that runs emmy-opt inside lit's worker processes.

Starting `emmy-opt` costs ~0.6 s of imports, nearly all of the suite's time; a worker
imports emmy once and calls `emmy.opt.main` per RUN line instead. A file all of whose RUN
lines have the shape

    [not] emmy-opt ARGS [2>&1] [| [not] emmy-opt ARGS [2>&1]]... | [not] filecheck ARGS

is run so: each emmy-opt in-process (argv, stdin, stdout and stderr its own, the test's
environment and working directory), the last one's output piped into a real `filecheck`
process. Any other file, or one whose emmy-opt flags change xDSL's process-wide state, runs
as lit's ShTest runs it, through lit's shell and the installed `emmy-opt`.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import lit.formats
import lit.Test
import lit.TestRunner
import lit.util
from lit.LitConfig import LitConfig
from lit.ShCommands import Command, Pipeline
from lit.ShUtil import ShParser

#: emmy-opt flags that change xDSL state for the rest of the process (xDSLOptMain patches
#: Attribute.__post_init__, sets Diagnostic.colored): a file using them runs as ShTest does
_PROCESS_WIDE_FLAGS = ("--disable-verify", "--syntax-highlight")
#: the one redirect an in-process emmy-opt takes (`2>&1`): stderr into the pipe
_MERGE_STDERR = ((">&", 2), "1")


@dataclass(frozen=True)
class _Step:
    """One command of a pipeline: emmy-opt or filecheck, its arguments, whether lit's
    `not` inverts its status, whether its stderr goes into the pipe."""

    tool: str
    args: list[str]
    negate: bool
    merge_stderr: bool


@dataclass(frozen=True)
class _Run:
    """A RUN line of the in-process shape: its emmy-opt steps, then filecheck."""

    where: str
    command: str
    opts: list[_Step]
    check: _Step


def _step(command: Command) -> _Step | None:
    args = command.args
    if not all(isinstance(arg, str) for arg in args):
        return None  # a glob: lit's shell expands it
    negate = bool(args) and args[0] == "not"
    if negate:
        args = args[1:]
    if not args or args[0] not in ("emmy-opt", "filecheck"):
        return None
    redirects = [tuple(r) for r in command.redirects]
    if redirects not in ([], [_MERGE_STDERR]):
        return None
    return _Step(args[0], list(args[1:]), negate, bool(redirects))


def _parse_run(line: str) -> _Run | None:
    """The RUN line `line` (after lit's substitutions) as emmy-opt steps and a filecheck,
    or None when it has another shape."""
    match = re.fullmatch(lit.TestRunner.kPdbgRegex, line)
    where, command = (match.group(1), match.group(2).strip()) if match else ("RUN", line)
    try:
        parsed = ShParser(command, False, True).parse()
    except Exception:
        return None
    if not isinstance(parsed, Pipeline) or parsed.negate or len(parsed.commands) < 2:
        return None
    steps = [_step(c) for c in parsed.commands]
    if any(s is None for s in steps):
        return None
    *opts, check = [s for s in steps if s is not None]
    if check.tool != "filecheck" or check.merge_stderr:
        return None
    if any(s.tool != "emmy-opt" for s in opts):
        return None
    if any(flag in s.args for s in opts for flag in _PROCESS_WIDE_FLAGS):
        return None
    return _Run(where, command, opts, check)


class _Sink(io.RawIOBase):
    """The write end of a pipe: what is written is appended to `data`."""

    def __init__(self, data: bytearray) -> None:
        self.data = data

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # type: ignore[override]
        self.data += b
        return len(b)


def _stdio(data: bytearray, *, stderr: bool) -> io.TextIOWrapper:
    # as Python sets up a process's stdout and stderr on a pipe: stdout block-buffered,
    # stderr line-buffered, so `2>&1` interleaves them as the installed command does
    return io.TextIOWrapper(
        io.BufferedWriter(_Sink(data)),
        encoding="utf-8",
        errors="backslashreplace" if stderr else "strict",
        line_buffering=stderr,
    )


def _exit_status(code: object, stderr: io.TextIOWrapper) -> int:
    """The exit status of a process whose SystemExit carried `code`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=stderr)
    return 1


@contextlib.contextmanager
def _process_state(
    env: Mapping[str, str], cwd: str, argv: list[str], stdin: bytes, merge_stderr: bool
) -> Iterator[tuple[io.TextIOWrapper, io.TextIOWrapper, bytearray, bytearray]]:
    """The worker's environment, directory, argv and standard streams as a process started
    by lit's shell would have them (stderr into stdout's pipe when `merge_stderr`), restored
    on exit. Yields stdout, stderr and the bytes written to each pipe."""
    out = bytearray()
    err = out if merge_stderr else bytearray()
    stdout, stderr = _stdio(out, stderr=False), _stdio(err, stderr=True)
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_stdio = sys.argv, sys.stdin, sys.stdout, sys.stderr
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = argv
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = stdout, stderr
    try:
        with warnings.catch_warnings():  # a warning is shown once per run, as per process
            yield stdout, stderr, out, err
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved_stdio
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


_MAIN: Callable[[], object] | None = None


def _emmy_opt_main(checkout: str) -> Callable[[], object]:
    """emmy.opt.main of `checkout`, imported once per worker (PYTHONPATH's job for the
    installed command)."""
    global _MAIN
    if _MAIN is not None:
        return _MAIN
    if checkout in sys.path:
        sys.path.remove(checkout)
    sys.path.insert(0, checkout)
    import emmy
    from emmy.opt import main

    where = os.path.dirname(os.path.abspath(emmy.__file__))
    if where != os.path.join(checkout, "emmy"):
        raise RuntimeError(f"emmy is imported from {where}, not from the checkout {checkout}")
    _MAIN = main
    return main


@dataclass
class _Outcome:
    status: int
    piped: bytes
    stderr: bytes


def _run_emmy_opt(
    checkout: str,
    step: _Step,
    executable: str,
    stdin: bytes,
    env: Mapping[str, str],
    cwd: str,
) -> _Outcome:
    """emmy-opt `step` run in this process as its console script runs it:
    sys.exit(main()), an uncaught exception printed and status 1."""
    argv = [executable, *step.args]
    state = _process_state(env, cwd, argv, stdin, step.merge_stderr)
    with state as (stdout, stderr, out, err):
        try:
            # imported here the first time, in the test's environment as the command is
            status = _exit_status(_emmy_opt_main(checkout)(), stderr)
        except SystemExit as exit_:
            status = _exit_status(exit_.code, stderr)
        except KeyboardInterrupt:
            raise
        except BaseException as error:
            # as the interpreter reports it, less this frame
            tb = error.__traceback__.tb_next if error.__traceback__ else None
            traceback.print_exception(type(error), error, tb, file=stderr)
            status = 1
        # the interpreter's order at exit: the traceback is written, then stdout flushed
        stdout.flush()
        stderr.flush()
    return _Outcome(status, bytes(out), b"" if step.merge_stderr else bytes(err))


def _status_failure(tool: str, status: int, negate: bool) -> list[str]:
    """[] when `status` passes (lit's `not` passes a non-zero one), else why it fails."""
    if (status != 0) == negate:
        return []
    expected = "non-zero (under `not`)" if negate else "0"
    return [f"{tool} exited with status {status}, expected {expected}"]


def _section(title: str, data: bytes | str, limit: int = 10240) -> str:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if not text.strip():
        return ""
    if len(text) > limit:
        text = text[:limit] + f"\n... ({len(text) - limit} more characters)"
    return f"# .---{title}\n" + "".join(f"# | {line}\n" for line in text.splitlines())


class EmmyOptFormat(lit.formats.ShTest):
    """lit's ShTest, but emmy-opt runs in the worker process for the RUN lines of the
    shape in this module's docstring."""

    def __init__(self, checkout: str) -> None:
        super().__init__(preamble_commands=[])
        self.checkout = checkout

    def execute(self, test: lit.Test.Test, litConfig: LitConfig) -> lit.Test.Result:
        runs = self._in_process_runs(test, litConfig)
        if not isinstance(runs, list):
            return runs if runs is not None else super().execute(test, litConfig)
        return self._execute_in_process(test, runs)

    def _in_process_runs(
        self, test: lit.Test.Test, litConfig: LitConfig
    ) -> list[_Run] | lit.Test.Result | None:
        """The RUN lines of `test` when all are of the in-process shape; a Result when lit
        settles the test before running it; None when ShTest is to run it."""
        if test.config.unsupported:
            return None
        # what the in-process path does not model: retries, time limits, coverage, updates
        if test.config.maxIndividualTestTime or getattr(litConfig, "per_test_coverage", False):
            return None
        if getattr(litConfig, "update_tests", False) or not test.config.pipefail:
            return None
        parsed = lit.TestRunner.parseIntegratedTestScript(test)
        if isinstance(parsed, lit.Test.Result):
            return parsed
        if test.allowed_retries or litConfig.noExecute:
            return None
        tmp_dir, tmp_base = lit.TestRunner.getTempPaths(test)
        substitutions = list(self.extra_substitutions)
        substitutions += lit.TestRunner.getDefaultSubstitutions(
            test,
            tmp_dir,
            tmp_base,
            normalize_slashes=litConfig.params.get("use_normalized_slashes", False),
        )
        conditions = {feature: True for feature in test.config.available_features}
        script = lit.TestRunner.applySubstitutions(
            parsed,
            substitutions,
            conditions,
            recursion_limit=test.config.recursiveExpansionLimit,
        )
        runs = [_parse_run(line) for line in script]
        if not runs or any(run is None for run in runs):
            return None
        os.makedirs(tmp_dir, exist_ok=True)
        return [run for run in runs if run is not None]

    def _execute_in_process(self, test: lit.Test.Test, runs: list[_Run]) -> lit.Test.Result:
        env = {**test.config.environment, "LIT_CURRENT_TESTCASE": test.getFullName()}
        cwd = os.path.dirname(test.getExecPath())
        path = env.get("PATH")
        executable = lit.util.which("emmy-opt", path) or "emmy-opt"
        filecheck = lit.util.which("filecheck", path)
        if filecheck is None:
            return lit.Test.Result(lit.Test.UNRESOLVED, f"filecheck is not on PATH={path}")
        log = ""
        for run in runs:
            log += f"# {run.where}\n# executed command (emmy-opt in-process): {run.command}\n"
            piped, failures = b"", []
            for step in run.opts:
                outcome = _run_emmy_opt(self.checkout, step, executable, piped, env, cwd)
                piped = outcome.piped
                log += _section("emmy-opt stderr", outcome.stderr)
                failures += _status_failure("emmy-opt", outcome.status, step.negate)
            check = subprocess.run(
                [filecheck, *run.check.args],
                input=piped,
                capture_output=True,
                env=env,
                cwd=cwd,
                check=False,
            )
            # pipefail: a failing command fails the line, whatever filecheck says
            failures += _status_failure("filecheck", check.returncode, run.check.negate)
            if not failures:
                continue
            log += "".join(f"# error: {failure}\n" for failure in failures)
            log += f"# filecheck command: {shlex.join([filecheck, *run.check.args])}\n"
            log += _section("output piped into filecheck", piped)
            log += _section("filecheck stdout", check.stdout)
            log += _section("filecheck stderr", check.stderr)
            return lit.Test.Result(lit.Test.FAIL, log)
        return lit.Test.Result(lit.Test.PASS, log)
