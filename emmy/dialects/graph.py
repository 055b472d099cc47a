"""emmy.graph: value-semantics tensor ops, one per PyTorch operation the frontend meets.

    func.func @main(%x : tensor<4x1000xf32>) -> tensor<4x1000xf32> {
      %y = graph.softmax %x {dim = -1 : i64} : tensor<4x1000xf32> -> tensor<4x1000xf32>
      func.return %y : tensor<4x1000xf32>
    }

Elementwise binary ops broadcast like torch (trailing dimensions, size-1 expands).
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

FLOAT_TYPES = (Float32Type, Float16Type, BFloat16Type)


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """torch's broadcasting of two shapes, or None where they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            return None
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def _float_tensor(value: SSAValue | Attribute, what: str) -> TensorType:
    typ = value if isinstance(value, Attribute) else value.type
    if not isinstance(typ, TensorType) or not isinstance(typ.element_type, FLOAT_TYPES):
        raise VerifyException(f"{what} must be a tensor of f32, f16 or bf16, not {typ}")
    return typ


class UnaryOp(IRDLOperation):
    """An elementwise function of one tensor; the result has its shape and dtype."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue):
        super().__init__(operands=[input], result_types=[input.type])

    def verify_(self) -> None:
        if self.input.type != self.result.type:
            raise VerifyException(f"{self.name} must keep the shape and dtype of its input")
        _float_tensor(self.input, f"{self.name} operand")


class BinaryOp(IRDLOperation):
    """An elementwise function of two tensors of one dtype, broadcast like torch."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: Attribute):
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    def verify_(self) -> None:
        lhs = _float_tensor(self.lhs, f"{self.name} lhs")
        rhs = _float_tensor(self.rhs, f"{self.name} rhs")
        out = _float_tensor(self.result, f"{self.name} result")
        if lhs.element_type != rhs.element_type or lhs.element_type != out.element_type:
            raise VerifyException(f"{self.name} operands and result must share one dtype")
        shape = broadcast_shapes(lhs.get_shape(), rhs.get_shape())
        if shape is None:
            raise VerifyException(
                f"{self.name} shapes {list(lhs.get_shape())} and {list(rhs.get_shape())} "
                "do not broadcast"
            )
        if shape != out.get_shape():
            raise VerifyException(
                f"{self.name} result shape {list(out.get_shape())} should be {list(shape)}"
            )


@irdl_op_definition
class AddOp(BinaryOp):
    """`%c = graph.add %a, %b : ...`: a + b."""

    name = "graph.add"


@irdl_op_definition
class SubOp(BinaryOp):
    """`%c = graph.sub %a, %b : ...`: a - b."""

    name = "graph.sub"


@irdl_op_definition
class MulOp(BinaryOp):
    """`%c = graph.mul %a, %b : ...`: a * b."""

    name = "graph.mul"


@irdl_op_definition
class DivOp(BinaryOp):
    """`%c = graph.div %a, %b : ...`: a / b."""

    name = "graph.div"


@irdl_op_definition
class ExpOp(UnaryOp):
    """`%y = graph.exp %x : ...`."""

    name = "graph.exp"


@irdl_op_definition
class TanhOp(UnaryOp):
    """`%y = graph.tanh %x : ...`."""

    name = "graph.tanh"


@irdl_op_definition
class SiluOp(UnaryOp):
    """`%y = graph.silu %x : ...`: x * sigmoid(x)."""

    name = "graph.silu"


@irdl_op_definition
class ReluOp(UnaryOp):
    """`%y = graph.relu %x : ...`."""

    name = "graph.relu"


@irdl_op_definition
class NegOp(UnaryOp):
    """`%y = graph.neg %x : ...`."""

    name = "graph.neg"


@irdl_op_definition
class GeluOp(UnaryOp):
    """`%y = graph.gelu %x {approximate = "tanh"} : ...`: erf form unless approximate."""

    name = "graph.gelu"
    approximate = opt_prop_def(StringAttr)
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, input: SSAValue, approximate: str = "none"):
        super().__init__(input)
        if approximate != "none":
            self.approximate = StringAttr(approximate)

    def verify_(self) -> None:
        super().verify_()
        if self.approximate is not None and self.approximate.data not in ("none", "tanh"):
            raise VerifyException(
                f"graph.gelu approximate must be none or tanh, not {self.approximate.data!r}"
            )


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A scalar as a 0-d tensor, e.g. the 0.5 of `x * 0.5`.

    %c = graph.constant 5.000000e-01 : tensor<f32>
    """

    name = "graph.constant"
    value = prop_def(FloatAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `->` type($result)"

    def __init__(self, value: float, dtype: Attribute):
        super().__init__(
            properties={"value": FloatAttr(value, Float32Type())},
            result_types=[TensorType(dtype, [])],
        )

    def verify_(self) -> None:
        if _float_tensor(self.result, "graph.constant").get_shape() != ():
            raise VerifyException("graph.constant gives a 0-d tensor")


@irdl_op_definition
class SoftmaxOp(IRDLOperation):
    """Softmax over one dimension.

    %y = graph.softmax %x {dim = -1 : i64} : tensor<4x1000xf32> -> tensor<4x1000xf32>
    """

    name = "graph.softmax"
    input = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, dim: int, result_type: Attribute | None = None):
        super().__init__(
            operands=[input],
            result_types=[result_type or input.type],
            properties={"dim": IntegerAttr(dim, i64)},
        )

    def verify_(self) -> None:
        typ = _float_tensor(self.input, "graph.softmax input")
        out = _float_tensor(self.result, "graph.softmax result")
        rank = len(typ.get_shape())
        if rank == 0:
            raise VerifyException("graph.softmax needs a tensor of rank 1 or more")
        dim = self.dim.value.data
        if not -rank <= dim < rank:
            raise VerifyException(f"graph.softmax dim {dim} is out of range for rank {rank}")
        if out.get_shape() != typ.get_shape():
            raise VerifyException("graph.softmax result must have the input's shape")


ELEMENTWISE_UNARY = {
    "exp": ExpOp,
    "tanh": TanhOp,
    "silu": SiluOp,
    "relu": ReluOp,
    "neg": NegOp,
    "gelu": GeluOp,
}
ELEMENTWISE_BINARY = {"add": AddOp, "sub": SubOp, "mul": MulOp, "div": DivOp}

Graph = Dialect(
    "graph",
    [*ELEMENTWISE_BINARY.values(), *ELEMENTWISE_UNARY.values(), ConstantOp, SoftmaxOp],
    [],
)
