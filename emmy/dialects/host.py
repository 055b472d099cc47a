"""emmy.host: the launch plan plan-host records on a module, typed: every tensor of `@main`
by name (its inputs, constants, outputs and temporaries), the calls in order (a site's
kernel or host call, or an op torch runs), the inputs written in place, and each
temporary's offset in one arena.

    builtin.module attributes {host_plan = #host.plan<
        inputs = [#host.buffer<tensor = "in0", shape = [4 : i64, 8 : i64], dtype = "f32">],
        constants = [], outputs = [#host.buffer<tensor = "t0", ...>], temporaries = [],
        calls = [#host.call<kernel = "softmax_0", buffers = ["in0", "t0"]>], fallbacks = {},
        mutated_inputs = [], arena = {}, arena_bytes = 0 : i64>} { ... }
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute, Dialect
from xdsl.irdl import irdl_attr_definition
from xdsl.utils.exceptions import VerifyException

from emmy.base import dtypes
from emmy.base.device_records import Call, FallbackEntry, TensorSpec
from emmy.dialects import fallback
from emmy.dialects.records import RecordAttr


def _ints(values: Sequence[int]) -> ArrayAttr[IntegerAttr]:
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


def _strings(values: Sequence[str]) -> ArrayAttr[StringAttr]:
    return ArrayAttr([StringAttr(v) for v in values])


@irdl_attr_definition
class BufferAttr(RecordAttr):
    """A tensor of the plan: its name, shape and storage type.

    #host.buffer<tensor = "in0", shape = [4 : i64, 8 : i64], dtype = "f32">
    """

    name = "host.buffer"
    tensor: StringAttr
    shape: ArrayAttr[IntegerAttr]
    dtype: StringAttr

    def __init__(self, tensor: str, shape: Sequence[int], dtype: str):
        super().__init__(StringAttr(tensor), _ints(shape), StringAttr(dtype))

    @classmethod
    def of(cls, spec: TensorSpec) -> BufferAttr:
        return cls(spec.name, spec.shape, spec.dtype)

    def spec(self) -> TensorSpec:
        return TensorSpec(self.tensor.data, self.dims(), self.dtype.data)

    def dims(self) -> tuple[int, ...]:
        return tuple(d.value.data for d in self.shape)

    def verify(self) -> None:
        if not dtypes.is_storage(self.dtype.data):
            where = f"#host.buffer {self.tensor.data}"
            raise VerifyException(f"{where}: {self.dtype.data!r} is no storage type")


@irdl_attr_definition
class CallAttr(RecordAttr):
    """A call of the plan: the site (or the op torch runs) and its buffers, one per
    parameter in order.

    #host.call<kernel = "softmax_0", buffers = ["in0", "t0"]>
    """

    name = "host.call"
    kernel: StringAttr
    buffers: ArrayAttr[StringAttr]

    def __init__(self, kernel: str, buffers: Sequence[str]):
        super().__init__(StringAttr(kernel), _strings(buffers))

    @classmethod
    def of(cls, call: Call) -> CallAttr:
        return cls(call.kernel, call.buffers)

    def call(self) -> Call:
        return Call(self.kernel.data, self.buffer_names())

    def buffer_names(self) -> tuple[str, ...]:
        return tuple(b.data for b in self.buffers)


@irdl_attr_definition
class FallbackAttr(RecordAttr):
    """An op torch runs: its target, its arguments as the fallback dialect spells them, how
    many of its buffers are inputs, why emmy has no kernel for it and where the model
    calls it.

    #host.fallback<target = "aten.cumsum.default", arguments = [...], kwargs = {},
                   inputs = 1 : i64, reason = "...", source = "">
    """

    name = "host.fallback"
    target: StringAttr
    arguments: ArrayAttr
    kwargs: DictionaryAttr
    inputs: IntegerAttr
    reason: StringAttr
    source: StringAttr

    def __init__(
        self,
        target: str,
        arguments: Sequence[Attribute],
        kwargs: Mapping[str, Attribute],
        inputs: int,
        reason: str,
        source: str,
    ):
        super().__init__(
            StringAttr(target),
            ArrayAttr(arguments),
            DictionaryAttr(dict(kwargs)),
            IntegerAttr(inputs, i64),
            StringAttr(reason),
            StringAttr(source),
        )

    @classmethod
    def of(cls, op: fallback.CallOp) -> FallbackAttr:
        """What the plan keeps of a fallback op."""
        return cls(
            op.target.data,
            op.arguments.data,
            op.kwargs.data,
            len(op.inputs),
            op.reason.data,
            op.source.data,
        )

    @classmethod
    def copy(cls, shape: Sequence[int], dtype: str) -> FallbackAttr:
        """A copy torch runs from one buffer of `shape` into another (a mutated input's new
        value into the input's buffer), the buffers viewed in `dtype`."""
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        view = fallback.TensorArgAttr(0, shape, strides, 0, dtype)
        reason = "a mutated input is read after its new value is computed"
        return cls("aten.clone.default", [view], {}, 1, reason, "")

    def entry(self) -> FallbackEntry:
        """What the launch plan keeps of it (emmy.runtime runs it)."""
        return {
            "target": self.target.data,
            "arguments": [fallback.to_json(item) for item in self.arguments.data],
            "kwargs": {name: fallback.to_json(item) for name, item in self.kwargs.data.items()},
            "inputs": self.inputs.value.data,
            "reason": self.reason.data,
            "source": self.source.data,
        }


@irdl_attr_definition
class PlanAttr(RecordAttr):
    """The launch plan of `@main` (see the module's docstring); plan-host records it."""

    name = "host.plan"
    inputs: ArrayAttr[BufferAttr]
    constants: ArrayAttr[BufferAttr]
    outputs: ArrayAttr[BufferAttr]
    temporaries: ArrayAttr[BufferAttr]
    calls: ArrayAttr[CallAttr]
    #: the calls torch runs, by their call's name
    fallbacks: DictionaryAttr
    #: the inputs the plan writes in place, by name
    mutated_inputs: ArrayAttr[StringAttr]
    #: each temporary's offset in the arena
    arena: DictionaryAttr
    arena_bytes: IntegerAttr

    def __init__(
        self,
        inputs: Sequence[BufferAttr],
        constants: Sequence[BufferAttr],
        outputs: Sequence[BufferAttr],
        temporaries: Sequence[BufferAttr],
        calls: Sequence[CallAttr],
        fallbacks: Mapping[str, FallbackAttr],
        mutated_inputs: Sequence[str],
        arena: Mapping[str, int],
        arena_bytes: int,
    ):
        super().__init__(
            ArrayAttr(inputs),
            ArrayAttr(constants),
            ArrayAttr(outputs),
            ArrayAttr(temporaries),
            ArrayAttr(calls),
            DictionaryAttr(dict(fallbacks)),
            _strings(mutated_inputs),
            DictionaryAttr({name: IntegerAttr(offset, i64) for name, offset in arena.items()}),
            IntegerAttr(arena_bytes, i64),
        )

    def fallback_entries(self) -> dict[str, FallbackEntry]:
        return {
            name: entry.entry()
            for name, entry in self.fallbacks.data.items()
            if isinstance(entry, FallbackAttr)
        }

    def offsets(self) -> dict[str, int]:
        return {
            name: offset.value.data
            for name, offset in self.arena.data.items()
            if isinstance(offset, IntegerAttr)
        }

    def verify(self) -> None:
        if not all(isinstance(e, FallbackAttr) for e in self.fallbacks.data.values()):
            raise VerifyException("#host.plan: fallbacks are #host.fallback records by name")
        if not all(isinstance(o, IntegerAttr) for o in self.arena.data.values()):
            raise VerifyException("#host.plan: the arena is an offset by temporary's name")


Host = Dialect("host", [], [BufferAttr, CallAttr, FallbackAttr, PlanAttr])
