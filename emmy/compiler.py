"""The compile pipeline: emmy.graph → sites → resolved forks → CUDA → a runnable program.

    recognise-attention → attention-paths → fuse-graph → lower-sites → matmul-paths
    → decode-paths → resolve-forks → specialize-forks → inline-host-paths → emit-cuda
    → NVRTC (for a GPU target)

(the passes are emmy.passes.pipeline's COMPILE_PIPELINE, run as the text of an xDSL
PassPipeline that emmy-opt runs alike: compile_pipeline). resolve-forks, given the compile's
options, builds the oracle stack it asks and first imports the golden files' measured
entries into the tuning database (which `emmy compile --explain` shows).

Between the passes and emit-cuda, the host's launch plan binds buffers to every kernel
call: a kernel parameter that a call binds to bytes another parameter of it writes (a KV
cache updated in place) is marked `aliased`, and printed without `__restrict__`.

The result is an emmy.program.Program: the emitted source, the kernels with their launch
geometry and decisions, the host's launch plan, and the time each stage took.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass, PassPipeline, PassPipelineCallbackType

from emmy.backend.emit_cuda import CudaProgram, emit_module
from emmy.backend.nvrtc import compile_cuda
from emmy.base.compile_options import CompileOptions
from emmy.base.device_records import FallbackEntry
from emmy.base.dtypes import dtype_name
from emmy.base.errors import EmmyError
from emmy.base.identity import EMU, arch_of
from emmy.dialects import fallback, fork, graph, kernel
from emmy.dialects.graph import MUTATED_INPUTS
from emmy.dsl.library import family, instantiate
from emmy.families.family import KernelFamily, WritesOver
from emmy.families.registry import FAMILIES
from emmy.passes.pipeline import COMPILE_PIPELINE, compile_pipeline
from emmy.passes.resolve_forks import ResolveForks, golden_imports
from emmy.passes.specialize_forks import SpecializeForks
from emmy.passes.verify import InvalidIR, verify_dominance, verify_module
from emmy.program import (
    ARENA,
    ARENA_ALIGNMENT,
    Call,
    Choice,
    HostCallSite,
    PathCall,
    PathTensor,
    Program,
    SiteProvenance,
    TensorSpec,
    nbytes,
    poisoned,
)
from emmy.runtime.emu import compile_emu

__all__ = [
    "Program",
    "TensorSpec",
    "Variant",
    "poisoned",
    "compile_graph",
    "compile_sites",
    "compile_variants",
]


def _spec(name: str, typ: Attribute) -> TensorSpec:
    assert isinstance(typ, TensorType), f"{name} is {typ}, not a tensor"
    return TensorSpec(name, tuple(typ.get_shape()), dtype_name(typ.element_type))


@dataclass
class HostPlan:
    inputs: list[TensorSpec]
    constants: list[TensorSpec]
    outputs: list[TensorSpec]
    temporaries: list[TensorSpec]
    calls: list[Call]
    #: the calls torch runs (emmy.dialects.fallback.call_entry), by their call's name
    fallbacks: dict[str, FallbackEntry] = field(default_factory=dict)
    #: the inputs the plan writes in place, by name
    mutated_inputs: list[str] = field(default_factory=list)


def host_plan(module: ModuleOp, constants: Sequence[str] = ()) -> HostPlan:
    """Names every tensor of `@main` and lists its kernel calls in order. The last
    `len(constants)` arguments are the constants of those names; a `graph.reshape` is
    another name for its input's buffer."""
    main = next((op for op in module.ops if isinstance(op, func.FuncOp)), None)
    if main is None:
        raise EmmyError("the module has no function to run")
    args = main.body.block.args
    user = len(args) - len(constants)
    names: dict = {}
    plan = HostPlan([], [], [], [], [])
    for i, arg in enumerate(args):
        name = f"in{i}" if i < user else constants[i - user]
        names[arg] = name
        (plan.inputs if i < user else plan.constants).append(_spec(name, arg.type))
    returned: list[SSAValue] = []
    for op in main.body.block.ops:
        if isinstance(op, kernel.CallOp):
            for result in op.outputs:
                names[result] = f"t{len(plan.temporaries)}"
                plan.temporaries.append(_spec(names[result], result.type))
            if all(0 in r.type.get_shape() for r in op.outputs):
                continue  # its results are empty: there is nothing to compute, no launch
            buffers = tuple(names[v] for v in [*op.inputs, *op.outputs])
            plan.calls.append(Call(op.site.root_reference.data, buffers))
        elif isinstance(op, fallback.CallOp):
            name = f"fallback_{len(plan.fallbacks)}"
            for result in op.outputs:
                names[result] = f"t{len(plan.temporaries)}"
                plan.temporaries.append(_spec(names[result], result.type))
            plan.calls.append(Call(name, tuple(names[v] for v in [*op.inputs, *op.outputs])))
            plan.fallbacks[name] = fallback.call_entry(op)
        elif isinstance(op, graph.ReshapeOp):
            names[op.result] = names[op.input]
        elif isinstance(op, func.ReturnOp):
            returned = list(op.arguments)
        else:
            raise EmmyError(f"the host function still has {op.name} after lowering")
    written = main.attributes.get(MUTATED_INPUTS)
    if isinstance(written, ArrayAttr):
        families = {site.sym_name.data: site.family.data for site in _sites(module)}
        for value, place in zip(returned, written.data, strict=False):
            _write_in_place(plan, names[value], plan.inputs[place.value.data].name, families)
        returned = returned[len(written.data) :]
    computed = {t.name for t in plan.temporaries}
    for value in returned:
        if names[value] not in computed:
            raise EmmyError(
                "a returned value is not computed by a kernel (an input returned as is?)"
            )
        plan.outputs.append(_spec(names[value], value.type))
    outputs = {o.name for o in plan.outputs}
    plan.temporaries = [t for t in plan.temporaries if t.name not in outputs]
    return plan


def _write_in_place(plan: HostPlan, value: str, target: str, families: dict[str, str]) -> None:
    """Makes the plan leave a mutated input's new value (the temporary `value`) in the
    input's buffer `target`: the call computing it writes there when nothing reads the old
    value after it (and it reads the old value only as torch, which computes then copies, or
    a kernel that may write over that input does: Family.writes_over); else a copy into the
    input follows the last call that reads it."""
    index = next((i for i, c in enumerate(plan.calls) if value in c.buffers), None)
    if index is None or value not in {t.name for t in plan.temporaries}:
        raise EmmyError(f"the new value of input {target} is not computed by a kernel")
    plan.mutated_inputs.append(target)
    producer = plan.calls[index]
    entry = FAMILIES.get(families.get(producer.kernel, ""))
    writes_over = entry.writes_over if isinstance(entry, KernelFamily) else WritesOver.NOTHING
    over_input = producer.kernel in plan.fallbacks or writes_over == WritesOver.INPUT
    shapes = {spec.name: spec.shape for spec in [*plan.inputs, *plan.temporaries]}
    same_shape = shapes.get(target) == shapes.get(value)
    over_input |= same_shape and writes_over == WritesOver.SAME_SHAPE_INPUT
    reads_old = target in producer.buffers
    read_later = any(target in c.buffers for c in plan.calls[index + 1 :])
    if read_later or (reads_old and not over_input):
        spec = next(t for t in plan.temporaries if t.name == value)
        name = f"fallback_{len(plan.fallbacks)}"
        plan.fallbacks[name] = fallback.copy_entry(spec.shape, spec.dtype)
        plan.calls.append(Call(name, (value, target)))
        return
    plan.temporaries = [t for t in plan.temporaries if t.name != value]
    plan.calls = [
        Call(c.kernel, tuple(target if b == value else b for b in c.buffers)) for c in plan.calls
    ]


def plan_arena(
    temporaries: Sequence[TensorSpec], calls: Sequence[Call]
) -> tuple[dict[str, int], int]:
    """Offsets of the temporaries in one arena, two sharing bytes only when their lifetimes
    (first to last call that names them) do not overlap: the largest are placed first, each
    at the lowest offset free for its lifetime. Returns the offsets and the arena's size."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, call in enumerate(calls):
        for name in call.buffers:
            first.setdefault(name, index)
            last[name] = index
    sizes = {t.name: -(-nbytes(t) // ARENA_ALIGNMENT) * ARENA_ALIGNMENT for t in temporaries}
    placed: list[tuple[int, int, str]] = []  # (offset, end, name)
    offsets: dict[str, int] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], first.get(n, 0))):
        live = [
            (start, end)
            for start, end, other in placed
            if first.get(other, 0) <= last.get(name, 0) and first.get(name, 0) <= last.get(other, 0)
        ]
        offset = 0
        for start, end in sorted(live):
            if offset + sizes[name] <= start:
                break
            offset = max(offset, end)
        offsets[name] = offset
        placed.append((offset, offset + sizes[name], name))
    return offsets, max((end for _, end, _ in placed), default=0)


@dataclass(frozen=True)
class Span:
    """The bytes a tensor of the plan takes: a buffer of its own, or a range of the arena."""

    buffer: str
    start: int
    end: int

    def overlaps(self, other: Span) -> bool:
        return self.buffer == other.buffer and self.start < other.end and other.start < self.end


def buffer_spans(plan: HostPlan, offsets: Mapping[str, int]) -> dict[str, Span]:
    """Where each tensor of the plan lies, as the launches bind it (Program.buffer_arg)."""
    spans = {}
    for spec in [*plan.inputs, *plan.constants, *plan.outputs, *plan.temporaries]:
        if spec.name in offsets:
            start = offsets[spec.name]
            spans[spec.name] = Span(ARENA, start, start + nbytes(spec))
        else:
            spans[spec.name] = Span(spec.name, 0, nbytes(spec))
    return spans


def overlapping_params(
    calls: Sequence[Call], spans: Mapping[str, Span]
) -> dict[str, set[tuple[int, int]]]:
    """Per called kernel (or host call), the pairs of its parameters (i < j) that some call
    of it binds to overlapping bytes."""
    pairs: dict[str, set[tuple[int, int]]] = {}
    for call in calls:
        bound = [spans[name] for name in call.buffers]
        for i, j in itertools.combinations(range(len(bound)), 2):
            if bound[i].overlaps(bound[j]):
                pairs.setdefault(call.kernel, set()).add((i, j))
    return pairs


def mark_aliased_params(module: ModuleOp, pairs: Mapping[str, set[tuple[int, int]]]) -> None:
    """Marks `aliased` each kernel parameter that some call binds to bytes another parameter
    of the call reaches, one of the two written: emit-cuda prints it without `__restrict__`.
    Two read-only parameters on the same bytes (a `cat` of a tensor with itself) keep it,
    as `__restrict__` promises nothing about bytes no one writes."""
    for site in _sites(module):
        func = next((op for op in site.body.block.ops if isinstance(op, kernel.FuncOp)), None)
        overlapping = pairs.get(site.sym_name.data)
        if func is None or not overlapping:
            continue
        written = func.written_args()
        aliased = {k for pair in overlapping if written.intersection(pair) for k in pair}
        func.set_aliased(func.arg_names.data[k].data for k in aliased)


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
        call.family.data,
        call.key.data,
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
            site.family.data,
            str(site.key.data),
            site.config.as_dict(),
            {name: tuple(_path_call(c) for c in paths[name]) for name in sorted(paths)},
        )
    return result


def _host_calls(module: ModuleOp) -> dict[str, HostCallSite]:
    """Per site the device runs as a host call: its family and key."""
    return {
        site.sym_name.data: HostCallSite(family=site.family.data, key=str(site.key.data))
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
    spec = compile_pipeline(ResolveForks.of(options), passes)
    pipeline = PassPipeline.parse_spec(
        {p.name: (lambda p=p: p) for p in passes}, spec, _verifier(verify_mode(verify_each))
    )
    pipeline.apply(Context(), module)
    plan = host_plan(module, constants)
    arena = plan_arena(plan.temporaries, plan.calls)
    # the launches decide which pointers may alias, so the plan comes before the source
    mark_aliased_params(module, overlapping_params(plan.calls, buffer_spans(plan, arena[0])))
    cuda: CudaProgram = emit_module(module)
    timings["passes"] = time.perf_counter() - start
    program = _program(module, options.target, cuda, plan, arena, timings, golden_imports(module))
    if compile_kernels:
        _compile_kernels(program, options.flags)
    return program


def _verifier(mode: str) -> PassPipelineCallbackType:
    """What the pipeline runs between its passes: the module verified as it comes and after
    every pass as `mode` says (verify_mode), a module that does not verify an EmmyError
    naming the pass that left it so."""
    check = verify_dominance if mode == "dominance" else verify_module

    def between(previous: ModulePass | None, module: ModuleOp, following: ModulePass | None):
        if mode != "last":
            if previous is None:
                _verify(module, "as the frontend gave it, before the first pass", check)
            else:
                verify_after(previous, module, mode)
        if following is not None:
            return
        if mode == "dominance":  # the op verifiers, once (the last pass's dominance is known)
            where = "after the passes (EMMY_VERIFY_EACH=1 verifies it after each, naming the pass)"
            _verify(module, where, functools.partial(verify_module, dominance=False))
        elif mode == "last":
            _verify(module, "after the passes", verify_module)

    return between


def _verify(module: ModuleOp, when: str, check: Callable[[ModuleOp], None]) -> None:
    try:
        check(module)
    except InvalidIR as error:
        raise EmmyError(f"the IR is invalid {when}: {error}") from error


def _program(
    module: ModuleOp,
    target: str,
    cuda: CudaProgram,
    plan: HostPlan,
    arena: tuple[dict[str, int], int],
    timings: dict[str, float],
    golden_imports: list[str],
) -> Program:
    """The program of a compiled module, before its kernels are compiled for the target."""
    offsets, arena_bytes = arena
    return Program(
        target=target,
        source=cuda.source,
        kernels=cuda.kernels,
        inputs=plan.inputs,
        outputs=plan.outputs,
        temporaries=plan.temporaries,
        calls=plan.calls,
        ir=str(module),
        provenance=_provenance(module),
        choices=_choices(module),
        host_calls=_host_calls(module),
        fallbacks=plan.fallbacks,
        coverage=_coverage(module),
        constants=plan.constants,
        mutated_inputs=plan.mutated_inputs,
        arena=offsets,
        arena_bytes=arena_bytes,
        timings=timings,
        golden_imports=golden_imports,
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
    `<family>_<i>`), so many options compile in a single compiler invocation."""
    prefix = prefix or f"{family_name}_"
    return compile_sites(
        [Variant(f"{prefix}{i}", family_name, key, config) for i, config in enumerate(configs)]
    )


@dataclass(frozen=True)
class Variant:
    """A kernel of a source of many: a site of `family` at `key`, its forks set to `config`."""

    name: str
    family: str
    key: Mapping[str, int | str]
    config: Mapping[str, int | str]


def compile_sites(variants: Sequence[Variant]) -> CudaProgram:
    """One source holding a kernel per variant (named as it says), of any families and keys,
    so many options at many sites compile in a single compiler invocation."""
    sites = []
    for variant in variants:
        site = instantiate(family(variant.family), variant.key, variant.name)
        for knob in site.knobs():
            knob.resolve(variant.config[knob.knob_name.data], "forced")
        sites.append(site)
    module = ModuleOp(sites)
    SpecializeForks().apply(Context(), module)
    return emit_module(module)
