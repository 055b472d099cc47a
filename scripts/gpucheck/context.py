"""What a part measures with: its context (device, deadline, results stream), timing a call or
a kernel with its output checked against the family's reference, and the sweeps of a
family's configs."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

import emmy.api
from emmy.base import dtypes
from emmy.base.problem_key import SiteRef
from emmy.compiler import compile_variants
from emmy.dsl.keys import complete_key, problem_key
from emmy.dsl.library import declaration
from emmy.families.family import KernelFamily
from emmy.families.registry import registered
from emmy.measure.bench_worker import ends_worker
from emmy.measure.reference import as_outputs, reference, tolerance
from emmy.runtime.convert import compare, from_storage
from emmy.runtime.device import BufferArg, Launch
from emmy.sites.fork_space import ForkSpace
from gpucheck.settings import CARRIED, CHUNK, REPETITIONS, SWEEP_SHARE, UNITS

# --- what a part sees --------------------------------------------------------------------


class Unusable(Exception):
    """A fault left this process's CUDA context unusable: the part ends here."""


class WrongResult(Exception):
    """A timed kernel's output differs from its reference: it is not timed."""


@dataclass
class Context:
    """A part's view of the run: its options, its device, its deadline, and where its
    results go (one JSON line each, read by the parent even when the part dies; `label`,
    the part's name in the run, is on each line)."""

    device_name: str
    scale: int
    max_sweep: int | None
    quick: bool
    deadline: float
    results: object  # a text file, line-buffered
    options: dict = field(default_factory=dict)
    label: str | None = None
    _device: object = None
    #: each problem's float64 reference outputs, computed once (see reference_outputs)
    _references: dict = field(default_factory=dict)

    @property
    def device(self):
        if self._device is None:
            self._device = make_device(self.device_name)
        return self._device

    @property
    def on_gpu(self) -> bool:
        return self.device_name == "cuda"

    @property
    def repetitions(self) -> int:
        return REPETITIONS if self.on_gpu else 3

    def emit(self, path: tuple, value: object) -> None:
        record = {"step": self.label, "path": list(path), "value": value}
        self.results.write(json.dumps(record) + "\n")
        self.results.flush()

    def note(self, line: str) -> None:
        print(f"  ! {line}", flush=True)
        self.emit(("_notes",), line)

    def attempt(self, label: str, function: Callable, *args, **kwargs):
        """`function(*args)`, or None and one line of the report if it raises; a fault that
        leaves the CUDA context unusable ends the part."""
        try:
            return function(*args, **kwargs)
        except Unusable:
            raise  # from an attempt inside this one: the part ends all the same
        except WrongResult as error:
            self.emit(("_wrong",), f"{label}: {error}")
            self.note(f"{label}: WRONG RESULT, not timed: {error}")
            return None
        except Exception as error:  # noqa: BLE001 - one measurement's failure is one line
            text = f"{type(error).__name__}: {error}".strip().splitlines()[0][:300]
            self.note(f"{label}: {text}")
            if ends_worker(str(error)):
                raise Unusable(f"after {label}") from None
            return None

    def timed(
        self, label: str, function: Callable[[], object], launches: bool = False
    ) -> float | None:
        """Device seconds per call of `function`, or None and a line: torch's work on the
        device's tensors, or with `launches` a call that issues emmy's (Device.time_call:
        events around back-to-back calls on the device's stream, the rule of every timing
        here). On a GPU, a line too where the host's pace, not the GPU's, made the figure
        (on the emulator torch's work runs on the host, which bounds every such window)."""
        timing = self.attempt(
            label, self.device.time_call, function, launches=launches,
            repetitions=self.repetitions,
        )  # fmt: skip
        if timing is None:
            return None
        seconds = statistics.median(timing.seconds)
        if self.on_gpu and timing.host_bound:
            host = statistics.median(timing.host_seconds)
            self.note(
                f"{label}: host-bound: the host queued a call in {host * 1e6:.1f} us, "
                f"the GPU took {seconds * 1e6:.1f} us a call"
            )
        return seconds

    def on_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` in the memory torch runs on beside the device (the GPU's; the host's
        beside the emulator)."""
        return tensor.to(self.device.torch_device)

    def share(self, fraction: float) -> float:
        """A deadline `fraction` of the way from now to the part's."""
        now = time.monotonic()
        return now + fraction * max(0.0, self.deadline - now)


def flushed_fork() -> int:
    """os.fork() with this process's output flushed first, so that the child does not
    print it again: 0 in the child, its pid in the parent."""
    sys.stdout.flush()
    sys.stderr.flush()
    return os.fork()


def make_device(name: str):
    if name == "cuda":
        from emmy.runtime.cuda import CudaDevice

        return CudaDevice()
    from emmy.runtime.emu import EmuDevice

    return EmuDevice()


# --- timing ------------------------------------------------------------------------------


def call_seconds(ctx: Context, label: str, function: Callable[[], object], launches: bool) -> float:
    """Device seconds per call of `function` (Context.timed), or an error saying why not."""
    seconds = ctx.timed(label, function, launches=launches)
    if seconds is None:
        raise RuntimeError(f"{label} could not be timed (see the line above)")
    return seconds


@dataclass(frozen=True)
class Problem:
    """One family's problem to time: its key, input arrays (storage), output, and how a
    time becomes the figure reported (`unit`: gb_s or tflops)."""

    family: str
    key: dict
    arrays: list
    output: tuple
    figure: Callable[[float], float]
    unit: str
    output_dtype: type = np.uint16


# --- every timed kernel's output, against its family's float64 reference --------------


def storage_dtype(array: np.ndarray) -> torch.dtype:
    """The torch dtype whose storage `array` holds (bf16's bits are uint16, emmy.base.dtypes)."""
    name = next(n for n, row in dtypes.DTYPES.items() if np.dtype(row.numpy) == array.dtype)
    return dtypes.torch_dtype(name)


def reference_outputs(ctx: Context, family_name: str, key: dict, arrays: list) -> tuple:
    """The family's float64 reference on `arrays` (computed once per problem, on the GPU
    where torch has one: a 4096³ product or 8k-token attention in float64 is slow on a
    host), and the key it read (a kernel family's completed by its declaration)."""
    known = (family_name, json.dumps(key, sort_keys=True))
    if known not in ctx._references:
        kernel = isinstance(registered(family_name), KernelFamily)
        full = complete_key(declaration(family_name), key) if kernel else dict(key)
        where = ctx.device.torch_device
        with torch.device(where):  # where the reference makes its masks and ranges too
            tensors = [from_storage(a, storage_dtype(a)).to(where) for a in arrays]
            ctx._references.clear()  # one problem's reference at a time: they can be large
            ctx._references[known] = (full, as_outputs(reference(family_name)(full, tensors)))
    return ctx._references[known]


def wrong_output(ctx, family_name: str, key: dict, arrays: list, actual: list) -> str | None:
    """How outputs (torch tensors) differ from the family's reference on `arrays` (within
    its tolerance, as a bench judges them), or None where they agree."""
    full, wants = reference_outputs(ctx, family_name, key, arrays)
    for index, (tensor, want) in enumerate(zip(actual, wants, strict=True)):
        dtype = tensor.dtype
        tensor = tensor.to(want.device).reshape(want.shape)
        found = compare(tensor, want.to(dtype), tolerance(family_name, full, dtype))
        if not found.ok:
            return (f"output {index}: " if len(wants) > 1 else "") + found.summary
    return None


def checked_timing(ctx, source: str, steps: list, buffers: dict, problem: tuple) -> float:
    """Device seconds of a launch list (Device.time: on a GPU, events around back-to-back
    launches), after one run whose output `out` matched the reference of `problem`
    (family, key, input arrays); WrongResult where it did not."""
    family_name, key, arrays = problem
    buffers["out"].reshape(-1).view(np.uint8).fill(0xFF)  # NaN: a missed element shows
    ctx.device.run(source, steps, buffers)
    out = buffers["out"]
    wrong = wrong_output(ctx, family_name, key, arrays, [from_storage(out, storage_dtype(out))])
    if wrong is not None:
        raise WrongResult(wrong)
    timing = ctx.device.time(source, steps, buffers, repetitions=ctx.repetitions)
    return statistics.median(timing.seconds)


def time_kernel(ctx, source, name, info, problem, out_shape, out_dtype=np.uint16) -> float:
    """Device seconds of kernel `name` of `source` on the arrays of `problem` (family,
    key, arrays), its output checked first (checked_timing)."""
    arrays = problem[2]
    buffers = {f"in{i}": a for i, a in enumerate(arrays)}
    buffers["out"] = np.empty(out_shape, dtype=out_dtype)
    args = tuple(BufferArg(n) for n in buffers)
    launch = Launch(name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, args)
    return checked_timing(ctx, source, [launch], buffers, problem)


def time_config(ctx, family_name, key, config, arrays, out_shape, out_dtype=np.uint16) -> float:
    """Device seconds of one config of a family at `key` on `arrays`, compiled alone, its
    output checked first."""
    program = compile_variants(family_name, key, [config], prefix="timed_")
    ((name, info),) = program.kernels.items()
    problem = (family_name, key, arrays)
    return time_kernel(ctx, program.source, name, info, problem, out_shape, out_dtype)


def one_source(ctx: Context, problem: Problem, candidates: list[dict]):
    """Configs compiled in one source, for the device (one compiler invocation: a kernel's
    compile time is much the compiler's start and the headers); the source and each
    config's kernel, by its text."""
    program = compile_variants(problem.family, problem.key, candidates, prefix="sweep_")
    ctx.device.prepare(program.source)
    kernels = dict(zip(map(config_text, candidates), program.kernels.items(), strict=True))
    return program.source, kernels


# --- sweeps ------------------------------------------------------------------------------


def config_text(config: dict) -> str:
    return ",".join(f"{name}={value}" for name, value in config.items())


def site_pick(ctx: Context, family_name: str, key: dict) -> dict:
    """The config a compile on this device picks for the site: the oracle stack's answer
    (pins, golden files, the tuning database, the prior, the defaults)."""
    from emmy.base.compile_options import CompileOptions
    from emmy.recall.oracles import oracle_stack, site_query

    query = site_query(SiteRef(family_name, problem_key(declaration(family_name), key)))
    return dict(oracle_stack(CompileOptions(target=ctx.device.identity)).decide(query).config)


def largest_tiles(family_name: str, valid: list[dict]) -> list[dict]:
    """For each tile fork (a fork of integer options), the valid configs with its largest
    value, ties going to the largest product of all tile forks: that tile with each
    combination of the other forks."""
    tiles = [
        f.name for f in declaration(family_name).forks if all(isinstance(o, int) for o in f.options)
    ]
    chosen: list[dict] = []
    for name in tiles:
        best = max(valid, key=lambda c, name=name: (c[name], math.prod(c[t] for t in tiles)))
        same = [c for c in valid if all(c[t] == best[t] for t in tiles)]
        chosen += [c for c in same if c not in chosen]
    return chosen


def sweep(ctx: Context, family_name: str, key: dict, first: list[dict]) -> list[dict]:
    """`first`, the largest tiles, then a pairwise cover of the fork space at `key`, each
    once; --max-sweep K keeps K of them beside `first`."""
    space = ForkSpace.of(declaration(family_name))
    valid = list(space.configs(key))
    covering = [config for _, config in space.pairwise([key])]
    ordered: list[dict] = []
    for config in [*first, *largest_tiles(family_name, valid), *covering]:
        if config not in ordered:
            ordered.append(config)
    if ctx.max_sweep is None:
        return ordered
    return ordered[: len(first) + ctx.max_sweep]


def timed_sweep(
    ctx: Context, path: tuple, problem: Problem, candidates: list[dict], until: float
) -> list[tuple[dict, float]]:
    """Times the candidates, CHUNK configs to a source, until `until` (the first chunk in
    any case); each figure goes to `path`/configs as it comes. The timings, fastest first."""
    name, key = problem.family, problem.key
    where = " ".join((name, *path))
    shape = (problem.arrays, problem.output, problem.output_dtype)
    checked = ((name, key, problem.arrays), problem.output, problem.output_dtype)
    timings = []
    for first in range(0, len(candidates), CHUNK):
        if first and time.monotonic() > until:
            ctx.note(
                f"{where}: sweep cut at its share of the part's limit, "
                f"{first} of {len(candidates)} configs timed"
            )
            break
        chunk = candidates[first : first + CHUNK]
        # one failing config spoils a shared source: then each is compiled alone
        batch = ctx.attempt(
            f"{where}: compiling {len(chunk)} configs", one_source, ctx, problem, chunk
        )
        for config in chunk:
            text = config_text(config)
            if batch is None:
                seconds = ctx.attempt(
                    f"{where} {text}", time_config, ctx, name, key, config, *shape
                )
            else:
                source, kernels = batch
                seconds = ctx.attempt(
                    f"{where} {text}", time_kernel, ctx, source, *kernels[text], *checked
                )
            if seconds is None:
                continue
            ctx.emit((*path, "configs", text), round(problem.figure(seconds), 3))
            timings.append((config, seconds))
    return sorted(timings, key=lambda item: item[1])


def kernel_sweep(
    ctx: Context,
    path: tuple,
    problem: Problem,
    carried: list[dict] | None = None,
    until: float | None = None,
) -> list[dict]:
    """The family's configs timed on the problem: the compile's pick for the site, then
    the whole sweep, or (`carried` given) an earlier shape's fastest configs valid here;
    each figure, the best and the pick's go under `path`. The configs, fastest first."""
    name, key = problem.family, problem.key
    where = " ".join((name, *path))
    valid = list(ForkSpace.of(declaration(name)).configs(key))
    if not valid:
        ctx.note(f"{where}: no valid config for {key}")
        return []
    pick = ctx.attempt(f"{where}: the compile's pick", site_pick, ctx, name, key)
    first = [pick] if pick else []
    if carried is None:
        candidates = sweep(ctx, name, key, first)
    else:
        limit = CARRIED if ctx.max_sweep is None else ctx.max_sweep
        here = [c for c in carried if c in valid][:limit]
        candidates = [*first, *(c for c in here if c not in first)]

    timings = timed_sweep(ctx, path, problem, candidates, until or ctx.share(SWEEP_SHARE))
    if not timings:
        return []
    best_config, best = timings[0]
    ctx.emit((*path, f"best_{problem.unit}"), problem.figure(best))
    ctx.emit((*path, "best_config"), best_config)
    unit = UNITS[problem.unit]
    line = f"  {where:24} best {problem.figure(best):8.4g} {unit} ({config_text(best_config)})"
    picked = _seconds_of(timings, pick)
    if picked is not None:
        ctx.emit((*path, f"kernel_pick_{problem.unit}"), problem.figure(picked))
        ctx.emit((*path, "kernel_pick_config"), pick)
        line += f"; the compile's pick {problem.figure(picked):.4g}"
    print(line, flush=True)
    return [c for c, _ in timings]


def _seconds_of(timings: list[tuple[dict, float]], config: dict | None) -> float | None:
    return next((s for c, s in timings if c == config), None)


def describe_pick(program) -> str:
    """What a compiled program runs: its calls' families (or host calls), in order."""
    names = []
    for call in program.calls:
        info = program.kernels.get(call.kernel)
        names.append(info.site.family if info is not None else call.kernel.rstrip("0123456789_"))
    return " + ".join(names)


def compiled_seconds(ctx: Context, module, inputs: list, problem: tuple) -> tuple[float, str]:
    """Seconds per call of what emmy.compile builds for `module` on this device (the module
    and its inputs where torch runs beside it), its output checked first against the
    reference of `problem` (family, key, input arrays: the same computation's kernel
    problem), and what that program runs."""
    module = module.to(ctx.device.torch_device)
    inputs = [ctx.on_device(t) for t in inputs]
    compiled = emmy.api.compile(module, *inputs, device=ctx.device)
    wrong = wrong_output(ctx, *problem, [compiled(*inputs)])
    if wrong is not None:
        raise WrongResult(wrong)
    seconds = call_seconds(ctx, "emmy.compile's program", lambda: compiled(*inputs), True)
    return seconds, describe_pick(compiled.program)
