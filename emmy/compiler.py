"""The compile pipeline: emmy.graph → sites → resolved forks → CUDA → a runnable program.

    recognise-attention → offer-paths → merge-reshapes → fuse-graph → lower-sites
    → offer-paths → resolve-forks → specialize-forks
    → inline-host-paths → plan-host → emit-cuda → NVRTC (for a GPU target)

(the passes are emmy.passes.pipeline's COMPILE_PIPELINE, run as the text of an xDSL
PassPipeline that emmy-opt runs alike: compile_pipeline). resolve-forks, given the compile's
options, builds the oracle stack it asks and first imports the golden files' measured
entries into the tuning database (which `emmy compile --explain` shows).

plan-host, the last pass, records the host's launch plan on the module (`#host.plan`): it
binds buffers to every kernel call, and marks `aliased` a kernel parameter that a call
binds to bytes another parameter of it writes (a KV cache updated in place), which
emit-cuda prints without `__restrict__`.

The result is an emmy.program.Program: the emitted source, the kernels with their launch
geometry and decisions, the host's launch plan, and the time each stage took.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass, PassPipeline, PassPipelineCallbackType

from emmy.backend.emit_cuda import CudaProgram, emit_module
from emmy.backend.nvrtc import compile_cuda
from emmy.base.compile_options import CompileOptions, Pins
from emmy.base.dtypes import dtype_name
from emmy.base.errors import EmmyError
from emmy.base.identity import EMU, arch_of
from emmy.base.problem_key import SiteRef
from emmy.dialects import fork, graph
from emmy.dsl.library import declaration
from emmy.passes.pipeline import COMPILE_PIPELINE, compile_pipeline
from emmy.passes.plan_host import PlanHost, recorded_plan
from emmy.passes.resolve_forks import ResolveForks, golden_imports
from emmy.passes.specialize_forks import SpecializeForks
from emmy.passes.verify import InvalidIR, verify_dominance, verify_module
from emmy.program import (
    Choice,
    PathCall,
    PathTensor,
    Program,
    SiteProvenance,
    TensorSpec,
    poisoned,
)
from emmy.runtime.emu import compile_emu
from emmy.sites.lower import instantiate

__all__ = [
    "Program",
    "TensorSpec",
    "Variant",
    "poisoned",
    "compile_graph",
    "compile_sites",
    "compile_variants",
]


def _sites(module: ModuleOp) -> list[fork.SiteOp]:
    return [op for op in module.ops if isinstance(op, fork.SiteOp)]


def _provenance(module: ModuleOp) -> dict[str, SiteProvenance]:
    """Per site: the source of each fork, and the decision's oracle, evidence, runner-up."""
    result = {}
    for site in _sites(module):
        if site.provenance is None:
            continue
        forks = site.provenance.as_dict()
        decision = site.decision
        result[site.sym_name.data] = (
            SiteProvenance(forks)
            if decision is None
            else SiteProvenance(
                forks, decision.oracle.data, decision.evidence_value(), decision.runner_up_value()
            )
        )
    return result


def _tensor(typ: TensorType) -> PathTensor:
    return tuple(typ.get_shape()), dtype_name(typ.element_type)


def _path_call(call: fork.PathCallAttr) -> PathCall:
    # a path's config sorted, as the report has always listed it
    return PathCall(
        call.site,
        dict(sorted(call.config.as_dict().items())),
        tuple(_tensor(t) for t in call.inputs),
        tuple(_tensor(t) for t in call.outputs),
    )


def _choices(module: ModuleOp) -> dict[str, Choice]:
    """Per host-level choice site: family, key, the chosen config, and the kernel calls of
    every option (options in sorted order, as the report has always listed them)."""
    result = {}
    for site in _sites(module):
        if site.site_kind != fork.SiteKind.CHOICE or site.paths is None:
            continue
        assert site.config is not None, "a choice is specialised before its paths are taken"
        paths = site.paths.as_dict()
        result[site.sym_name.data] = Choice(
            site.ref,
            site.config.as_dict(),
            {name: tuple(_path_call(c) for c in paths[name]) for name in sorted(paths)},
        )
    return result


def _host_calls(module: ModuleOp) -> dict[str, SiteRef]:
    """Per site the device runs as a host call: its family and key."""
    return {
        site.sym_name.data: site.ref
        for site in _sites(module)
        if site.site_kind == fork.SiteKind.HOST_CALL
    }


def _coverage(module: ModuleOp) -> dict[str, int | dict[str, int]]:
    """The counts the frontend recorded of where the graph's ops run (graph.CoverageAttr;
    `per_element_ops` by op name), or {} for a graph that came as text."""
    main = next((op for op in module.ops if isinstance(op, func.FuncOp)), None)
    counts = main.attributes.get("coverage") if main is not None else None
    return counts.counts() if isinstance(counts, graph.CoverageAttr) else {}


#: how a compile verifies the module (compile_graph's `verify_each`, EMMY_VERIFY_EACH):
#: "full" after every pass (op verifiers and dominance; tests/test_verify_each_pass.py
#: compiles the recipes and the tiny vision models so),
#: "dominance" after every pass and in full after the last (a compile's default: the op
#: verifiers cost as the passes), "last" in full after the last pass alone
VERIFY_MODES = ("full", "dominance", "last")


def verify_mode(verify_each: bool | None = None) -> str:
    """The verification of a compile (VERIFY_MODES): `verify_each` True is "full", False
    "last"; None as EMMY_VERIFY_EACH says (1: "full", 0: "last", unset: "dominance")."""
    if verify_each is None:
        verify_each = {"1": True, "0": False}.get(os.environ.get("EMMY_VERIFY_EACH", ""))
    return {True: "full", False: "last", None: "dominance"}[verify_each]


def verify_after(compile_pass: ModulePass, module: ModuleOp, mode: str = "full") -> None:
    """Verifies `module` as `compile_pass` left it: in full, or its dominance alone
    (`mode` "dominance"); an EmmyError naming the pass if it does not verify."""
    check = verify_dominance if mode == "dominance" else verify_module
    _verify(module, f"after pass {compile_pass.name}", check)


def compile_graph(
    module: ModuleOp,
    options: CompileOptions | None = None,
    *,
    constants: Sequence[str] = (),
    compile_kernels: bool = True,
    verify_each: bool | None = None,
) -> Program:
    """Compiles a graph module as `options` say (default: CompileOptions(), for the
    emulator): forks are decided by the oracle stack of its oracles, tuning database and
    golden files in scope. The module is verified after every pass as
    verify_mode(`verify_each`) says."""
    options = CompileOptions() if options is None else options
    timings: dict[str, float] = {}
    start = time.perf_counter()
    passes = COMPILE_PIPELINE
    spec = compile_pipeline(
        ResolveForks.of(options), PlanHost(constants=tuple(constants)), passes=passes
    )
    pipeline = PassPipeline.parse_spec(
        {p.name: (lambda p=p: p) for p in passes}, spec, _verifier(verify_mode(verify_each))
    )
    pipeline.apply(Context(), module)
    cuda: CudaProgram = emit_module(module)
    timings["passes"] = time.perf_counter() - start
    program = _program(module, options.target, cuda, timings)
    if compile_kernels:
        _compile_kernels(program, options.flags)
    return program


def _verifier(mode: str) -> PassPipelineCallbackType:
    """What the pipeline runs between its passes: the module verified as it comes and after
    every pass as `mode` says (verify_mode), a module that does not verify an EmmyError
    naming the pass that left it so. "last" verifies it once the passes that rewrite it are
    done, before plan-host reads it."""
    check = verify_dominance if mode == "dominance" else verify_module

    def between(previous: ModulePass | None, module: ModuleOp, following: ModulePass | None):
        if mode == "last":
            if following is not None and following.name == PlanHost.name:
                _verify(module, "after the passes", verify_module)
            return
        if previous is None:
            _verify(module, "as the frontend gave it, before the first pass", check)
        else:
            verify_after(previous, module, mode)
        if following is None and mode == "dominance":
            # the op verifiers, once (the last pass's dominance is known)
            where = "after the passes (EMMY_VERIFY_EACH=1 verifies it after each, naming the pass)"
            _verify(module, where, functools.partial(verify_module, dominance=False))

    return between


def _verify(module: ModuleOp, when: str, check: Callable[[ModuleOp], None]) -> None:
    try:
        check(module)
    except InvalidIR as error:
        raise EmmyError(f"the IR is invalid {when}: {error}") from error


def _program(
    module: ModuleOp, target: str, cuda: CudaProgram, timings: dict[str, float]
) -> Program:
    """The program of a compiled module (its launch plan plan-host's), before its kernels
    are compiled for the target."""
    plan = recorded_plan(module)
    return Program(
        target=target,
        source=cuda.source,
        kernels=cuda.kernels,
        inputs=[spec.spec() for spec in plan.inputs],
        outputs=[spec.spec() for spec in plan.outputs],
        temporaries=[spec.spec() for spec in plan.temporaries],
        calls=[call.call() for call in plan.calls],
        ir=str(module),
        provenance=_provenance(module),
        choices=_choices(module),
        host_calls=_host_calls(module),
        fallbacks=plan.fallback_entries(),
        coverage=_coverage(module),
        constants=[spec.spec() for spec in plan.constants],
        mutated_inputs=[name.data for name in plan.mutated_inputs],
        arena=plan.offsets(),
        arena_bytes=plan.arena_bytes.value.data,
        timings=timings,
        golden_imports=golden_imports(module),
    )


def _compile_kernels(program: Program, flags: Sequence[str]) -> None:
    """Compiles the program's source for its target: with g++ for the emulator, else with
    NVRTC, keeping the cubin, the PTX, the regime and each kernel's resources."""
    timings = program.timings
    start = time.perf_counter()
    if program.target == EMU:
        compile_emu(program.source)
        timings["g++"] = time.perf_counter() - start
        return
    compiled = compile_cuda(program.source, arch_of(program.target), flags)
    timings["nvrtc"] = time.perf_counter() - start
    timings["nvrtc_cache_hit"] = float(compiled.cache_hit)
    program.cubin, program.ptx = compiled.cubin, compiled.ptx
    program.regime = compiled.regime.id
    program.resources = {name: asdict(r) for name, r in compiled.resources.items()}


def compile_variants(
    family_name: str,
    key: dict[str, int | str],
    configs: Sequence[dict[str, int | str]],
    prefix: str | None = None,
) -> CudaProgram:
    """One source holding a kernel per config of one site (`<prefix><i>`, by default
    `<family>_<i>`), so many options compile in a single compiler invocation: what a bench
    measures, verified in full (compile_sites)."""
    prefix = prefix or f"{family_name}_"
    variants = [Variant(f"{prefix}{i}", family_name, key, c) for i, c in enumerate(configs)]
    return compile_sites(variants, verified=True)


@dataclass(frozen=True)
class Variant:
    """A kernel of a source of many: a site of `family` at `key`, its forks set to `config`."""

    name: str
    family: str
    key: Mapping[str, int | str]
    config: Mapping[str, int | str]


def compile_sites(variants: Sequence[Variant], *, verified: bool = False) -> CudaProgram:
    """One source holding a kernel per variant (named as it says), of any families and keys,
    so many options at many sites compile in a single compiler invocation. Each kernel is
    made as a compile makes a site's, by the same passes: resolve-forks with its config as
    its site's pins and the pins oracle alone (a config the constraints rule out is an error
    naming its site, not a kernel), then specialize-forks. `verified` runs the verifiers in
    full before and after each (a bench's kernels); the checks, which run every variant
    against float64, leave them out: over their 1,842 variants they double the time."""
    module = ModuleOp([instantiate(declaration(v.family), v.key, v.name) for v in variants])
    pins = Pins(
        (f"{v.name}.{fork_name}", value) for v in variants for fork_name, value in v.config.items()
    )
    resolve = ResolveForks(pin=str(pins), oracles="pins", db="none")
    verify = _verifier("full") if verified else None
    PassPipeline((resolve, SpecializeForks()), verify).apply(Context(), module)
    return emit_module(module)
