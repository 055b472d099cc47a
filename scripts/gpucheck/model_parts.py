"""The whole-model parts: GPT-2's forward beside torch.compile, every family's correctness,
recipes and tiny real models end to end, and a bound program per call."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

import emmy.api
from emmy.check import case, check, checked_families, dtypes_of
from emmy.runtime.convert import compare
from gpucheck.context import Context, WrongResult, call_seconds, describe_pick
from gpucheck.settings import EMMY_KERNELS, LAST_SECONDS

#: torch.compile's backend in the forward part's comparison: Inductor on a GPU; on the
#: emulator, whose figures say nothing, one that compiles in a blink (Inductor's CPU
#: compile of even the tiny GPT-2 takes 20 s of the suite), down the same code path
TORCH_COMPILE_BACKEND = {"cuda": "inductor", "emu": "aot_eager"}


def forward_part(ctx: Context) -> None:
    """GPT-2's forward in tokens/s (the recipe's own config on a GPU, batch 1 and 1024
    tokens; --forward CONFIG, tiny elsewhere), the model and its inputs on the device as a
    user runs them: emmy through both its APIs, emmy.compile and torch.compile(backend=
    emmy), with emmy's own kernels (EMMY_KERNELS) and at its defaults (--quick: the
    first alone), against torch eager (first) and torch.compile (Inductor on a GPU, last:
    its compile is the longest; compile times beside), each output checked against
    eager's before it is timed."""
    from emmy.frontend.recipes import build, resolve_case
    from emmy.runtime.convert import model_tolerance

    config = ctx.options.get("forward") or ("small" if ctx.on_gpu else "tiny")
    case = resolve_case("gpt2", config, 0, None)
    model, inputs = build(case)
    tokens = math.prod(inputs[0].shape)
    ctx.emit(("case",), {"config": config, **case.size, "dtype": case.dtype})
    model = model.to(ctx.device.torch_device)
    inputs = tuple(ctx.on_device(t) for t in inputs)
    with torch.no_grad():
        expected = model(*inputs)

    def measure(label: str, function: Callable[[], object], launches: bool) -> None:
        with torch.no_grad():
            found = compare(function(), expected, model_tolerance(expected.dtype, expected))
            if not found.ok:
                raise WrongResult(found.summary)
            seconds = call_seconds(ctx, label, function, launches)
        ctx.emit((label, "tokens_s"), tokens / seconds)
        print(f"  gpt2 {config} forward {label:28} {tokens / seconds:12.0f} tokens/s", flush=True)

    ctx.attempt("torch eager", measure, "torch eager", lambda: model(*inputs), False)
    variants = (("emmy kernels", ",".join(EMMY_KERNELS)), ("emmy default", ""))
    for label, pins in variants[:1] if ctx.quick else variants:
        compiled = ctx.attempt(
            f"emmy.compile {label}", emmy.api.compile, model, *inputs,
            device=ctx.device, pins=pins,
        )  # fmt: skip
        if compiled is not None:
            ctx.emit((label, "program"), describe_pick(compiled.program))
            ctx.attempt(label, measure, label, lambda c=compiled: c(*inputs), True)
        programs: list = []
        backend = emmy.api.backend(device=ctx.device, pins=pins, programs=programs, strict=True)
        through = torch_compiled(ctx, f"torch.compile {label}", model, inputs, backend)
        if through is not None:
            ctx.emit((f"torch.compile {label}", "graphs"), len(programs))
            ctx.attempt(f"torch.compile {label}", measure, f"torch.compile {label}", through, True)
    backend = TORCH_COMPILE_BACKEND.get(ctx.device_name)
    if backend is None:  # gpu-day's compile-only device, which prepares emmy's kernels
        return
    ctx.emit(("torch.compile", "backend"), backend)
    dynamo = torch_compiled(ctx, "torch.compile", model, inputs, backend)
    if dynamo is not None:
        ctx.attempt("torch.compile", measure, "torch.compile", dynamo, False)


def torch_compiled(ctx: Context, label: str, model, inputs: tuple, backend) -> Callable | None:
    """`model` under torch.compile with `backend`, its first call made (its compile time
    under `label`); None and a line where it fails."""
    torch._dynamo.reset()
    dynamo = torch.compile(model, backend=backend)
    start = time.perf_counter()
    with torch.no_grad():
        if ctx.attempt(f"{label}'s compile", dynamo, *inputs) is None:
            return None
    ctx.emit((label, "compile_s"), time.perf_counter() - start)
    return lambda: dynamo(*inputs)


# --- the checks --------------------------------------------------------------------------


def correctness_part(ctx: Context) -> None:
    """Every family's pairwise variants (or --families', in their order) against float64
    references, in each storage type (the first alone with --quick); the cases left when
    the part's time is all but up are listed as unchecked rather than cut."""
    cases = [
        (family_name, dtype)
        for family_name in ctx.options["families"] or checked_families()
        for dtype in (dtypes_of(family_name)[:1] if ctx.quick else dtypes_of(family_name))
    ]
    for index, (family_name, dtype) in enumerate(cases):
        if time.monotonic() > ctx.deadline - LAST_SECONDS:
            left = [f"{f}/{d}" for f, d in cases[index:]]
            ctx.emit(("unchecked",), left)
            ctx.note(f"not checked, the part's time being up: {', '.join(left)}")
            return
        start = time.perf_counter()
        c = ctx.attempt(f"{family_name} {dtype}: building the case", case, family_name, dtype)
        if c is None:
            continue
        failures = ctx.attempt(f"{family_name} {dtype}", check, c, ctx.device)
        failures = ["it raised"] if failures is None else failures
        ctx.emit(
            (f"{family_name}/{dtype}",),
            {"variants": len(c.launches), "failures": failures[:5],
             "seconds": round(time.perf_counter() - start, 2)},
        )  # fmt: skip
        status = "ok" if not failures else f"{len(failures)} FAILED"
        print(f"  {family_name:12} {dtype:5} {len(c.launches):3} variants: {status}", flush=True)


def models_part(ctx: Context) -> None:
    """Each recipe compiled and run on the device end to end against torch eager; a
    recipe written RECIPE[:CONFIG]@FORK=VALUE@... is compiled with those pins (e.g.
    gpt2@matmul=kernel@path=fused: emmy's own matmul and attention kernels, where a GPU's
    default is the vendor library)."""
    from emmy.cli import main as emmy

    for recipe in ctx.options["models"].split(","):
        model, *pins = recipe.split("@")
        name, _, config = model.partition(":")
        argv = ["run", name, "--device", ctx.device_name, "--check"]
        argv += ["--config", config] if config else []
        argv += [f"--pin={pin}" for pin in pins]
        start = time.perf_counter()
        code = ctx.attempt(recipe, emmy, argv)
        ctx.emit((recipe,), {"ok": code == 0, "seconds": round(time.perf_counter() - start, 2)})
        print(f"  {recipe:12} {'ok' if code == 0 else 'FAILED'}", flush=True)


def real_models_part(ctx: Context) -> None:
    """Each tiny real model (emmy.frontend.tiny_models) through emmy.compile and
    torch.compile(backend=emmy) on the device, against eager: the largest relative error
    (≤ 1e-4 passes) and where its ops ran."""
    from emmy.frontend import tiny_models
    from emmy.program import coverage_line

    def one(name: str) -> dict:
        model, inputs = tiny_models.build(name, seq=8)
        with torch.no_grad():
            expected = model(*inputs).float()
        scale = float(expected.abs().max()) or 1.0
        entry: dict = {}
        compiled = emmy.api.compile(model, *inputs, device=ctx.device)
        entry["emmy.compile"] = float((compiled(*inputs).float() - expected).abs().max()) / scale
        entry["coverage"] = coverage_line(compiled.program)
        torch._dynamo.reset()
        dynamo = torch.compile(model, backend=emmy.api.backend(device=ctx.device))
        with torch.no_grad():
            actual = dynamo(*inputs)
        entry["torch.compile"] = float((actual.float() - expected).abs().max()) / scale
        torch._dynamo.reset()
        entry["ok"] = max(entry["emmy.compile"], entry["torch.compile"]) <= 1e-4
        return entry

    for name in ctx.options["real_models"].split(","):
        entry = ctx.attempt(name, one, name) or {"ok": False}
        ctx.emit((name,), entry)
        print(f"  {name}: {entry}", flush=True)


def runtime_part(ctx: Context) -> None:
    """Per `RECIPE:CONFIG:BATCH:SEQ` case, milliseconds per call: graph replay, launch by
    launch, and the sum of the kernels' device times."""
    from emmy.frontend.recipes import build, resolve_case

    def one(case_text: str) -> dict:
        name, config, batch, seq = case_text.split(":")
        resolved = resolve_case(name, config, 0, None, {"batch": int(batch), "seq": int(seq)})
        model, inputs = build(resolved)
        model = model.to(ctx.device.torch_device)
        inputs = [ctx.on_device(t) for t in inputs]
        entry: dict = {}
        for graphs in (True, False):
            compiled = emmy.api.compile(model, *inputs, device=ctx.device, cuda_graphs=graphs)
            label = "graph replay" if graphs else "launch by launch"
            seconds = call_seconds(ctx, label, lambda c=compiled: c(*inputs), True)
            entry["graph_ms" if graphs else "eager_ms"] = 1000 * seconds
            if not graphs:
                entry["kernels_ms"] = 1000 * kernels_seconds(
                    ctx.device, compiled.first.bound, inputs
                )
                entry["launches"] = len(compiled.program.calls)
        entry["graph_over_kernels"] = entry["graph_ms"] / entry["kernels_ms"]
        spent = entry["eager_ms"] - entry["kernels_ms"]
        entry["eager_us_per_launch"] = 1000 * spent / entry["launches"]
        return entry

    for case_text in ctx.options["runtime"].split(","):
        entry = ctx.attempt(case_text, one, case_text)
        if entry is not None:
            ctx.emit((case_text,), entry)
            print(f"  {case_text}: {entry}", flush=True)


def kernels_seconds(device, bound, inputs) -> float:
    """The sum of a bound program's launches' device times, each launch between two events
    of the device's driver. On a GPU they are all queued behind a sleeping kernel first,
    so that none waits on the host (the emulator queues them until an event reads them)."""
    from emmy.runtime.driver import PackedLaunch

    driver = device.driver
    bound(inputs)  # binds every launch's arguments to this call's tensors
    driver.synchronize()
    if device.torch_device.startswith("cuda"):
        torch.cuda._sleep(100_000_000)
    pairs = []
    for step in bound.executable.steps:
        if not isinstance(step, PackedLaunch):
            continue
        start, end = driver.event(), driver.event()
        driver.record(start)
        driver.launch(step)
        driver.record(end)
        pairs.append((start, end))
    driver.synchronize()
    return sum(driver.elapsed(start, end) for start, end in pairs)
