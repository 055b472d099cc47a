"""emmy.fallback: ops emmy has no kernel for, run as the torch op they were captured as.

    %y = fallback.call "aten.convolution.default"(%x, %w) {
      arguments = [#fallback.tensor<0, [2, 3, 8, 8], [192, 64, 8, 1], 0, "float32">,
                   #fallback.tensor<1, [4, 3, 3, 3], [27, 9, 3, 1], 0, "float32">,
                   #fallback.none, [1, 1], [0, 0], [1, 1], false, [0, 0], 1],
      reason = "unsupported op aten.convolution.default",
      source = "model.py:12"
    } : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>

The op's arguments are builtin attributes (integers, floats, bools, strings, lists), with
three of emmy's own: `#fallback.tensor<operand, shape, strides, offset, dtype>` reads a
tensor argument as a strided view of one operand's contiguous buffer (so a transpose
feeds the op without a copy), `#fallback.none` is None, and `#fallback.enum<kind, name>` is a
torch dtype, layout, memory format or device. The launch plan runs the op through torch on
the device's buffers (emmy.runtime.run_fallback) and copies each result into its own buffer.

The op is not `Pure`: it may draw random numbers, and two of them are never one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i1,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from emmy.base import dtypes


@irdl_attr_definition
class TensorArgAttr(ParametrizedAttribute):
    """A tensor argument: operand `operand`'s buffer viewed at `shape`, `strides` and
    `offset` (in elements), as torch dtype `dtype` (a bool is stored as a byte).

        #fallback.tensor<0, [2, 8], [1, 2], 0, "float32">
    """

    name = "fallback.tensor"
    operand: IntAttr
    shape: ArrayAttr[IntAttr]
    strides: ArrayAttr[IntAttr]
    offset: IntAttr
    dtype: StringAttr

    def __init__(
        self, operand: int, shape: Sequence[int], strides: Sequence[int], offset: int, dtype: str
    ):
        super().__init__(
            IntAttr(operand),
            ArrayAttr([IntAttr(d) for d in shape]),
            ArrayAttr([IntAttr(s) for s in strides]),
            IntAttr(offset),
            StringAttr(dtype),
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        def integers() -> ArrayAttr[IntAttr]:
            items = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
            return ArrayAttr([IntAttr(i) for i in items])

        with parser.in_angle_brackets():
            operand = IntAttr(parser.parse_integer())
            parser.parse_punctuation(",")
            shape = integers()
            parser.parse_punctuation(",")
            strides = integers()
            parser.parse_punctuation(",")
            offset = IntAttr(parser.parse_integer())
            parser.parse_punctuation(",")
            dtype = StringAttr(parser.parse_str_literal())
        return [operand, shape, strides, offset, dtype]

    def print_parameters(self, printer: Printer) -> None:
        def integers(values: ArrayAttr[IntAttr]) -> str:
            return "[" + ", ".join(str(v.data) for v in values.data) + "]"

        with printer.in_angle_brackets():
            printer.print_string(f"{self.operand.data}, {integers(self.shape)}, ")
            printer.print_string(f"{integers(self.strides)}, {self.offset.data}, ")
            printer.print_string_literal(self.dtype.data)

    def check(self, operands: Sequence[TensorType], where: str) -> None:
        """A verify error unless the view reads inside one of the `operands`."""
        index = self.operand.data
        if not 0 <= index < len(operands):
            raise VerifyException(f"{where} reads operand {index} of {len(operands)}")
        shape, strides = [d.data for d in self.shape.data], [s.data for s in self.strides.data]
        if len(shape) != len(strides):
            raise VerifyException(f"{where}: #fallback.tensor needs one stride per dim")
        if self.offset.data < 0 or any(s < 0 for s in strides):
            raise VerifyException(f"{where}: #fallback.tensor strides and offset must be >= 0")
        if math.prod(shape) == 0:
            return
        last = self.offset.data + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if last >= math.prod(operands[index].get_shape()):
            raise VerifyException(f"{where} reads element {last} of operand {index}")


@irdl_attr_definition
class NoneAttr(ParametrizedAttribute):
    """Python's None as an argument (an absent bias, `dim=None`).

    #fallback.none
    """

    name = "fallback.none"


#: the torch values that are neither numbers nor tensors, by the kind of torch object
ENUM_KINDS = ("dtype", "layout", "memory_format", "device")


@irdl_attr_definition
class EnumAttr(ParametrizedAttribute):
    """A torch dtype, layout, memory format or device argument, by name; a device names
    where the op was captured, and runs on the device that holds the buffers.

        #fallback.enum<"dtype", "float16">
    """

    name = "fallback.enum"
    kind: StringAttr
    value: StringAttr

    def __init__(self, kind: str, value: str):
        super().__init__(StringAttr(kind), StringAttr(value))

    def check(self, where: str) -> None:
        if self.kind.data not in ENUM_KINDS:
            raise VerifyException(
                f"{where}: #fallback.enum kind must be one of {', '.join(ENUM_KINDS)}, "
                f"not {self.kind.data!r}"
            )


def _check_argument(value: Attribute, operands: Sequence[TensorType], where: str) -> None:
    if isinstance(value, ArrayAttr):
        for item in value.data:
            _check_argument(item, operands, where)
        return
    if isinstance(value, TensorArgAttr):
        value.check(operands, where)
    elif isinstance(value, EnumAttr):
        value.check(where)
    elif not isinstance(value, IntegerAttr | FloatAttr | StringAttr | NoneAttr):
        raise VerifyException(f"{where}: {value} is not an argument torch takes")


@irdl_op_definition
class CallOp(IRDLOperation):
    """A torch op on the operands' buffers, its results written to buffers of their own.
    `reason` says why emmy compiles no kernel for it, `source` where the model calls it.

    %y = fallback.call "aten.cumsum.default"(%x) {
      arguments = [#fallback.tensor<0, [2, 8], [8, 1], 0, "int64">, 1], kwargs = {},
      reason = "unsupported op aten.cumsum.default", source = ""
    } : (tensor<2x8xi64>) -> tensor<2x8xi64>
    """

    name = "fallback.call"
    target = prop_def(StringAttr)
    arguments = prop_def(ArrayAttr)
    kwargs = prop_def(DictionaryAttr)
    reason = prop_def(StringAttr)
    source = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$target `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(
        self,
        target: str,
        inputs: Sequence[SSAValue],
        arguments: Sequence[Attribute],
        kwargs: dict[str, Attribute],
        result_types: Sequence[Attribute],
        reason: str,
        source: str = "",
    ):
        super().__init__(
            operands=[inputs],
            result_types=[result_types],
            properties={
                "target": StringAttr(target),
                "arguments": ArrayAttr(arguments),
                "kwargs": DictionaryAttr(kwargs),
                "reason": StringAttr(reason),
                "source": StringAttr(source),
            },
        )

    def verify_(self) -> None:
        where = f"fallback.call {self.target.data}"
        if self.target.data.count(".") != 2:
            raise VerifyException(
                f"{where}: the target must be namespace.op.overload, as torch.ops names it"
            )
        for value in [*self.arguments.data, *self.kwargs.data.values()]:
            # tensors: the operands' constraint is verified before verify_
            _check_argument(value, [cast(TensorType, v.type) for v in self.inputs], where)
        for result in self.outputs:
            assert isinstance(result.type, TensorType)
            if not dtypes.is_storage_type(result.type.element_type):
                raise VerifyException(f"{where}: a result of {result.type} has no storage type")


def to_json(value: Attribute) -> object:
    """An argument as the launch plan keeps it (emmy.runtime.run_fallback reads it): numbers,
    strings, lists and None as themselves, a tensor as {"tensor": [operand, shape, strides,
    offset, dtype]}, a torch enum as {"enum": [kind, name]}."""
    if isinstance(value, ArrayAttr):
        return [to_json(item) for item in value.data]
    if isinstance(value, DictionaryAttr):
        return {name: to_json(item) for name, item in value.data.items()}
    if isinstance(value, TensorArgAttr):
        shape = [d.data for d in value.shape.data]
        strides = [s.data for s in value.strides.data]
        view = [value.operand.data, shape, strides, value.offset.data, value.dtype.data]
        return {"tensor": view}
    if isinstance(value, EnumAttr):
        return {"enum": [value.kind.data, value.value.data]}
    if isinstance(value, NoneAttr):
        return None
    if isinstance(value, IntegerAttr):
        number = value.value.data
        return bool(number) if value.type == i1 else number
    if isinstance(value, FloatAttr):
        return value.value.data
    assert isinstance(value, StringAttr), value
    return value.data


def first_fallback_error(module: Operation) -> str | None:
    """The one-line error of a graph's first fallback (for --no-fallback), or None."""
    for op in module.walk():
        if isinstance(op, CallOp):
            where = f" at {op.source.data}" if op.source.data else ""
            return f"{op.reason.data} ({op.target.data}{where}; emmy has no kernel for it)"
    return None


Fallback = Dialect("fallback", [CallOp], [TensorArgAttr, NoneAttr, EnumAttr])
