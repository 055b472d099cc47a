"""PyTorch's OpInfo samples run through emmy on the emulator and compared with eager.

A sweep takes a few samples of each op (`opinfo.sample_inputs("cpu", dtype)`, evenly
spread over the op's list, the same every run), calls them all from the forward of one
module and compiles that module once: one export and one g++ call for every kernel of the
group. Each sample's outputs are compared with eager torch's (integers exactly, floats at
emmy.runtime.convert's TOLERANCES). When the group's compile or run fails, or it falls back
where it must not, it is run again in halves, down to the samples at fault, so that each
failure names its sample.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

import torch
from torch import nn
from torch.utils import _pytree

import emmy
from emmy.base import dtypes
from emmy.frontend.function_builder import INTEGER_DTYPES
from emmy.runtime.convert import TOLERANCES, compare
from emmy.runtime.emu import EmuDevice

#: samples per op and dtype (the first, often 0-dim, and the last): each distinct shape is a
#: kernel to build
SAMPLES_PER_OP = 2

DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
}


@functools.cache
def op_db() -> dict[str, object]:
    """OpInfos by name (`nn.functional.layer_norm`, `softmax.with_dtype` for a variant)."""
    from torch.testing._internal.common_methods_invocations import op_db as infos

    return {
        info.name + (f".{info.variant_test_name}" if info.variant_test_name else ""): info
        for info in infos
    }


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        layout = "" if value.is_contiguous() else " non-contiguous"
        return f"{DTYPE_NAMES.get(value.dtype, value.dtype)}{list(value.shape)}{layout}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_describe(item) for item in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


#: where a sample's tensor goes among its other arguments
TENSOR = object()


@dataclass
class Sample:
    """One OpInfo sample: its op and arguments, the tensors among them apart (`tensors`,
    in pytree order), so that a module can take them as inputs."""

    op: str
    index: int
    call: Callable
    tensors: list[torch.Tensor]
    spec: _pytree.TreeSpec
    others: list[object]  # the non-tensor leaves, TENSOR where a tensor goes

    @classmethod
    def of(cls, op: str, index: int, call: Callable, sample: object) -> Sample:
        leaves, spec = _pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        tensors = [leaf.detach() for leaf in leaves if isinstance(leaf, torch.Tensor)]
        others = [TENSOR if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        return cls(op, index, call, tensors, spec, others)

    def arguments(self, tensors: Sequence[torch.Tensor] | None = None) -> tuple:
        """(input, args, kwargs) of the op, with `tensors` (by default the sample's own)."""
        given = iter(self.tensors if tensors is None else tensors)
        leaves = [next(given) if leaf is TENSOR else leaf for leaf in self.others]
        return _pytree.tree_unflatten(leaves, self.spec)

    def __call__(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The sample's op on `tensors` (its inputs, in order): its tensor results."""
        first, args, kwargs = self.arguments(tensors)
        result = self.call(first, *args, **kwargs)
        return [leaf for leaf in _pytree.tree_leaves(result) if isinstance(leaf, torch.Tensor)]

    def any_tensor(self, predicate: Callable[[torch.Tensor], bool]) -> bool:
        return any(predicate(tensor) for tensor in self.tensors)

    def describe(self) -> str:
        """`add sample 3: (f32[5, 1], f32[5], alpha=2)`: the op, and its arguments."""
        first, args, kwargs = self.arguments()
        parts = [_describe(first), *(_describe(a) for a in args)]
        parts += [f"{name}={_describe(value)}" for name, value in kwargs.items()]
        return f"{self.op} sample {self.index}: ({', '.join(parts)})"


class Kind(Enum):
    """The dtypes a sweep runs an op in: f32, one 16-bit float and one integer dtype."""

    F32 = "f32"
    HALF = "16-bit"
    INT = "int"


#: each kind's dtypes, in preference order: the first the op's OpInfo takes is swept
KIND_DTYPES = {
    Kind.F32: (torch.float32,),
    Kind.HALF: (torch.bfloat16, torch.float16),
    Kind.INT: (torch.int64, torch.int32),
}


def dtype_of(op: str, kind: Kind) -> torch.dtype | None:
    """The dtype of `kind` that OpInfo `op` is swept in, None where it takes none."""
    takes = op_db()[op].dtypes
    return next((dtype for dtype in KIND_DTYPES[kind] if dtype in takes), None)


def storable(tensor: torch.Tensor) -> bool:
    """Whether emmy has a storage type for the tensor's dtype (a float, i64, i32 or bool,
    as the frontend's Converter.type_of takes them): a uint8 or float64 tensor is refused
    whatever its op, so no sample of one is swept."""
    if tensor.dtype == torch.bool or tensor.dtype in INTEGER_DTYPES:
        return True
    return dtypes.is_float(dtypes.torch_dtype_name(tensor.dtype))


def samples(op: str, dtype: torch.dtype, count: int = SAMPLES_PER_OP) -> list[Sample]:
    """`count` samples of OpInfo `op` in `dtype`, evenly spread over its list (the first,
    often a 0-dim tensor, among them), the same every run; those with a tensor of a dtype
    emmy has no storage for (a uint8 index) are left out."""
    info = op_db()[op]
    torch.manual_seed(0)
    every = [Sample.of(op, i, info.op, s) for i, s in enumerate(info.sample_inputs("cpu", dtype))]
    every = [sample for sample in every if all(storable(t) for t in sample.tensors)]
    if len(every) <= count:
        return every
    step = (len(every) - 1) / (count - 1)
    return [every[i] for i in sorted({round(i * step) for i in range(count)})]


def samples_of(ops: Sequence[str], kind: Kind) -> list[Sample]:
    """The samples of every op of `ops` that takes a dtype of `kind`, in it."""
    chosen = []
    for op in ops:
        dtype = dtype_of(op, kind)
        if dtype is not None:
            chosen += samples(op, dtype)
    return chosen


class Samples(nn.Module):
    """Calls every sample from one forward: its inputs are all the samples' tensors, its
    outputs all their results, in order."""

    def __init__(self, group: Sequence[Sample]) -> None:
        super().__init__()
        self.group = list(group)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs, start = [], 0
        for sample in self.group:
            count = len(sample.tensors)
            outputs += sample(tensors[start : start + count])
            start += count
        return tuple(outputs)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _compare(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> list[str]:
    """One line per output that differs from eager's (in dtype, shape or values)."""
    if len(actual) != len(expected):
        return [f"{len(actual)} outputs, eager gives {len(expected)}"]
    problems = []
    for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.dtype != e.dtype or a.shape != e.shape:
            problems.append(f"output {k} is {_describe(a)}, eager gives {_describe(e)}")
            continue
        comparison = compare(a, e, TOLERANCES.get(e.dtype, (0.0, 0.0)))  # integers: exact
        if not comparison.ok:
            problems.append(f"output {k}: {comparison.summary}")
    return problems


@dataclass
class Outcome:
    """A group's run: an error that stopped it (its compile, its run), else one line per
    sample output that differs from eager, and the ops that fell back to torch."""

    error: str | None = None
    mismatches: list[str] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)


def run_module(
    module: nn.Module, inputs: Sequence[torch.Tensor], parts: Sequence[tuple[str, int]]
) -> Outcome:
    """Compiles `module` on the emulator, runs it on `inputs` and compares its outputs
    with eager's: `parts` names its outputs, in order, and how many each part gives."""
    with torch.no_grad():
        expected = module(*inputs)
    try:
        compiled = emmy.compile(module, *inputs, device=EmuDevice())
        with torch.no_grad():
            actual = compiled(*inputs)
    except Exception as error:  # noqa: BLE001 - a converter bug, a crash: named, not raised
        return Outcome(_first_line(error))
    actual, expected = (_pytree.tree_leaves(v) for v in (actual, expected))
    outcome, start = Outcome(), 0
    for name, count in parts:
        got, wanted = actual[start : start + count], expected[start : start + count]
        start += count
        outcome.mismatches += [f"{name}: {p}" for p in _compare(got, wanted)]
    outcome.fallbacks = [
        f"{entry['target']} ({entry['reason']})" for entry in compiled.program.fallbacks.values()
    ]
    return outcome


def native_failures(module: nn.Module, *inputs: torch.Tensor, native: bool = True) -> list[str]:
    """Runs `module` through emmy: one line per output that differs from eager and, if it
    must be `native`, per op that fell back to torch; or the one error that stopped the
    compile or the run."""
    with torch.no_grad():
        count = len(_pytree.tree_leaves(module(*inputs)))
    outcome = run_module(module, inputs, [(type(module).__name__, count)])
    if outcome.error is not None:
        return [outcome.error]
    fell_back = outcome.fallbacks if native else []
    return [f"fell back to torch: {f}" for f in fell_back] + outcome.mismatches


def run_group(group: Sequence[Sample]) -> Outcome:
    """Runs the group's samples as one module."""
    inputs = [t for sample in group for t in sample.tensors]
    with torch.no_grad():
        parts = [(sample.describe(), len(sample(sample.tensors))) for sample in group]
    return run_module(Samples(group), inputs, parts)


def _failures(sample: Sample, outcome: Outcome, native: bool) -> list[str]:
    """The failures of one sample's run: its error, else its fallbacks where it must not
    fall back, and its mismatches."""
    if outcome.error is not None:
        return [f"{sample.describe()}: {outcome.error}"]
    fell_back = outcome.fallbacks if native else []
    return [f"{sample.describe()}: fell back to torch: {f}" for f in fell_back] + outcome.mismatches


def check(group: Sequence[Sample], native: bool) -> list[str]:
    """The failures of a group of samples, one line each: a native group must not fall
    back to torch, any other must (else its op became native)."""
    outcome = run_group(group)
    failures = _bisect(group, outcome, native)
    if not native and outcome.error is None and not outcome.fallbacks:
        ops = ", ".join(sorted({sample.op for sample in group}))
        failures.insert(0, f"{ops}: nothing fell back to torch (native now? move it)")
    return failures


def _bisect(group: Sequence[Sample], outcome: Outcome, native: bool) -> list[str]:
    """The failures of a group's run; a run that failed as a whole (its compile, or a
    native group's fallback) is run again in halves, down to the samples at fault."""
    if outcome.error is None and not (native and outcome.fallbacks):
        return outcome.mismatches
    if len(group) == 1:
        return _failures(group[0], outcome, native)
    half = len(group) // 2
    parts = (group[:half], group[half:])
    return [line for part in parts for line in _bisect(part, run_group(part), native)]
