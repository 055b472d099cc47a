"""plan-host: the launch plan of `@main`, recorded on the module as a typed `#host.plan`:
every tensor by name (inputs, constants, outputs, temporaries), the calls in order (a
site's kernel or host call, or an op torch runs), the inputs written in place, and each
temporary's offset in one arena; and the kernel parameters that some call binds to bytes
another parameter of it writes, marked `aliased` (emit-cuda prints them without
`__restrict__`).

    func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %y = kernel.call @softmax_0(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
      func.return %y : tensor<4x8xf32>
    }
  → builtin.module attributes {host_plan = #host.plan<inputs = [#host.buffer<tensor = "in0",
      ...>], ..., calls = [#host.call<kernel = "softmax_0", buffers = ["in0", "t0"]>], ...>}

The last arguments of `@main` are the constants named by the pass's `constants` option; a
`graph.reshape` is another name for its input's buffer.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.passes import ModulePass

from emmy.base.device_records import ARENA, ARENA_ALIGNMENT, Call, TensorSpec, nbytes
from emmy.base.dtypes import dtype_name
from emmy.base.errors import EmmyError
from emmy.dialects import fallback, fork, graph, host, kernel
from emmy.dialects.graph import MUTATED_INPUTS
from emmy.families.family import KernelFamily, WritesOver
from emmy.families.registry import FAMILIES

#: the module attribute plan-host records the plan in
HOST_PLAN = "host_plan"


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
    #: the calls torch runs, by their call's name
    fallbacks: dict[str, host.FallbackAttr] = field(default_factory=dict)
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
            plan.fallbacks[name] = host.FallbackAttr.of(op)
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
        plan.fallbacks[name] = host.FallbackAttr.copy(spec.shape, spec.dtype)
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


@dataclass(frozen=True)
class PlanHost(ModulePass):
    name = "plan-host"

    #: the names of `@main`'s last arguments, its constants (a model's weights)
    constants: tuple[str, ...] = ()

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        plan = host_plan(op, self.constants)
        offsets, arena_bytes = plan_arena(plan.temporaries, plan.calls)
        # the launches decide which pointers may alias, so the plan comes before the source
        mark_aliased_params(op, overlapping_params(plan.calls, buffer_spans(plan, offsets)))
        op.attributes[HOST_PLAN] = host.PlanAttr(
            [host.BufferAttr.of(spec) for spec in plan.inputs],
            [host.BufferAttr.of(spec) for spec in plan.constants],
            [host.BufferAttr.of(spec) for spec in plan.outputs],
            [host.BufferAttr.of(spec) for spec in plan.temporaries],
            [host.CallAttr.of(call) for call in plan.calls],
            plan.fallbacks,
            plan.mutated_inputs,
            offsets,
            arena_bytes,
        )


def recorded_plan(module: ModuleOp) -> host.PlanAttr:
    """The plan plan-host recorded on the module."""
    plan = module.attributes.get(HOST_PLAN)
    if not isinstance(plan, host.PlanAttr):
        raise EmmyError("the module has no launch plan: run plan-host after the passes")
    return plan
