"""Elementwise chains as the kernels read them: a chain's kernel-language text (the `fn` or
`epilogue` of a key) and how each of its inputs is read at a flat output index."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Operation, SSAValue

from emmy.base.dtypes import dtype_name, is_float
from emmy.base.errors import EmmyError
from emmy.base.problem_key import InputKind, format_input_kinds
from emmy.dialects import graph

ELEMENTWISE = (graph.ElementwiseOp, graph.ConstantOp)


def shape_of(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def dtype_of(value: SSAValue) -> str:
    assert isinstance(value.type, TensorType)
    return dtype_name(value.type.element_type)


def _strip_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def broadcast_kind(
    input_shape: tuple[int, ...], output_shape: tuple[int, ...], middle: bool = False
) -> InputKind | None:
    """How an input of an elementwise site is read at a flat output index, if it can be;
    one per channel (`mid`) or per batch entry (`batch`) only where `middle` (the
    elementwise kernel reads them, the epilogues and prologues of other kernels do not)."""
    if math.prod(input_shape) == 1:
        return InputKind.SCALAR
    stripped = _strip_leading_ones(input_shape)
    if stripped == _strip_leading_ones(output_shape):
        return InputKind.FULL
    if stripped == output_shape[-1:]:
        return InputKind.ROW
    if input_shape[-1:] == (1,) and _strip_leading_ones(stripped[:-1]) == _strip_leading_ones(
        output_shape[:-1]
    ):
        return InputKind.COL
    if not middle or len(output_shape) < 3:
        return None
    if stripped == (output_shape[1],) + (1,) * (len(output_shape) - 2):
        return InputKind.MIDDLE
    if stripped == _strip_leading_ones(output_shape[1:]):
        return InputKind.BATCH
    return None


#: the kinds of input the elementwise kernel alone reads, by its key's `inner` and `mid`
RUN_KINDS = (InputKind.MIDDLE, InputKind.BATCH)


def middle_run(output_shape: tuple[int, ...]) -> dict[str, int]:
    """An elementwise key's `mid` (channels) and `inner` (elements of a channel's run) over
    an output of rank 3 or more, as its `mid` and `batch` inputs are read."""
    return {"inner": math.prod(output_shape[2:]), "mid": output_shape[1]}


def broadcast_kinds(
    inputs: Sequence[SSAValue], out_shape: tuple[int, ...]
) -> list[InputKind] | None:
    kinds = [broadcast_kind(shape_of(value), out_shape) for value in inputs]
    known = [kind for kind in kinds if kind is not None]
    return known if len(known) == len(kinds) else None


def required_broadcast_kinds(
    inputs: Sequence[SSAValue], out_shape: tuple[int, ...], middle: bool = False
) -> str:
    """The kinds of a chain's inputs as a key's `inputs`; a broadcast no kernel reads is an
    error."""
    kinds = []
    for value in inputs:
        kind = broadcast_kind(shape_of(value), out_shape, middle)
        if kind is None:
            raise EmmyError(
                f"elementwise input of shape {list(shape_of(value))} broadcast to {list(out_shape)}: "
                "only full, row, column, channel and scalar broadcasts are supported"
            )
        kinds.append(kind)
    return format_input_kinds(kinds)


def constant_text(op: graph.ConstantOp) -> str:
    """A constant as a chain's literal: integers exact, `inf`, `(-inf)` and `nan` by name."""
    value = op.value.value.data
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "(-inf)"
    return repr(float(value))


def of_one_float_dtype(group: ElementwiseGroup, dtype: str) -> bool:
    """Whether every input and op of a chain is of the float `dtype`: what a kernel that
    fuses the chain around its own op (of one storage type T) reads."""
    values = [*group.inputs, *(op.results[0] for op in group.ops)]
    return is_float(dtype) and all(dtype_of(value) == dtype for value in values)


def is_elementwise(op: Operation | Block | None) -> bool:
    return isinstance(op, ELEMENTWISE)


@dataclass
class ElementwiseGroup:
    root: Operation
    ops: list[Operation]
    inputs: list[SSAValue]
    text: str


#: the longest chain text whose values read more than once in it are spelled out at each
#: use; past it (values shared level after level) such a value is an input of the chain
SHARED_TEXT_LIMIT = 2048


def collect_group(
    root: Operation, accumulator: SSAValue | None = None, numbered: Sequence[SSAValue] = ()
) -> ElementwiseGroup:
    """The root and the producers it alone uses, with the chain as kernel-language text;
    `accumulator` (the result of the kernel the chain is fused into) is called `acc`, and
    inputs are numbered after those of `numbered` (a chain the same kernel reads too). A
    value the chain reads more than once (x in x + 0.044715 · x³, a gradient's shared
    factor) is the chain's where the chain reads all of its uses."""
    try:
        return _group(root, accumulator, numbered, _members(root))
    except _SharedTooLong:
        return _group(root, accumulator, numbered, None)


class _SharedTooLong(Exception):
    """A chain whose shared values, spelled out at each use, pass SHARED_TEXT_LIMIT."""


def _members(root: Operation) -> set[Operation]:
    """The root and the elementwise ops before it whose every use one of them makes."""
    members = {root}
    pending = [root]
    while pending:
        # a producer is looked at again as each of its users joins: the last one decides
        for operand in pending.pop().operands:
            producer = operand.owner
            if not isinstance(producer, graph.ElementwiseOp) or producer in members:
                continue
            if all(use.operation in members for use in producer.results[0].uses):
                members.add(producer)
                pending.append(producer)
    return members


def _group(
    root: Operation,
    accumulator: SSAValue | None,
    numbered: Sequence[SSAValue],
    members: set[Operation] | None,
) -> ElementwiseGroup:
    """collect_group's group of `members` (None: the producers read once, a tree)."""
    ops: list[Operation] = []
    inputs: list[SSAValue] = list(numbered)
    #: each op's text, spelled once however often the chain reads it
    spelled: dict[Operation, str] = {}

    def inside(producer: Operation | Block) -> bool:
        if members is not None:
            return producer in members
        return producer is root or is_elementwise(producer) and value_read_once(producer)

    def value_read_once(producer: Operation | Block) -> bool:
        return isinstance(producer, Operation) and producer.results[0].has_one_use()

    def text(value: SSAValue) -> str:
        if value is accumulator:
            return "acc"
        producer = value.owner
        if isinstance(producer, graph.ConstantOp):
            return constant_text(producer)
        if inside(producer):
            assert isinstance(producer, Operation)
            if producer not in spelled:
                ops.append(producer)
                spelled[producer] = expression(producer)
            return spelled[producer]
        if value not in inputs:
            inputs.append(value)
        return f"in{inputs.index(value)}"

    def expression(op: Operation) -> str:
        assert isinstance(op, graph.ElementwiseOp)
        operands = [text(operand) for operand in op.operands]
        approximate = op.approximate if isinstance(op, graph.GeluOp) else None
        if approximate is not None and approximate.data == graph.GeluApproximation.TANH:
            spelling = f"gelu_tanh({operands[0]})"
        else:
            spelling = op.OP.spell(operands, dtype_of(op.results[0]))
        # stopped as soon as it is too long: spelled out level after level, it doubles
        if members is not None and len(spelling) > SHARED_TEXT_LIMIT:
            raise _SharedTooLong
        return spelling

    chain = text(root.results[0])
    return ElementwiseGroup(root, ops, inputs, chain)
