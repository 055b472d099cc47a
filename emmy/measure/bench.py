"""`emmy run --bench`: measures the compiler's pick against requested configs, per site.

For every site of a compiled program, the rows to measure are the pick (origin `pick`)
and the configs asked for (origin `forced`): `--pin fork=v1,v2` (those values over the
pick), `--sweep fork` (every valid value of a fork over the pick), `--sweep all` (every
valid config), at most `--max-rows`. A config already measured on this device under this
regime is recalled, not re-run, unless `--force`. Each new row is compiled, run once on
fresh random inputs and checked against the family's reference, then timed; it is written
to the tuning database in its own transaction as it is known, failures included,
so an interrupted bench keeps everything it finished.

On a GPU the configs run in a worker process (emmy.measure.bench_worker): a kernel fault there is
sticky, and would leave every later config of the bench a `launch_error`. A fault or a
timeout ends the worker after its row is recorded, and a fresh one takes the next config.
The emulator runs in-process: its kernels already run in a runner process of their own.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from emmy.base import dtypes
from emmy.base.errors import EmmyError, KernelCompileError, KernelLaunchError
from emmy.base.problem_key import SiteRef
from emmy.base.regime import Regime
from emmy.compiler import Program, TensorSpec, compile_variants, poisoned
from emmy.dsl.library import active_params, complete_key, declaration
from emmy.families.family import HostCallFamily, MeasuredFamily
from emmy.families.registry import FAMILIES, of_kind
from emmy.measure.bench_worker import DeviceWorker, isolated
from emmy.measure.reference import as_outputs, reference, tolerance
from emmy.program import Choice, KernelInfo, PathCall, host_call_of
from emmy.recall.tuning_db import Row, TuningDB, canonical_config
from emmy.runtime.convert import (
    compare,
    from_storage,
    to_storage,
)
from emmy.runtime.device import BufferArg, Device, Launch, Step, Timing
from emmy.runtime.faults import is_timeout
from emmy.sites.fork_space import ForkSpace

#: a timing whose interquartile range exceeds this fraction of its median is unstable; the
#: emulator shares the CPU with everything else on the machine, so it is allowed more
UNSTABLE_SPREAD = {"emu": 0.5}
UNSTABLE_SPREAD_GPU = 0.1
#: a config is timed over at least this many seconds in all (more repetitions where its
#: median is short): eleven runs of a 50 µs kernel are over before one interruption of the
#: host evens out
MIN_TIMED_SECONDS = {"emu": 0.05}
MIN_TIMED_SECONDS_GPU = 0.01
#: the most repetitions a config gets to fill MIN_TIMED_SECONDS
MAX_REPETITIONS = 1000


@dataclass
class BenchOptions:
    #: each fork's values to measure (`--pin fork=v1,v2`: emmy.base.compile_options.parse_pin_values)
    pins: dict[str, list[int | str]] = field(default_factory=dict)
    sweep: list[str] = field(default_factory=list)  # fork names, or ["all"]
    max_rows: int = 32
    sample: int = 0  # random valid configs besides the pick, the same for the same key
    force: bool = False
    warmup: int = 1
    repetitions: int = 11
    timeout: float = 120.0  # seconds for each run or timing of a config


@dataclass
class Outcome:
    site: str
    config: dict[str, int | str]
    row: Row
    recalled: bool


@dataclass(frozen=True)
class Compiled:
    """A config compiled: the source holding its kernel, and the kernel (none for a host
    call, which the device runs)."""

    source: str
    kernel: KernelInfo | None


@dataclass(frozen=True)
class CompileFailed:
    """A config whose source did not compile: the compiler's first lines."""

    message: str


CompileResult = Compiled | CompileFailed


@dataclass
class SiteWork:
    """A site a bench measures: its name in the program, what it is, the compile's pick,
    its buffers and the forks the compile had pinned."""

    name: str
    site: SiteRef
    pick: dict[str, int | str]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    pinned: frozenset[str] = frozenset()


def requested_configs(work: SiteWork, options: BenchOptions) -> list[dict[str, int | str]]:
    """The pick first, then the requested configs in declared order, without repeats.

    Pinned values and sweeps vary one fork at a time around the declared default (with the
    user's single-valued pins), not around the pick: the pick moves as rows are recorded,
    and the same bench run twice must ask for the same rows. `--sample N` adds N valid
    configs drawn at random with a seed of the site (a dataset's unbiased columns)."""
    space = ForkSpace.of(declaration(work.site.family))
    key = work.site.values
    valid = list(space.configs(key))
    forks = set(space.names)
    # the default a compile takes: the declared one, or the valid config nearest to it
    default = space.default_config(key) or space.declared
    base = {**default, **{n: work.pick[n] for n in work.pinned}}
    if base not in valid:
        base = work.pick
    wanted: list[dict] = [work.pick]
    pins = {n: v for n, v in options.pins.items() if n in forks}
    if pins:
        names = list(pins)
        for values in itertools.product(*(pins[n] for n in names)):
            candidate = {**base, **dict(zip(names, values, strict=True))}
            if candidate in valid:
                wanted.append(candidate)
    if "all" in options.sweep:
        wanted += valid
    else:
        for name in options.sweep:
            if name not in forks:
                continue  # a fork of another site's family
            wanted += [c for c in valid if all(c[n] == base[n] for n in forks - {name})]
    if options.sample:
        # seeded by the site, so the same bench asks for the same rows on every machine
        text = f"{work.site.family}\0{work.site.key}"
        seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
        wanted += random.Random(seed).sample(valid, min(options.sample, len(valid)))
    unique: dict[str, dict] = {}
    for config in wanted:
        unique.setdefault(canonical_config(config), config)
    return list(unique.values())[: options.max_rows + 1]


def random_input(spec) -> torch.Tensor:
    """Fresh random values for a kernel input, never zeros: normal floats, or integer
    indices (kernels clamp ids into their table, and so do the references); a boolean
    mask's bytes are 0 or 1."""
    if spec.dtype == "i8":
        return torch.randint(0, 2, spec.shape, dtype=torch.int8)
    if spec.dtype in ("i32", "i64"):
        return torch.randint(0, 1 << 20, spec.shape, dtype=dtypes.torch_dtype(spec.dtype))
    return torch.randn(spec.shape, dtype=torch.float64).to(dtypes.torch_dtype(spec.dtype))


def declared_input_shapes(family_name: str, key: dict, count: int) -> list[tuple[int, ...] | None]:
    """The shape each of a family's `count` inputs declares at a key (a program's buffer
    may hold the same elements under another shape); None for the inputs of a variadic
    parameter, whose shapes depend on how each is read."""
    decl = declaration(family_name)
    key = complete_key(decl, key)
    params = [p for p in active_params(decl, key) if p.direction == "in"]
    variadic = count - sum(not p.variadic for p in params)
    shapes: list[tuple[int, ...] | None] = []
    for param in params:
        if param.variadic:
            shapes += [None] * variadic
        else:
            shapes.append(param.shape(key))
    return shapes


def program_sites(program: Program) -> list[SiteWork]:
    """The kernel sites of a program a bench measures, each once however often the program
    calls it, with the specs of its buffers and the forks its compile had pinned."""
    every = [*program.inputs, *program.constants, *program.outputs, *program.temporaries]
    specs = {s.name: s for s in every}
    seen, work = set(), []
    for call in program.calls:
        if call.kernel not in program.kernels:
            continue  # an op torch runs, or a host call: no emitted kernel to measure
        info = program.kernels[call.kernel]
        if info.site in seen:
            continue  # one site measured once, however often the program calls it
        seen.add(info.site)
        decl = declaration(info.site.family)
        params = active_params(decl, info.site.values)
        count = sum(p.direction == "out" for p in params)
        buffers = [specs[b] for b in call.buffers]
        inputs, outputs = buffers[:-count], buffers[-count:]
        provenance = program.provenance.get(call.kernel)
        forks = provenance.forks if provenance is not None else {}
        pinned = frozenset(name for name, source in forks.items() if source == "pin")
        work.append(SiteWork(call.kernel, info.site, info.config, inputs, outputs, pinned))
    return work


class Bench:
    """One bench run over a program's sites on one device and regime."""

    def __init__(
        self,
        device: Device,
        regime: Regime,
        db: TuningDB,
        options: BenchOptions,
        progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    ):
        self.device, self.regime, self.db, self.options = device, regime, db, options
        #: where configs run: a worker process on a GPU (see the module's docstring)
        self.runner = isolated(device)
        self.progress = progress
        self.bench_id = f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
        self.compiler = getattr(device, "compiler", "unknown")
        self.outcomes: list[Outcome] = []
        #: every row this bench recorded or recalled, the kernel rows of a choice's options
        #: among them (a campaign's worker returns them all)
        self.rows: list[Row] = []

    def run(self, program: Program) -> list[Outcome]:
        sites = program_sites(program)
        forks = {f.name for work in sites for f in declaration(work.site.family).forks}
        forks |= {name for choice in program.choices.values() for name in choice.config}
        for name in set(self.options.sweep) - {"all"} - forks:
            raise EmmyError(
                f"--sweep {name}: no fork named {name!r} (forks: {', '.join(sorted(forks))})"
            )
        for name in set(self.options.pins) - forks:
            raise EmmyError(
                f"--pin {name}: no fork named {name!r} (forks: {', '.join(sorted(forks))})"
            )
        try:
            for work in sites:
                self.bench_site(work)
            for name, choice in program.choices.items():
                self.bench_choice(name, choice)
        finally:
            if isinstance(self.runner, DeviceWorker) and self.runner is not self.device:
                self.runner.close()  # the worker isolated() started for this bench
        return self.outcomes

    def choice_options(self, choice: Choice) -> list[str]:
        """The options of a host-level choice this bench measures: the pick, then every
        option where swept, and the pinned ones."""
        (fork_name,) = choice.config
        options = list(choice.paths)
        pick = choice.config[fork_name]
        assert isinstance(pick, str), f"a choice picks an option by name, not {pick!r}"
        wanted = [pick]
        if "all" in self.options.sweep or fork_name in self.options.sweep:
            wanted += options
        pins = self.options.pins.get(fork_name, [])
        wanted += [o for o in pins if isinstance(o, str) and o in options]
        return list(dict.fromkeys(wanted))

    def bench_choice(self, name: str, choice: Choice, options: Sequence[str] | None = None) -> None:
        """A host-level choice (attention fused or unfused): each option's time is the sum
        of its kernels' times, each kernel measured (or recalled) as a row of its own site.
        `options`: those to measure (default: `choice_options`)."""
        (fork_name,) = choice.config
        work = SiteWork(name, choice.site, choice.config, [], [])
        for option in self.choice_options(choice) if options is None else options:
            config: dict[str, int | str] = {fork_name: option}
            origin = "pick" if config == choice.config else "forced"
            if self.recall(work, config):
                continue
            self.progress(
                f"{name} ({choice.site.family}, {choice.site.key}): measuring {_short(config)}"
            )
            calls = choice.paths[option]
            parts = [self.kernel_row(f"{name}.{option}", call) for call in calls]
            row = self.store(self.sum_row(work, config, origin, parts))
            self.outcomes.append(Outcome(name, config, row, recalled=False))
            self.progress(f"  {_short(config)}: {_shown(row)} ({len(parts)} kernel(s))")

    def kernel_row(self, site: str, call: PathCall) -> Row:
        """The row of one kernel of a choice's option at its config: recalled, or measured
        and recorded under its own family and key."""
        config = call.config
        known = self.known(call.site, config)
        if known is not None:
            return known
        inputs, outputs = (
            [TensorSpec(f"{kind}{i}", shape, dtype) for i, (shape, dtype) in enumerate(tensors)]
            for kind, tensors in (("inputs", call.inputs), ("outputs", call.outputs))
        )
        work = SiteWork(site, call.site, config, inputs, outputs)
        if call.site.family in of_kind(HostCallFamily):  # no kernel to compile: the device runs it
            return self.record(work, config, "forced", Compiled("", None))
        return self.record(
            work, config, "forced", self.compile(work, [config])[canonical_config(config)]
        )

    def record(self, work: SiteWork, config: dict, origin: str, compiled: CompileResult) -> Row:
        """Measures a compiled config (or notes its compile error) and records the row."""
        if isinstance(compiled, CompileFailed):
            row = self.row(work, config, origin, "compile_error", message=compiled.message)
        else:
            row = self.measure(work, config, origin, compiled.source, compiled.kernel)
        return self.store(row)

    def store(self, row: Row) -> Row:
        """Writes a new row to the database (its own transaction); the row with its id."""
        (row_id,) = self.db.add([row])
        stored = _with_id(row, row_id)
        self.rows.append(stored)
        return stored

    def sum_row(self, work: SiteWork, config: dict, origin: str, parts: list[Row]) -> Row:
        """An option's row from its kernels' rows: the sum of their medians; the first
        failure among them, if any, is the option's."""
        rows = ",".join(str(p.id) for p in parts)
        failed = next((p for p in parts if p.median_s is None), None)
        if failed is not None:
            message = f"kernel {failed.family} (row {failed.id}): {failed.status}: {failed.message}"
            return self.row(work, config, origin, failed.status, message=message)
        unstable = any(p.status != "ok" for p in parts)
        return self.row(
            work,
            config,
            origin,
            "unstable" if unstable else "ok",
            median_s=sum(p.median_s or 0.0 for p in parts),
            spread=max(p.spread or 0.0 for p in parts),
            repetitions=min(p.repetitions for p in parts),
            batch=min(p.batch for p in parts),
            message=f"sum of the medians of rows {rows}",
        )

    def known(self, site: SiteRef, config: dict) -> Row | None:
        """The row already measured for this config on this device and regime (none with
        --force)."""
        if self.options.force:
            return None
        identity, regime = self.device.identity, self.regime.id
        row = self.db.find(identity, regime, site.family, str(site.key), config)
        if row is not None:
            self.rows.append(row)
        return row

    def recall(self, work: SiteWork, config: dict) -> bool:
        """Takes the known row of a config as its outcome, if there is one."""
        known = self.known(work.site, config)
        if known is None:
            return False
        self.outcomes.append(Outcome(work.name, config, known, recalled=True))
        self.progress(f"  {work.name} {_short(config)}: recalled row {known.id}")
        return True

    def bench_site(self, work: SiteWork, configs: Sequence[dict] | None = None) -> None:
        """Measures (or recalls) the configs of a site: `configs`, or those the options ask
        for (`requested_configs`)."""
        configs = requested_configs(work, self.options) if configs is None else configs
        fresh = []
        for config in configs:
            if not self.recall(work, config):
                fresh.append((config, "pick" if config == work.pick else "forced"))
        if not fresh:
            return
        site = work.site
        self.progress(f"{work.name} ({site.family}, {site.key}): measuring {len(fresh)} config(s)")
        sources = self.compile(work, [c for c, _ in fresh])
        for index, (config, origin) in enumerate(fresh, 1):
            row = self.record(work, config, origin, sources[canonical_config(config)])
            self.outcomes.append(Outcome(work.name, config, row, recalled=False))
            self.progress(f"  [{index}/{len(fresh)}] {_short(config)}: {_shown(row)}")

    def compile(self, work: SiteWork, configs: list[dict]) -> dict[str, CompileResult]:
        """All configs of a site in one source; on a compile error, one by one, so each
        failing config gets its own message."""
        program = compile_variants(work.site.family, work.site.values, configs, prefix="bench_")
        try:
            self.prepare(program.source)
            return {
                canonical_config(c): Compiled(program.source, info)
                for c, info in zip(configs, program.kernels.values(), strict=True)
            }
        except KernelCompileError:
            pass
        result: dict[str, CompileResult] = {}
        for config in configs:
            single = compile_variants(work.site.family, work.site.values, [config], prefix="bench_")
            try:
                self.prepare(single.source)
                result[canonical_config(config)] = Compiled(
                    single.source, next(iter(single.kernels.values()))
                )
            except KernelCompileError as error:
                result[canonical_config(config)] = CompileFailed(_first_lines(str(error)))
        return result

    def prepare(self, source: str) -> None:
        """Compiles for the device (cached), so compile errors show before any launch."""
        prepare = getattr(self.device, "prepare", None)
        if prepare is not None:
            prepare(source)

    def measure(
        self, work: SiteWork, config: dict, origin: str, source: str, info: KernelInfo | None
    ) -> Row:
        """Runs one compiled config (or a host call: `info` None) on fresh inputs, checks it
        against its reference, and times it."""
        dtype = dtypes.torch_dtype(work.outputs[0].dtype)
        key, tensors = _fresh_inputs(work, host=info is None)
        buffers, outputs = _buffers(work, tensors)
        launch = _launch(work, info, tuple(BufferArg(n) for n in buffers))
        kernel_hash = hashlib.sha256(source.encode()).hexdigest()[:16]

        def failed(status: str, message: str) -> Row:
            return self.row(work, config, origin, status, message=message, kernel_hash=kernel_hash)

        try:
            self.runner.run(source, [launch], buffers, timeout=self.options.timeout)
            wrong = _wrong_result(work, key, tensors, buffers, outputs, dtype)
            if wrong is not None:
                return failed("wrong_result", wrong)
            timing = self.timed(source, launch, buffers)
        except KernelLaunchError as error:
            if self.runner.fault() is not None:
                self.runner.reset()  # the next config runs on a fresh context
            status = "timeout" if is_timeout(str(error)) else "launch_error"
            return failed(status, _first_lines(str(error)))
        return self._timed_row(work, config, origin, timing, kernel_hash)

    def _timed_row(
        self, work: SiteWork, config: dict, origin: str, timing: Timing, kernel_hash: str
    ) -> Row:
        """The row of a config that ran right: its median, "unstable" where the spread of
        its times is above the device's limit, and the launches batched per timed window."""
        times = timing.seconds
        median = statistics.median(times)
        q1, _, q3 = np.percentile(times, [25, 50, 75])
        spread = float((q3 - q1) / median) if median > 0 else 0.0
        limit = UNSTABLE_SPREAD.get(self.device.identity, UNSTABLE_SPREAD_GPU)
        host = statistics.median(timing.host_seconds) if timing.host_seconds else None
        status, message = "ok", None
        if timing.host_bound and host is not None:  # a bound host has its times
            status = "host_bound"
            message = (
                f"the host took {host * 1e6:.3g} µs to enqueue a pass the device ran in"
                f" {median * 1e6:.3g} µs: the window timed the host"
            )
        elif spread > limit:
            status, message = "unstable", f"interquartile spread {spread:.0%} of the median"
        return self.row(
            work,
            config,
            origin,
            status,
            median_s=median,
            spread=spread,
            repetitions=len(times),
            batch=timing.batch,
            host_s=host,
            message=message,
            kernel_hash=kernel_hash,
        )

    def timed(self, source: str, launch: Step, buffers: dict[str, np.ndarray]) -> Timing:
        """The timing of one launch: the configured repetitions, then, where they add up to
        less than the device's MIN_TIMED_SECONDS, as fill it (the first round is
        dropped). A repetition is one window of `batch` launches back to back (a GPU picks
        the batch so that the window is long enough to time), so the time spent is
        seconds x batch each."""
        warmup, repetitions, timeout = (
            self.options.warmup, self.options.repetitions, self.options.timeout,
        )  # fmt: skip
        timing = self.runner.time(
            source, [launch], buffers, warmup=warmup, repetitions=repetitions, timeout=timeout
        )
        times = timing.seconds
        least = MIN_TIMED_SECONDS.get(self.device.identity, MIN_TIMED_SECONDS_GPU)
        median = statistics.median(times) if times else 0.0
        if not times or sum(times) * timing.batch >= least or median <= 0:
            return timing
        wanted = min(MAX_REPETITIONS, math.ceil(least / (median * timing.batch)))
        return self.runner.time(
            source, [launch], buffers, warmup=warmup, repetitions=wanted, timeout=timeout
        )

    def row(self, work: SiteWork, config: dict, origin: str, status: str, **fields) -> Row:
        return Row(
            device=self.device.identity,
            regime=self.regime.id,
            regime_words=self.regime.words,
            compiler=self.compiler,
            family=work.site.family,
            key=str(work.site.key),
            config=dict(config),
            origin=origin,
            status=status,
            bench=self.bench_id,
            **fields,
        )


def _fresh_inputs(work: SiteWork, host: bool) -> tuple[dict, list[torch.Tensor]]:
    """The key its reference reads and fresh random inputs (never zeros) of a site, in
    the shapes its family declares (a host call: the vendor product's)."""
    key = dict(work.site.values)
    family = work.site.family
    if host:  # the vendor library's operation: no kernel declares its shapes
        shapes: list = list(host_call_of(work.site, ()).shapes[: len(work.inputs)])
    else:
        shapes = declared_input_shapes(family, key, len(work.inputs))
        # the canonical text leaves out keys at their defaults; references read them all
        key = complete_key(declaration(family), key)
    tensors = [
        random_input(spec) if shape is None else random_input(spec).reshape(shape)
        for spec, shape in zip(work.inputs, shapes, strict=True)
    ]
    entry = FAMILIES.get(family)
    if not isinstance(entry, MeasuredFamily):
        return key, tensors
    for index, (lo, hi) in entry.input_ranges(key).items():
        tensors[index] = torch.randint(lo, hi + 1, tensors[index].shape, dtype=tensors[index].dtype)
    if entry.derive_inputs is not None:
        tensors = entry.derive_inputs(key, tensors)
    return key, tensors


def _buffers(
    work: SiteWork, tensors: list[torch.Tensor]
) -> tuple[dict[str, np.ndarray], list[str]]:
    """The buffers of a run, `in<i>` the inputs and `out<i>` the outputs (poisoned); the
    outputs' names."""
    buffers = {f"in{i}": to_storage(t) for i, t in enumerate(tensors)}
    outputs = [f"out{i}" for i in range(len(work.outputs))]
    for name, spec in zip(outputs, work.outputs, strict=True):
        buffers[name] = poisoned(spec)
    return buffers, outputs


def _launch(work: SiteWork, info, args: tuple[BufferArg, ...]) -> Step:
    """The step that runs a config: its kernel's launch, or the host call (`info` None)."""
    if info is None:
        return host_call_of(work.site, args)
    return Launch(info.name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, args)


def _wrong_result(
    work: SiteWork,
    key: dict,
    tensors: list[torch.Tensor],
    buffers: dict[str, np.ndarray],
    outputs: list[str],
    dtype: torch.dtype,
) -> str | None:
    """How the outputs of a run differ from the family's reference, or None if they agree."""
    wants = as_outputs(reference(work.site.family)(key, tensors))
    for name, want in zip(outputs, wants, strict=True):
        actual = from_storage(buffers[name], dtype).reshape(want.shape)
        check = compare(actual, want.to(dtype), tolerance(work.site.family, key, dtype))
        if not check.ok:
            where = f"output {name}: " if len(outputs) > 1 else ""
            return where + check.summary
    return None


def _with_id(row: Row, row_id: int) -> Row:
    return replace(row, id=row_id)


def _shown(row: Row) -> str:
    """A row in a progress line: its time (and its batch of launches per timed window,
    where more than one), or its status."""
    if row.median_s is None:
        return row.status
    batch = f" (batch {row.batch})" if row.batch > 1 else ""
    return f"{row.median_s * 1e3:.3f} ms{batch}"


def _short(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def _first_lines(text: str, lines: int = 3) -> str:
    """The gist of a failure: its error lines if it names any, else its first lines."""
    all_lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in all_lines if "error" in line.lower()]
    return " | ".join((errors or all_lines)[:lines])


def summary_table(outcomes: list[Outcome], picks: dict[str, dict]) -> list[str]:
    """The pick beside every row of each site: time and speedup over the pick."""
    lines = []
    by_site: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_site.setdefault(outcome.site, []).append(outcome)
    for site, rows in by_site.items():
        pick = next((o for o in rows if o.config == picks[site]), None)
        pick_time = pick.row.median_s if pick is not None else None
        lines.append(f"{site}: pick {_short(picks[site])}")
        lines.append(f"  {'config':<60} {'time':>11} {'vs pick':>8}  status")
        ordered = sorted(rows, key=lambda o: (o.row.median_s is None, o.row.median_s or 0.0))
        for o in ordered:
            mark = "*" if o.config == picks[site] else " "
            time_text = f"{o.row.median_s * 1e3:.3f} ms" if o.row.median_s is not None else "-"
            speedup = f"{pick_time / o.row.median_s:.2f}x" if pick_time and o.row.median_s else "-"
            source = "recalled" if o.recalled else "measured"
            status = o.row.status + (
                f" ({o.row.message})" if o.row.message and not o.row.clean else ""
            )
            lines.append(
                f"{mark} {_short(o.config):<60} {time_text:>11} {speedup:>8}  {status}, {source}"
            )
    return lines
