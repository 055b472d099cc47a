"""emmy.graph: value-semantics tensor ops, one per PyTorch operation the frontend meets.

    func.func @main(%x : tensor<4x1000xf32>) -> tensor<4x1000xf32> {
      %y = graph.softmax %x {dim = -1 : i64} : tensor<4x1000xf32> -> tensor<4x1000xf32>
      func.return %y : tensor<4x1000xf32>
    }

The elementwise ops are built from the pointwise table (emmy.base.pointwise_ops), one
op per entry (`graph.add`, `graph.softplus`, `graph.where`, `graph.convert`, ...); their
operands broadcast like torch (trailing dimensions, size-1 expands).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    UnitAttr,
    f32,
    i8,
    i32,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Block, Dialect, Region, SpacedOpaqueSyntaxAttribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum  # what EnumAttribute takes

from emmy.base import dtypes
from emmy.base.pointwise_ops import (
    CONDITION,
    POINTWISE,
    TABLE,
    VALUE,
    Domain,
    Gives,
    PointwiseOp,
)
from emmy.dialects.records import RecordAttr


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
    if not isinstance(typ, TensorType) or not dtypes.is_float_type(typ.element_type):
        raise VerifyException(f"{what} must be a tensor of f32, f16 or bf16, not {typ}")
    return typ


class ElementwiseOp(IRDLOperation):
    """An op of the pointwise table (emmy.base.pointwise_ops), its entry `OP`: its
    operands broadcast like torch to the result's shape; its values share one dtype of
    the op's domain, its conditions are bools (i8) and its parameters 0-d constants."""

    OP: ClassVar[PointwiseOp]
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        entry = self.OP
        out = _storage_tensor(self.result, f"{self.name} result")
        tensors = [_storage_tensor(o, f"{self.name} operand") for o in self.operands]
        _check_broadcast(self.name, [t.get_shape() for t in tensors], out.get_shape())
        by_role = list(zip(entry.roles, tensors, strict=True))
        values = [t.element_type for role, t in by_role if role == VALUE]
        if any(t.element_type != i8 for role, t in by_role if role == CONDITION):
            raise VerifyException(f"{self.name} conditions must be tensors of i8 (bool)")
        common = values[0] if values else i8
        gives = {Gives.SAME: common, Gives.BOOL: i8, Gives.CONVERTED: out.element_type}
        if any(v != common for v in values) or out.element_type != gives[entry.gives]:
            raise VerifyException(f"{self.name} operands and result must share one dtype")
        if not entry.takes(dtypes.dtype_name(common)):
            raise VerifyException(
                f"{self.name} operand must be a tensor of {DOMAIN_TEXT[entry.domain]}"
            )


class UnaryOp(ElementwiseOp):
    """An elementwise function of one tensor."""

    input = operand_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, result_type: Attribute | None = None):
        super().__init__(operands=[input], result_types=[result_type or input.type])

    def verify_(self) -> None:
        if self.OP.gives == Gives.SAME and self.input.type != self.result.type:
            raise VerifyException(f"{self.name} must keep the shape and dtype of its input")
        super().verify_()


class BinaryOp(ElementwiseOp):
    """An elementwise function of two tensors."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: Attribute):
        super().__init__(operands=[lhs, rhs], result_types=[result_type])


class NaryOp(ElementwiseOp):
    """An elementwise function of three or more tensors."""

    inputs = var_operand_def(TensorType)
    assembly_format = "$inputs attr-dict `:` type($inputs) `->` type($result)"

    def __init__(self, inputs: Sequence[SSAValue], result_type: Attribute):
        super().__init__(operands=[inputs], result_types=[result_type])

    def verify_(self) -> None:
        if len(self.inputs) != self.OP.arity:
            raise VerifyException(f"{self.name} takes {self.OP.arity} operands")
        super().verify_()


#: the attribute of a graph's function listing the inputs it writes in place (a KV cache):
#: its first results are their new values, one per entry, the entry the input's place
MUTATED_INPUTS = "mutated_inputs"

DOMAIN_TEXT = {
    Domain.FLOAT: "f32, f16 or bf16",
    Domain.NUMBER: "f32, f16, bf16, i32 or i64",
    Domain.INTEGRAL: "i8 (bool), i32 or i64",
    Domain.BOOL: "i8 (bool)",
    Domain.ANY: "a storage type",
}


def _storage_tensor(value: SSAValue, what: str) -> TensorType:
    typ = value.type
    if not isinstance(typ, TensorType) or not dtypes.is_storage_type(typ.element_type):
        raise VerifyException(f"{what} must be a tensor of a storage type, not {typ}")
    return typ


def _check_broadcast(name: str, shapes: Sequence[tuple[int, ...]], out: tuple[int, ...]) -> None:
    shape: tuple[int, ...] = ()
    for operand in shapes:
        merged = broadcast_shapes(shape, operand)
        if merged is None:
            listed = " and ".join(str(list(s)) for s in shapes)
            raise VerifyException(f"{name} shapes {listed} do not broadcast")
        shape = merged
    if shape != out:
        raise VerifyException(f"{name} result shape {list(out)} should be {list(shape)}")


def _elementwise_op(entry: PointwiseOp) -> type[ElementwiseOp]:
    """The graph op of a table entry: `softplus` is SoftplusOp, `graph.softplus`."""
    base = {1: UnaryOp, 2: BinaryOp}.get(entry.arity, NaryOp)
    operands = ", ".join(f"%{chr(ord('a') + i)}" for i in range(entry.arity))
    attributes = {
        "name": entry.graph_name,
        "OP": entry,
        "__annotations__": {"OP": "ClassVar[PointwiseOp]"},
        "__module__": __name__,
        "__doc__": f"`%y = {entry.graph_name} {operands} : ...`: torch's {entry.name}, "
        "elementwise.",
    }
    class_name = entry.name.title().replace("_", "") + "Op"
    return irdl_op_definition(type(class_name, (base,), attributes))


class GeluApproximation(StrEnum):
    """How graph.gelu computes, as torch's `approximate`."""

    #: x · Φ(x), by erf
    NONE = "none"
    #: the tanh approximation of x · Φ(x)
    TANH = "tanh"


@irdl_attr_definition
class GeluApproximationAttr(EnumAttribute[GeluApproximation], SpacedOpaqueSyntaxAttribute):
    """`#graph<approximation tanh>`"""

    name = "graph.approximation"


@irdl_op_definition
class GeluOp(UnaryOp):
    """`%y = graph.gelu %x {approximate = #graph<approximation tanh>} : ...`: erf form unless
    approximate."""

    name = "graph.gelu"
    OP: ClassVar[PointwiseOp] = POINTWISE["gelu"]
    approximate = opt_prop_def(GeluApproximationAttr)
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, input: SSAValue, approximate: GeluApproximation | str = "none"):
        super().__init__(input)
        approximation = GeluApproximation(approximate)
        if approximation != GeluApproximation.NONE:
            self.approximate = GeluApproximationAttr(approximation)


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A scalar as a 0-d tensor, e.g. the 0.5 of `x * 0.5`: a float (f32) for a tensor of
    floats, an integer (i64) for one of integers or bools (exact, as i64 math needs).

    %c = graph.constant 5.000000e-01 : f32 -> tensor<f32>
    %k = graph.constant 3 : i64 -> tensor<i64>
    """

    name = "graph.constant"
    value = prop_def(FloatAttr | IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `->` type($result)"

    def __init__(self, value: float | int, dtype: Attribute):
        if dtypes.is_float_type(dtype):
            attr: FloatAttr | IntegerAttr = FloatAttr(float(value), Float32Type())
        else:
            attr = IntegerAttr(int(value), i64)
        super().__init__(properties={"value": attr}, result_types=[TensorType(dtype, [])])

    def verify_(self) -> None:
        typ = _storage_tensor(self.result, "graph.constant")
        if typ.get_shape() != ():
            raise VerifyException("graph.constant gives a 0-d tensor")
        if isinstance(self.value, FloatAttr) != dtypes.is_float_type(typ.element_type):
            raise VerifyException("graph.constant of floats holds a float, of integers an integer")


@irdl_op_definition
class SoftmaxOp(IRDLOperation):
    """Softmax over one dimension; with `causal` (over the last dim), element [..., i, j]
    counts as -inf where j > i, as in attention's scores under torch's is_causal.

    %y = graph.softmax %x {dim = -1 : i64} : tensor<4x1000xf32> -> tensor<4x1000xf32>
    %p = graph.softmax %s {dim = -1 : i64, causal} : tensor<2x8x8xf32> -> tensor<2x8x8xf32>
    """

    name = "graph.softmax"
    input = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    causal = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(
        self,
        input: SSAValue,
        dim: int,
        result_type: Attribute | None = None,
        causal: bool = False,
    ):
        properties: dict[str, Attribute] = {"dim": IntegerAttr(dim, i64)}
        if causal:
            properties["causal"] = UnitAttr()
        super().__init__(
            operands=[input], result_types=[result_type or input.type], properties=properties
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
        if self.causal is not None and (rank < 2 or dim % rank != rank - 1):
            raise VerifyException("a causal graph.softmax is over the last dim of a rank 2+ tensor")


@irdl_op_definition
class SoftmaxBackwardOp(IRDLOperation):
    """The gradient of a softmax over the last dim from its output y and the output's
    gradient dy: y * (dy - sum(dy * y)); with `log`, of a log-softmax from its output:
    dy - exp(y) * sum(dy).

    %dx = graph.softmax_backward %dy, %y : tensor<4x1000xf32>, tensor<4x1000xf32> -> tensor<4x1000xf32>
    %dl = graph.softmax_backward %dy, %y {log} : tensor<4x10xf32>, tensor<4x10xf32> -> tensor<4x10xf32>
    """

    name = "graph.softmax_backward"
    grad = operand_def(TensorType)
    output = operand_def(TensorType)
    log = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$grad `,` $output attr-dict `:` type($grad) `,` type($output) `->` type($result)"
    )

    def __init__(self, grad: SSAValue, output: SSAValue, log: bool = False):
        properties: dict[str, Attribute] = {"log": UnitAttr()} if log else {}
        super().__init__(operands=[grad, output], result_types=[output.type], properties=properties)

    def verify_(self) -> None:
        grad = _float_tensor(self.grad, "graph.softmax_backward gradient")
        output = _float_tensor(self.output, "graph.softmax_backward output")
        if not output.get_shape():
            raise VerifyException("graph.softmax_backward needs a tensor of rank 1 or more")
        if grad != output or self.result.type != output:
            raise VerifyException(
                "graph.softmax_backward's gradient, output and result must share one type"
            )


def _shape_of(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """A · B over the last two dims, batched over the leading dims of A; B is either
    batched like A or one matrix shared by the batch. With `transpose_b`, B is stored
    [n, k] (torch's Linear weight) and A · Bᵀ is computed; with `transpose_a`, A is stored
    [..., k, m] (a weight's gradient, Xᵀ · dY) and Aᵀ · B is computed.

    %c = graph.matmul %a, %w {transpose_b} : tensor<2x8x64xf32>, tensor<96x64xf32> -> tensor<2x8x96xf32>
    %g = graph.matmul %x, %dy {transpose_a} : tensor<16x64xf32>, tensor<16x96xf32> -> tensor<64x96xf32>
    """

    name = "graph.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    transpose_a = opt_prop_def(UnitAttr)
    transpose_b = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"

    def __init__(
        self,
        lhs: SSAValue,
        rhs: SSAValue,
        result_type: Attribute,
        transpose_b: bool,
        transpose_a: bool = False,
    ):
        properties: dict[str, Attribute] = {}
        if transpose_a:
            properties["transpose_a"] = UnitAttr()
        if transpose_b:
            properties["transpose_b"] = UnitAttr()
        super().__init__(operands=[lhs, rhs], result_types=[result_type], properties=properties)

    def verify_(self) -> None:
        a = _float_tensor(self.lhs, "graph.matmul lhs")
        b = _float_tensor(self.rhs, "graph.matmul rhs")
        out = _float_tensor(self.result, "graph.matmul result")
        if not a.element_type == b.element_type == out.element_type:
            raise VerifyException("graph.matmul operands and result must share one dtype")
        a_shape, b_shape = a.get_shape(), b.get_shape()
        if len(a_shape) < 2 or len(b_shape) < 2:
            raise VerifyException("graph.matmul needs operands of rank 2 or more")
        if len(b_shape) > 2 and b_shape[:-2] != a_shape[:-2]:
            raise VerifyException(
                f"graph.matmul batch dims {list(b_shape[:-2])} of rhs must match lhs's {list(a_shape[:-2])}"
            )
        k, n = (b_shape[-1], b_shape[-2]) if self.transpose_b else (b_shape[-2], b_shape[-1])
        m, a_k = (a_shape[-1], a_shape[-2]) if self.transpose_a else (a_shape[-2], a_shape[-1])
        if a_k != k:
            raise VerifyException(
                f"graph.matmul contracts {a_k} columns of lhs with {k} rows of rhs"
            )
        if out.get_shape() != (*a_shape[:-2], m, n):
            raise VerifyException(
                f"graph.matmul result shape {list(out.get_shape())} should be {[*a_shape[:-2], m, n]}"
            )


class Convolution(IRDLOperation):
    """A convolution's geometry, shared by graph.conv, graph.conv_transpose and
    graph.conv_weight_gradient: stride, padding (zeros) and dilation per spatial dim,
    `groups` channel groups. (Operands are declared by each op, in order: IRDL puts a
    subclass's fields before its base's.)"""

    stride = prop_def(ArrayAttr[IntegerAttr])
    padding = prop_def(ArrayAttr[IntegerAttr])
    dilation = prop_def(ArrayAttr[IntegerAttr])
    groups = prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)

    def _build(
        self,
        operands: Sequence[SSAValue | Sequence[SSAValue]],
        result_type: Attribute,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        groups: int,
    ) -> None:
        super().__init__(
            operands=operands,
            result_types=[result_type],
            properties={
                "stride": _int_array(stride),
                "padding": _int_array(padding),
                "dilation": _int_array(dilation),
                "groups": IntegerAttr(groups, i64),
            },
        )


class FilterConvolution(Convolution):
    """A convolution of x with a weight, plus a bias per out channel if given (graph.conv,
    graph.conv_transpose)."""

    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    assembly_format = (
        "$input `,` $weight (`bias` $bias^)? attr-dict `:` type($input) `,` type($weight)"
        " (`,` type($bias)^)? `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue,
        weight: SSAValue,
        bias: SSAValue | None,
        result_type: Attribute,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        groups: int,
    ):
        operands = [input, weight, [bias] if bias is not None else []]
        self._build(operands, result_type, stride, padding, dilation, groups)


@irdl_op_definition
class ConvOp(FilterConvolution):
    """A 2-D convolution (cross-correlation, as torch's) of x [batch, in channels, h, w] with
    a weight [out channels, in channels / groups, kh, kw], plus a bias per out channel if
    given: stride, padding (zeros) and dilation per spatial dim, `groups` channel groups
    (groups = in channels: depthwise). A 1-D convolution is one of height 1.

    %y = graph.conv %x, %w bias %b {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x3x9x9xf32>, tensor<8x3x3x3xf32>, tensor<8xf32> -> tensor<2x8x5x5xf32>
    """

    name = "graph.conv"

    def output_size(self) -> tuple[int, int]:
        """The output's height and width, as torch computes them."""
        _, _, h, w = _float_tensor(self.input, "graph.conv input").get_shape()
        _, _, kh, kw = _float_tensor(self.weight, "graph.conv weight").get_shape()
        return _conv_output_size((h, w), (kh, kw), self)

    def verify_(self) -> None:
        x, w, out, bias = _verify_convolution(self)
        batch, channels, _, _ = x.get_shape()
        filters, per_group, _, _ = w.get_shape()
        groups = self.groups.value.data
        if not _groups_fit(channels, groups, filters, per_group):
            raise VerifyException(
                f"graph.conv of {channels} channels in {groups} groups with a weight of "
                f"{per_group} channels per group and {filters} filters"
            )
        if bias is not None and bias.get_shape() != (filters,):
            raise VerifyException(f"graph.conv bias must have {filters} elements")
        expected = (batch, filters, *self.output_size())
        if out.get_shape() != expected or min(expected) < 1:
            raise VerifyException(
                f"graph.conv result shape {list(out.get_shape())} should be {list(expected)}"
            )


def _verify_convolution(
    op: FilterConvolution,
) -> tuple[TensorType, TensorType, TensorType, TensorType | None]:
    """A convolution's checks that do not depend on which way it runs: one dtype, rank 4,
    stride, padding and dilation pairs. Its input, weight, result and bias types."""
    what = op.name
    x = _float_tensor(op.input, f"{what} input")
    w = _float_tensor(op.weight, f"{what} weight")
    out = _float_tensor(op.result, f"{what} result")
    bias = _float_tensor(op.bias, f"{what} bias") if op.bias is not None else None
    types = [x, w, out] + ([bias] if bias is not None else [])
    if len({t.element_type for t in types}) != 1:
        raise VerifyException(f"{what} operands and result must share one dtype")
    if len(x.get_shape()) != 4 or len(w.get_shape()) != 4:
        raise VerifyException(f"{what} needs an input and a weight of rank 4")
    _verify_geometry(op)
    return x, w, out, bias


def _groups_fit(channels: int, groups: int, filters: int, per_group: int) -> bool:
    """Whether `channels` in `groups` groups meet a weight of `filters` filters of
    `per_group` channels each."""
    if groups < 1 or channels % groups or filters % groups:
        return False
    return per_group * groups == channels


def _verify_geometry(op: Convolution) -> None:
    """A convolution's stride, padding and dilation: pairs, positive (padding: >= 0)."""
    for name, attr, least in (("stride", op.stride, 1), ("padding", op.padding, 0),
                              ("dilation", op.dilation, 1)):  # fmt: skip
        values = _ints(attr)
        if len(values) != 2 or min(values) < least:
            raise VerifyException(f"{op.name} {name} must be 2 values >= {least}")


def _conv_output_size(
    size: tuple[int, int], kernel: tuple[int, int], op: Convolution
) -> tuple[int, int]:
    """A convolution's output height and width, as torch computes them."""
    (sh, sw), (ph, pw), (dh, dw) = (_ints(a) for a in (op.stride, op.padding, op.dilation))
    (h, w), (kh, kw) = size, kernel
    return (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1


@irdl_op_definition
class ConvWeightGradientOp(Convolution):
    """A 2-D convolution's weight gradient: dW [out channels, in channels / groups, kh, kw]
    from the output's gradient dy [batch, out channels, oh, ow] and the input x [batch, in
    channels, h, w], for the convolution's stride, padding, dilation and groups (the
    result's shape gives the filter's size): dW[o, c, i, j] = Σ over images and output
    pixels of dy · the x element tap (i, j) of that pixel reads.

    %dw = graph.conv_weight_gradient %dy, %x {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<2x3x9x9xf32> -> tensor<8x3x3x3xf32>
    """

    name = "graph.conv_weight_gradient"
    grad = operand_def(TensorType)
    input = operand_def(TensorType)
    assembly_format = (
        "$grad `,` $input attr-dict `:` type($grad) `,` type($input) `->` type($result)"
    )

    def __init__(
        self,
        grad: SSAValue,
        input: SSAValue,
        result_type: Attribute,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        groups: int,
    ):
        self._build([grad, input], result_type, stride, padding, dilation, groups)

    def verify_(self) -> None:
        what = self.name
        dy = _float_tensor(self.grad, f"{what} gradient")
        x = _float_tensor(self.input, f"{what} input")
        dw = _float_tensor(self.result, f"{what} result")
        if len({t.element_type for t in (dy, x, dw)}) != 1:
            raise VerifyException(f"{what} operands and result must share one dtype")
        if any(len(t.get_shape()) != 4 for t in (dy, x, dw)):
            raise VerifyException(f"{what} needs a gradient, an input and a result of rank 4")
        _verify_geometry(self)
        batch, channels, h, w = x.get_shape()
        filters, per_group, kh, kw = dw.get_shape()
        groups = self.groups.value.data
        if not _groups_fit(channels, groups, filters, per_group):
            raise VerifyException(
                f"{what} of {channels} channels in {groups} groups cannot give a weight of "
                f"{per_group} channels per group and {filters} filters"
            )
        expected = (batch, filters, *_conv_output_size((h, w), (kh, kw), self))
        if dy.get_shape() != expected or min(expected) < 1:
            raise VerifyException(
                f"{what} gradient shape {list(dy.get_shape())} should be {list(expected)}"
            )


@irdl_op_definition
class ConvTransposeOp(FilterConvolution):
    """A 2-D transposed convolution (torch's conv_transpose2d, the gradient of a convolution
    with respect to its input) of x [batch, in channels, h, w] with a weight [in channels,
    out channels / groups, kh, kw], plus a bias per out channel if given. Each input pixel
    (y, x) scatters its filters onto the output at (y · stride - padding + dilation · tap);
    the result's size past the last pixel's reach (torch's output_padding) is below the
    stride or the dilation.

    %y = graph.conv_transpose %x, %w bias %b {stride = [2, 2], padding = [1, 1], dilation = [1, 1], groups = 1 : i64} : tensor<2x8x5x5xf32>, tensor<8x3x3x3xf32>, tensor<3xf32> -> tensor<2x3x10x10xf32>
    """

    name = "graph.conv_transpose"

    def reached_size(self) -> tuple[int, int]:
        """The output's height and width up to the last input pixel's reach (torch's size
        at output_padding 0)."""
        _, _, h, w = _float_tensor(self.input, "graph.conv_transpose input").get_shape()
        _, _, kh, kw = _float_tensor(self.weight, "graph.conv_transpose weight").get_shape()
        (sh, sw), (ph, pw), (dh, dw) = (
            _ints(a) for a in (self.stride, self.padding, self.dilation)
        )
        return (h - 1) * sh - 2 * ph + dh * (kh - 1) + 1, (w - 1) * sw - 2 * pw + dw * (kw - 1) + 1

    def verify_(self) -> None:
        x, w, out, bias = _verify_convolution(self)
        batch, channels, _, _ = x.get_shape()
        weight_channels, per_group, _, _ = w.get_shape()
        groups = self.groups.value.data
        if groups < 1 or channels % groups or weight_channels != channels:
            raise VerifyException(
                f"graph.conv_transpose of {channels} channels in {groups} groups with a "
                f"weight of {weight_channels} input channels"
            )
        filters = per_group * groups
        if bias is not None and bias.get_shape() != (filters,):
            raise VerifyException(f"graph.conv_transpose bias must have {filters} elements")
        reached, limits = (
            self.reached_size(),
            [max(s, d) for s, d in zip(_ints(self.stride), _ints(self.dilation), strict=True)],
        )
        shape = out.get_shape()
        extra = [size - reach for size, reach in zip(shape[2:], reached, strict=True)]
        fits = shape[:2] == (batch, filters) and min(reached) >= 1
        if not fits or any(not 0 <= e < limit for e, limit in zip(extra, limits, strict=True)):
            raise VerifyException(
                f"graph.conv_transpose result shape {list(shape)} should be "
                f"{[batch, filters, *reached]}, each spatial size up to "
                f"{[limit - 1 for limit in limits]} more"
            )


class NormOp(IRDLOperation):
    """A normalisation over the last dim with a weight (and for LayerNorm a bias) of that
    dim's length; statistics in f32. (Operands are declared by each op, in order: IRDL
    puts a subclass's fields before its base's.)"""

    eps = prop_def(FloatAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)

    def verify_(self) -> None:
        x = _float_tensor(self.operands[0], f"{self.name} input")  # each op's `x`
        if not x.get_shape():
            raise VerifyException(f"{self.name} needs a tensor of rank 1 or more")
        for operand in self.operands[1:]:
            param = _float_tensor(operand, f"{self.name} parameter")
            if param.get_shape() != x.get_shape()[-1:] or param.element_type != x.element_type:
                raise VerifyException(
                    f"{self.name} parameters must be {x.element_type}[{x.get_shape()[-1]}], not {param}"
                )
        if self.result.type != x:
            raise VerifyException(f"{self.name} result must have the input's type")


@irdl_op_definition
class LayerNormOp(NormOp):
    """`%y = graph.layer_norm %x, %w, %b {eps = 1e-05 : f64} : ...`: (x - mean) * rstd * w + b.
    A training forward's also gives each row's mean and rstd (f32), which its backward
    reads:

    %y, %mean, %rstd = graph.layer_norm %x, %w, %b {eps = 1e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<4x64xf32>, tensor<4xf32>, tensor<4xf32>
    """

    name = "graph.layer_norm"
    x = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    result = result_def(TensorType)
    statistics = var_result_def(TensorType)
    assembly_format = (
        "$x `,` $weight `,` $bias attr-dict `:` type($x) `,` type($weight) `,` type($bias) "
        "`->` type($result) (`,` type($statistics)^)?"
    )

    def __init__(
        self, x: SSAValue, weight: SSAValue, bias: SSAValue, eps: float, statistics: bool = False
    ):
        shape = SSAValue.get(x, type=TensorType).type.get_shape()
        rows = [TensorType(f32, shape[:-1])] * 2 if statistics else []
        super().__init__(
            operands=[x, weight, bias],
            result_types=[x.type, rows],
            properties={"eps": FloatAttr(eps, Float64Type())},
        )

    def verify_(self) -> None:
        super().verify_()
        if not self.statistics:
            return
        rows = TensorType(f32, SSAValue.get(self.x, type=TensorType).type.get_shape()[:-1])
        if [s.type for s in self.statistics] != [rows, rows]:
            raise VerifyException(f"{self.name}'s statistics must be a mean and an rstd {rows}")


@irdl_op_definition
class RmsNormOp(NormOp):
    """`%y = graph.rms_norm %x, %w {eps = 1e-06 : f64} : ...`: x * rsqrt(mean(x²) + eps) * w."""

    name = "graph.rms_norm"
    x = operand_def(TensorType)
    weight = operand_def(TensorType)
    assembly_format = "$x `,` $weight attr-dict `:` type($x) `,` type($weight) `->` type($result)"

    def __init__(self, x: SSAValue, weight: SSAValue, eps: float):
        super().__init__(
            operands=[x, weight],
            result_types=[x.type],
            properties={"eps": FloatAttr(eps, Float64Type())},
        )


@irdl_op_definition
class LayerNormBackwardOp(IRDLOperation):
    """The input gradient of a LayerNorm over the last dim, from the output's gradient, the
    input, the forward's f32 statistics (one mean and rstd per row) and the weight.

    %dx = graph.layer_norm_backward %dy, %x, %mean, %rstd, %w : tensor<4x64xf32>, tensor<4x64xf32>, tensor<4xf32>, tensor<4xf32>, tensor<64xf32> -> tensor<4x64xf32>
    """

    name = "graph.layer_norm_backward"
    grad = operand_def(TensorType)
    x = operand_def(TensorType)
    mean = operand_def(TensorType)
    rstd = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$grad `,` $x `,` $mean `,` $rstd `,` $weight attr-dict `:` type($grad) `,` type($x) "
        "`,` type($mean) `,` type($rstd) `,` type($weight) `->` type($result)"
    )

    def __init__(
        self, grad: SSAValue, x: SSAValue, mean: SSAValue, rstd: SSAValue, weight: SSAValue
    ):
        super().__init__(operands=[grad, x, mean, rstd, weight], result_types=[x.type])

    def verify_(self) -> None:
        rows = _verify_row_gradient(self.name, self.grad, self.x, self.result, self.weight)
        for stats in (self.mean, self.rstd):
            if stats.type != rows:
                raise VerifyException(f"{self.name}'s mean and rstd must be {rows}, one f32 a row")


def _verify_row_gradient(
    what: str, grad: SSAValue, x: SSAValue, result: SSAValue, weight: SSAValue
) -> TensorType:
    """A norm's input gradient over rows: the gradient, the input and the result of one
    float type, a weight of one value a column; the type of one f32 a row."""
    x_type = _float_tensor(x, f"{what} input")
    shape = x_type.get_shape()
    if not shape:
        raise VerifyException(f"{what} needs a tensor of rank 1 or more")
    if _float_tensor(grad, f"{what} gradient") != x_type or result.type != x_type:
        raise VerifyException(f"{what}'s gradient, input and result must share one type")
    if weight.type != TensorType(x_type.element_type, shape[-1:]):
        raise VerifyException(f"{what}'s weight must be one {x_type.element_type} a column")
    return TensorType(f32, shape[:-1])


@irdl_op_definition
class RmsNormBackwardOp(IRDLOperation):
    """The input gradient of an RMSNorm over the last dim, from the output's gradient, the
    input and the weight, and the rstd of each row (f32, which the weight's gradient reads):
    the forward saves no statistics.

    %dx, %rstd = graph.rms_norm_backward %dy, %x, %w {eps = 1.0e-06 : f64} : tensor<4x64xf32>, tensor<4x64xf32>, tensor<64xf32> -> (tensor<4x64xf32>, tensor<4xf32>)
    """

    name = "graph.rms_norm_backward"
    grad = operand_def(TensorType)
    x = operand_def(TensorType)
    weight = operand_def(TensorType)
    eps = prop_def(FloatAttr)
    dx = result_def(TensorType)
    rstd = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$grad `,` $x `,` $weight attr-dict `:` type($grad) `,` type($x) `,` type($weight) "
        "`->` `(` type($dx) `,` type($rstd) `)`"
    )

    def __init__(self, grad: SSAValue, x: SSAValue, weight: SSAValue, eps: float):
        shape = SSAValue.get(x, type=TensorType).type.get_shape()
        super().__init__(
            operands=[grad, x, weight],
            result_types=[x.type, TensorType(f32, shape[:-1])],
            properties={"eps": FloatAttr(eps, Float64Type())},
        )

    def verify_(self) -> None:
        rows = _verify_row_gradient(self.name, self.grad, self.x, self.dx, self.weight)
        if self.rstd.type != rows:
            raise VerifyException(f"{self.name}'s rstd must be {rows}, one f32 a row")


@irdl_op_definition
class BatchNormStatsOp(IRDLOperation):
    """A BatchNorm's per-channel sums over x [batch, channels, spatial] (its trailing dims
    as one), f32 [2, channels]: the mean and the biased variance of each channel's elements
    (a training forward's batch statistics), or, given the output's gradient dy and the
    forward's mean (f32, one a channel), Σ dy and Σ dy · (x - mean) (its backward's).

    %s = graph.batch_norm_stats %x : tensor<2x8x16xf32> -> tensor<2x8xf32>
    %g = graph.batch_norm_stats %x grad %dy mean %m : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<8xf32> -> tensor<2x8xf32>
    """

    name = "graph.batch_norm_stats"
    input = operand_def(TensorType)
    grad = opt_operand_def(TensorType)
    mean = opt_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$input (`grad` $grad^)? (`mean` $mean^)? attr-dict `:` type($input)"
        " (`,` type($grad)^)? (`,` type($mean)^)? `->` type($result)"
    )

    def __init__(self, input: SSAValue, grad: SSAValue | None = None, mean: SSAValue | None = None):
        channels = _float_tensor(input, "graph.batch_norm_stats input").get_shape()[1]
        super().__init__(
            operands=[
                input,
                [grad] if grad is not None else [],
                [mean] if mean is not None else [],
            ],
            result_types=[TensorType(f32, [2, channels])],
        )

    def verify_(self) -> None:
        what = self.name
        x = _float_tensor(self.input, f"{what} input")
        shape = x.get_shape()
        if len(shape) != 3:
            raise VerifyException(f"{what} needs an input of rank 3 (batch, channels, spatial)")
        if (self.grad is None) != (self.mean is None):
            raise VerifyException(f"{what} takes a gradient and a mean together or neither")
        if self.grad is not None and self.grad.type != x:
            raise VerifyException(f"{what}'s gradient must be {x}, the input's type")
        if self.mean is not None and self.mean.type != TensorType(f32, shape[1:2]):
            raise VerifyException(f"{what}'s mean must be one f32 a channel")
        if self.result.type != TensorType(f32, [2, shape[1]]):
            raise VerifyException(f"{what} gives f32 [2, {shape[1]}], two a channel")


class Reduction(StrEnum):
    """What graph.reduce computes over its dim (its dtypes: `REDUCE_KINDS`)."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    MEAN = "mean"
    LOGSUMEXP = "logsumexp"
    #: the variance, dividing by the count less `correction`
    VAR = "var"
    #: the standard deviation, dividing by the count less `correction`
    STD = "std"
    #: the index (i64) of the first largest element
    ARGMAX = "argmax"
    #: the index (i64) of the first smallest element
    ARGMIN = "argmin"
    #: whether an element is nonzero (a bool, i8)
    ANY = "any"
    #: whether every element is nonzero (a bool, i8)
    ALL = "all"


@irdl_attr_definition
class ReductionAttr(EnumAttribute[Reduction], SpacedOpaqueSyntaxAttribute):
    """`#graph<reduction sum>`"""

    name = "graph.reduction"


#: the kinds of graph.reduce that divide by the count less a `correction` (Bessel's: 1)
CORRECTED_KINDS = (Reduction.VAR, Reduction.STD)
#: graph.reduce's kinds: the inputs each takes (`float`: f32, f16, bf16; `int`: also i8
#: (bool), i32, i64) and its result's dtype, as torch gives it (`same`; `wide`: the same
#: for a float, i64 for an integer; `i64`: an index; `i8`: a bool)
REDUCE_KINDS: dict[Reduction, tuple[str, str]] = {
    Reduction.SUM: ("int", "wide"),
    Reduction.PROD: ("int", "wide"),
    Reduction.MAX: ("int", "same"),
    Reduction.MIN: ("int", "same"),
    Reduction.MEAN: ("float", "same"),
    Reduction.LOGSUMEXP: ("float", "same"),
    Reduction.VAR: ("float", "same"),
    Reduction.STD: ("float", "same"),
    Reduction.ARGMAX: ("int", "i64"),
    Reduction.ARGMIN: ("int", "i64"),
    Reduction.ANY: ("int", "i8"),
    Reduction.ALL: ("int", "i8"),
}


def reduce_result_dtype(kind: Reduction | str, element: Attribute) -> Attribute:
    """The element type of graph.reduce's result of `kind` over `element`."""
    rule = REDUCE_KINDS[Reduction(kind)][1]
    if rule == "same" or (rule == "wide" and dtypes.is_float_type(element)):
        return element
    return i8 if rule == "i8" else i64


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """A reduction over one dim, the last unless `dim` names another; the result keeps
    that dim as 1 or drops it. Its kinds and their dtypes are `REDUCE_KINDS`' (sum, prod,
    max, min, mean, logsumexp, argmax, argmin, any, all, var, std); an integer sum or prod
    accumulates exactly, in i64; var and std divide by the count less `correction`.

    %y = graph.reduce %x {kind = #graph<reduction sum>} : tensor<4x10xf32> -> tensor<4x1xf32>
    %i = graph.reduce %x {kind = #graph<reduction argmax>} : tensor<4x10xf32> -> tensor<4xi64>
    %v = graph.reduce %x {kind = #graph<reduction var>, correction = 1 : i64}
           : tensor<4x10xf32> -> tensor<4xf32>
    %s = graph.reduce %m {kind = #graph<reduction sum>, dim = 0 : i64}
           : tensor<4x10xi64> -> tensor<10xi64>
    """

    name = "graph.reduce"
    input = operand_def(TensorType)
    kind = prop_def(ReductionAttr)
    dim = opt_prop_def(IntegerAttr)
    correction = opt_prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(
        self,
        input: SSAValue,
        kind: Reduction | str,
        result_type: Attribute,
        correction: int | None = None,
        dim: int | None = None,
    ):
        properties: dict[str, Attribute] = {"kind": ReductionAttr(Reduction(kind))}
        if dim is not None:
            properties["dim"] = IntegerAttr(dim, i64)
        if correction is not None:
            properties["correction"] = IntegerAttr(correction, i64)
        super().__init__(operands=[input], result_types=[result_type], properties=properties)

    @property
    def reduced_dim(self) -> int:
        """The reduced dim, counted from the first."""
        return _reduced_dim(self, self.dim)

    def verify_(self) -> None:
        x, out = self.input.type, self.result.type
        assert isinstance(x, TensorType) and isinstance(out, TensorType)
        kind = self.kind.data
        if (self.correction is not None) != (kind in CORRECTED_KINDS):
            raise VerifyException(
                f"graph.reduce takes a correction with kinds {', '.join(CORRECTED_KINDS)} only"
            )
        takes = REDUCE_KINDS[kind][0]
        element = x.element_type
        if takes == "float" or not isinstance(element, IntegerType):
            _float_tensor(x, f"graph.reduce {kind} input")
        elif element not in (i8, i32, i64):
            raise VerifyException(f"graph.reduce {kind} input must not be {element}")
        expected = reduce_result_dtype(kind, element)
        if out.element_type != expected:
            raise VerifyException(
                f"graph.reduce {kind} of {element} gives {expected}, not {out.element_type}"
            )
        shape = x.get_shape()
        dim = self.reduced_dim
        kept = (shape[:dim] + shape[dim + 1 :], shape[:dim] + (1,) + shape[dim + 1 :])
        if out.get_shape() not in kept:
            where = "the last dim" if self.dim is None else f"dim {dim}"
            raise VerifyException(
                f"graph.reduce of {list(shape)} over {where} cannot give {list(out.get_shape())}"
            )


def _reduced_dim(op: IRDLOperation, dim: IntegerAttr | None) -> int:
    """The dim a reduction or scan runs over, from the first: the last unless `dim`."""
    rank = len(_shape_of(op.operands[0]))
    if rank == 0:
        raise VerifyException(f"{op.name} needs a tensor of rank 1 or more")
    value = rank - 1 if dim is None else dim.value.data
    if not -rank <= value < rank:
        raise VerifyException(f"{op.name} dim {value} is out of range for rank {rank}")
    return value % rank


@irdl_op_definition
class CumsumOp(IRDLOperation):
    """Inclusive prefix sums over one dim, the last unless `dim` names another:
    y[..., j, ...] = x[..., 0, ...] + ... + x[..., j, ...]. A float keeps its dtype (f32
    accumulation); an integer (i8 for bool, i32, i64) gives i64, summed exactly, as torch's
    cumsum does.

    %y = graph.cumsum %x : tensor<2x16xi64> -> tensor<2x16xi64>
    %z = graph.cumsum %x {dim = 0 : i64} : tensor<2x16xi64> -> tensor<2x16xi64>
    """

    name = "graph.cumsum"
    input = operand_def(TensorType)
    dim = opt_prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, result_type: Attribute, dim: int | None = None):
        properties = {"dim": IntegerAttr(dim, i64)} if dim is not None else {}
        super().__init__(operands=[input], result_types=[result_type], properties=properties)

    @property
    def scanned_dim(self) -> int:
        """The scanned dim, counted from the first."""
        return _reduced_dim(self, self.dim)

    def verify_(self) -> None:
        self.scanned_dim  # noqa: B018 - raises where the dim is out of range
        x, out = self.input.type, self.result.type
        assert isinstance(x, TensorType) and isinstance(out, TensorType)
        element = x.element_type
        if isinstance(element, IntegerType):
            if element not in (i8, i32, i64):
                raise VerifyException(f"graph.cumsum input must not be {element}")
        else:
            _float_tensor(x, "graph.cumsum input")
        expected = reduce_result_dtype(Reduction.SUM, element)
        if out != TensorType(expected, x.get_shape()):
            raise VerifyException(
                f"graph.cumsum of {x} gives {TensorType(expected, x.get_shape())}, not {out}"
            )


def _ids_tensor(value: SSAValue, what: str) -> TensorType:
    """An embedding's ids: a tensor of i32 or i64."""
    ids = value.type
    if not isinstance(ids, TensorType) or ids.element_type not in (i32, i64):
        raise VerifyException(f"{what} ids must be a tensor of i32 or i64, not {ids}")
    return ids


@irdl_op_definition
class EmbeddingOp(IRDLOperation):
    """Rows of a table gathered by integer ids: the result is ids' shape + [dim].

    %y = graph.embedding %table, %ids : tensor<100x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
    """

    name = "graph.embedding"
    table = operand_def(TensorType)
    ids = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)"

    def __init__(self, table: SSAValue, ids: SSAValue, result_type: Attribute):
        super().__init__(operands=[table, ids], result_types=[result_type])

    def verify_(self) -> None:
        table = _float_tensor(self.table, "graph.embedding table")
        ids = _ids_tensor(self.ids, "graph.embedding")
        if len(table.get_shape()) != 2:
            raise VerifyException("graph.embedding table must be 2-d")
        expected = TensorType(table.element_type, [*ids.get_shape(), table.get_shape()[1]])
        if self.result.type != expected:
            raise VerifyException(f"graph.embedding result should be {expected}")


@irdl_op_definition
class EmbeddingBackwardOp(IRDLOperation):
    """An embedding's weight gradient: row v of the result sums the gradient's rows of the
    tokens whose id is v (zero where none is), divided by their count where
    `scale_by_frequency` (scale_grad_by_freq); an id outside the table adds to no row.

    %dw = graph.embedding_backward %dy, %ids : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<100x64xf32>
    """

    name = "graph.embedding_backward"
    grad = operand_def(TensorType)
    ids = operand_def(TensorType)
    scale_by_frequency = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$grad `,` $ids attr-dict `:` type($grad) `,` type($ids) `->` type($result)"

    def __init__(
        self,
        grad: SSAValue,
        ids: SSAValue,
        result_type: Attribute,
        scale_by_frequency: bool = False,
    ):
        properties = {"scale_by_frequency": UnitAttr()} if scale_by_frequency else {}
        super().__init__(operands=[grad, ids], result_types=[result_type], properties=properties)

    def verify_(self) -> None:
        what = "graph.embedding_backward"
        grad = _float_tensor(self.grad, f"{what} gradient")
        ids = _ids_tensor(self.ids, what)
        shape = grad.get_shape()
        if list(shape[:-1]) != list(ids.get_shape()):
            raise VerifyException(f"{what}'s gradient must be the ids' shape + [dim]")
        result = self.result.type
        if (
            not isinstance(result, TensorType)
            or result.element_type != grad.element_type
            or len(result.get_shape()) != 2
            or result.get_shape()[1] != shape[-1]
        ):
            raise VerifyException(
                f"{what}'s result must be [vocab, {shape[-1]}] of the gradient's type"
            )


def _verify_attention_operands(
    what: str, q_value: SSAValue, k_value: SSAValue, v_value: SSAValue, mask: SSAValue | None
) -> TensorType:
    """Checks an attention's q, k, v and mask (graph.attention's, and its backward's), and
    gives q's type."""
    q = _float_tensor(q_value, f"{what} q")
    k = _float_tensor(k_value, f"{what} k")
    v = _float_tensor(v_value, f"{what} v")
    if len(q.get_shape()) != 4 or k.get_shape() != v.get_shape() or len(k.get_shape()) != 4:
        raise VerifyException(f"{what} takes q, k, v of rank 4 with k and v alike")
    if not q.element_type == k.element_type == v.element_type:
        raise VerifyException(f"{what} q, k and v must share one dtype")
    (b, h, _, d), (kb, kh, kv_len, kd) = q.get_shape(), k.get_shape()
    if kb != b or kd != d or kh == 0 or h % kh:
        raise VerifyException(
            f"{what} k/v {list(k.get_shape())} do not fit q {list(q.get_shape())}"
        )
    if mask is None:
        return q
    mask_type = _float_tensor(mask, f"{what} mask")
    q_len = q.get_shape()[2]
    shapes = [(g, *rows, kv_len) for g in (b, b * h) for rows in ((), (q_len,))]
    if mask_type.get_shape() not in shapes or mask_type.element_type != q.element_type:
        groups = f"{b}" if h == 1 else f"{b} or {b * h}"
        raise VerifyException(
            f"{what} mask must be {q.element_type} of shape [{groups}, {kv_len}] or [{groups},"
            f" {q_len}, {kv_len}] ([batch or batch·heads, (q_len,) kv_len]), not {mask_type}"
        )
    return q


@irdl_op_definition
class AttentionOp(IRDLOperation):
    """softmax(q kᵀ · scale [+ causal mask] [+ mask]) v over [batch, heads, len, dim] tensors;
    k and v may have fewer heads (grouped-query attention), each shared by heads / kv_heads
    queries. `mask` [batch, kv_len] is added to every score of a key (a padding mask: 0 where
    a key is attended, -inf where it is padding), the same for every head and query; a mask
    [batch, q_len, kv_len] is added per query too (a padding and causal mask in one, as
    Hugging Face models build it), the same for every head; a mask [batch·heads, ...] is
    added per head too.

    `library` runs it by the vendor library (torch's scaled_dot_product_attention) as a
    host call, not by emmy's kernels: offer-paths offers it as an option.

    %o = graph.attention %q, %k, %v mask %m {scale = 0.25 : f64, causal} : ..., tensor<2x16xf32> -> ...
    %o = graph.attention %q, %k, %v {scale = 0.25 : f64, library} : ...
    """

    name = "graph.attention"
    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    scale = prop_def(FloatAttr)
    causal = opt_prop_def(UnitAttr)
    library = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$q `,` $k `,` $v (`mask` $mask^)? attr-dict `:` type($q) `,` type($k) `,` type($v)"
        " (`,` type($mask)^)? `->` type($result)"
    )

    def __init__(
        self,
        q: SSAValue,
        k: SSAValue,
        v: SSAValue,
        scale: float,
        causal: bool,
        mask: SSAValue | None = None,
        library: bool = False,
    ):
        properties: dict[str, Attribute] = {"scale": FloatAttr(scale, Float64Type())}
        if causal:
            properties["causal"] = UnitAttr()
        if library:
            properties["library"] = UnitAttr()
        operands = [q, k, v, [mask] if mask is not None else []]
        super().__init__(operands=operands, result_types=[q.type], properties=properties)

    def verify_(self) -> None:
        q = _verify_attention_operands("graph.attention", self.q, self.k, self.v, self.mask)
        if self.result.type != q:
            raise VerifyException("graph.attention result must have q's type")


@irdl_op_definition
class AttentionGradientsOp(IRDLOperation):
    """The gradients of graph.attention's q, k and v from its output's gradient `grad` and
    its output `out`; operands and attributes are the attention's (k and v of fewer heads
    get their groups' gradients summed). offer-paths offers it as a choice between
    emmy's kernels (its parts, graph.attention_backward) and, with `library`, the vendor
    library's backward (torch's SDPA) as a host call.

    %dq, %dk, %dv = graph.attention_gradients %q, %k, %v, %do, %o {scale = 0.25 : f64, causal} : ... -> (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
    """

    name = "graph.attention_gradients"
    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    grad = operand_def(TensorType)
    out = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    scale = prop_def(FloatAttr)
    causal = opt_prop_def(UnitAttr)
    library = opt_prop_def(UnitAttr)
    grad_q = result_def(TensorType)
    grad_k = result_def(TensorType)
    grad_v = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$q `,` $k `,` $v `,` $grad `,` $out (`mask` $mask^)? attr-dict `:` type($q) `,`"
        " type($k) `,` type($v) `,` type($grad) `,` type($out) (`,` type($mask)^)? `->`"
        " `(` type($grad_q) `,` type($grad_k) `,` type($grad_v) `)`"
    )

    def __init__(
        self,
        qkv: tuple[SSAValue, SSAValue, SSAValue],
        grad: SSAValue,
        out: SSAValue,
        scale: float,
        causal: bool,
        mask: SSAValue | None = None,
        library: bool = False,
    ):
        properties: dict[str, Attribute] = {"scale": FloatAttr(scale, Float64Type())}
        if causal:
            properties["causal"] = UnitAttr()
        if library:
            properties["library"] = UnitAttr()
        operands = [*qkv, grad, out, [mask] if mask is not None else []]
        result_types = [value.type for value in qkv]
        super().__init__(operands=operands, result_types=result_types, properties=properties)

    def verify_(self) -> None:
        what = "graph.attention_gradients"
        q = _verify_attention_operands(what, self.q, self.k, self.v, self.mask)
        if self.grad.type != q or self.out.type != q:
            raise VerifyException(f"{what}'s output and its gradient must have q's type")
        results = [r.type for r in self.results]
        if results != [self.q.type, self.k.type, self.v.type]:
            raise VerifyException(f"{what}'s results must have the types of q, k and v")


class AttentionGradient(StrEnum):
    """What a graph.attention_backward computes: the rows' statistics its gradients read,
    or one gradient."""

    #: per query, f32 [..., 2]: the log-sum-exp of its scores and rowsum(dO ∘ O)
    STATS = "stats"
    QUERY = "query"
    KEY = "key"
    VALUE = "value"


@irdl_attr_definition
class AttentionGradientAttr(EnumAttribute[AttentionGradient], SpacedOpaqueSyntaxAttribute):
    """`#graph<attention_gradient query>`"""

    name = "graph.attention_gradient"


@irdl_op_definition
class AttentionBackwardOp(IRDLOperation):
    """A part of graph.attention's backward as FlashAttention-2 computes it, the
    probabilities recomputed from q and k, never stored: P = softmax(scale · q kᵀ + mask),
    dV = Pᵀ dO, dS = P ∘ (dO vᵀ − rowsum(dO ∘ O)), dQ = scale · dS k, dK = scale · dSᵀ q.
    `stats` gives each query's log-sum-exp and rowsum(dO ∘ O), f32 [batch, heads, q_len,
    2], from `aux` = the attention's output O; `query`, `key` and `value` give that
    gradient from `aux` = the stats. Operands and attributes are the attention's (k and v of
    fewer heads get their groups' gradients summed).

    %s = graph.attention_backward %q, %k, %v, %do, %o {gradient = #graph<attention_gradient stats>, scale = 0.125 : f64, causal} : ... -> tensor<1x2x8x2xf32>
    %dq = graph.attention_backward %q, %k, %v, %do, %s {gradient = #graph<attention_gradient query>, scale = 0.125 : f64, causal} : ... -> tensor<1x2x8x16xf32>
    """

    name = "graph.attention_backward"
    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    grad = operand_def(TensorType)
    aux = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    gradient = prop_def(AttentionGradientAttr)
    scale = prop_def(FloatAttr)
    causal = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$q `,` $k `,` $v `,` $grad `,` $aux (`mask` $mask^)? attr-dict `:` type($q) `,`"
        " type($k) `,` type($v) `,` type($grad) `,` type($aux) (`,` type($mask)^)? `->`"
        " type($result)"
    )

    def __init__(
        self,
        qkv: tuple[SSAValue, SSAValue, SSAValue],
        grad: SSAValue,
        aux: SSAValue,
        gradient: AttentionGradient,
        result_type: Attribute,
        scale: float,
        causal: bool,
        mask: SSAValue | None = None,
    ):
        properties: dict[str, Attribute] = {
            "gradient": AttentionGradientAttr(gradient),
            "scale": FloatAttr(scale, Float64Type()),
        }
        if causal:
            properties["causal"] = UnitAttr()
        operands = [*qkv, grad, aux, [mask] if mask is not None else []]
        super().__init__(operands=operands, result_types=[result_type], properties=properties)

    @property
    def aux_name(self) -> str:
        """What `aux` holds: the attention's output for the stats, else the stats."""
        return "output" if self.gradient.data == AttentionGradient.STATS else "stats"

    def verify_(self) -> None:
        what = "graph.attention_backward"
        q = _verify_attention_operands(what, self.q, self.k, self.v, self.mask)
        grad = _float_tensor(self.grad, f"{what} gradient")
        aux = _float_tensor(self.aux, f"{what} {self.aux_name}")
        if grad != q:
            raise VerifyException(f"{what}'s output gradient must have q's type")
        batch, heads, q_len, _ = q.get_shape()
        stats = TensorType(f32, [batch, heads, q_len, 2])
        expected = {
            AttentionGradient.STATS: (q, stats),
            AttentionGradient.QUERY: (stats, q),
            AttentionGradient.KEY: (stats, self.k.type),
            AttentionGradient.VALUE: (stats, self.v.type),
        }[self.gradient.data]
        if (aux, self.result.type) != expected:
            raise VerifyException(
                f"{what} {self.gradient.data} takes {self.aux_name} {expected[0]} and gives"
                f" {expected[1]}, not {aux} and {self.result.type}"
            )


@irdl_op_definition
class CachedAttentionOp(IRDLOperation):
    """Causal attention of the newest `new` tokens over a static KV cache at a runtime
    length (emmy::cached_attention): q [batch, heads, new, dim], k_cache and v_cache [batch,
    kv_heads, max_len, dim] (grouped-query where kv_heads < heads), length an i64 tensor [1],
    the cache's length after this step's writes. Query i sits at position length - new + i
    and sees the keys up to its own; positions from `length` on are never read. Scale
    1/sqrt(dim).

    %o = graph.cached_attention %q, %k, %v, %len : tensor<1x4x1x16xf32>, tensor<1x2x64x16xf32>, tensor<1x2x64x16xf32>, tensor<1xi64> -> tensor<1x4x1x16xf32>
    """

    name = "graph.cached_attention"
    q = operand_def(TensorType)
    k_cache = operand_def(TensorType)
    v_cache = operand_def(TensorType)
    length = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = (
        "$q `,` $k_cache `,` $v_cache `,` $length attr-dict `:` type($q) `,` type($k_cache)"
        " `,` type($v_cache) `,` type($length) `->` type($result)"
    )

    def __init__(self, q: SSAValue, k_cache: SSAValue, v_cache: SSAValue, length: SSAValue):
        super().__init__(operands=[q, k_cache, v_cache, length], result_types=[q.type])

    def verify_(self) -> None:
        q = _float_tensor(self.q, "graph.cached_attention q")
        k = _float_tensor(self.k_cache, "graph.cached_attention k_cache")
        v = _float_tensor(self.v_cache, "graph.cached_attention v_cache")
        if len(q.get_shape()) != 4 or len(k.get_shape()) != 4 or k != v:
            raise VerifyException(
                "graph.cached_attention takes q and caches of rank 4 with the caches alike"
            )
        if not q.element_type == k.element_type:
            raise VerifyException("graph.cached_attention q and the caches must share one dtype")
        (b, h, new, d), (kb, kh, max_len, kd) = q.get_shape(), k.get_shape()
        if kb != b or kd != d or kh == 0 or h % kh or new > max_len:
            raise VerifyException(
                f"graph.cached_attention caches {list(k.get_shape())} do not fit q "
                f"{list(q.get_shape())}"
            )
        if self.length.type != TensorType(IntegerType(64), [1]):
            raise VerifyException(
                f"graph.cached_attention length must be tensor<1xi64>, not {self.length.type}"
            )
        if self.result.type != q:
            raise VerifyException("graph.cached_attention result must have q's type")


@irdl_op_definition
class RopeOp(IRDLOperation):
    """Rotary embedding, rotate-half form, of x [batch, seq, heads, dim] by cos and sin
    [seq, dim / 2].

    %y = graph.rope %x, %cos, %sin : ...
    """

    name = "graph.rope"
    x = operand_def(TensorType)
    cos = operand_def(TensorType)
    sin = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$x `,` $cos `,` $sin attr-dict `:` type($x) `,` type($cos) `,` type($sin) `->` type($result)"

    def __init__(self, x: SSAValue, cos: SSAValue, sin: SSAValue):
        super().__init__(operands=[x, cos, sin], result_types=[x.type])

    def verify_(self) -> None:
        x = _float_tensor(self.x, "graph.rope x")
        shape = x.get_shape()
        if len(shape) != 4 or shape[-1] % 2:
            raise VerifyException("graph.rope x must be [batch, seq, heads, dim] with an even dim")
        table = TensorType(x.element_type, [shape[1], shape[3] // 2])
        if self.cos.type != table or self.sin.type != table:
            raise VerifyException(f"graph.rope cos and sin must be {table}")
        if self.result.type != x:
            raise VerifyException("graph.rope result must have x's type")


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """The same elements in row-major order under another shape: no data moves.

    %y = graph.reshape %x : tensor<2x8x64xf32> -> tensor<16x64xf32>
    """

    name = "graph.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, result_type: Attribute):
        super().__init__(operands=[input], result_types=[result_type])

    def verify_(self) -> None:
        x, out = self.input.type, self.result.type
        assert isinstance(x, TensorType) and isinstance(out, TensorType)
        if x.element_type != out.element_type or _numel(x.get_shape()) != _numel(out.get_shape()):
            raise VerifyException(f"graph.reshape cannot make {out} of {x}")


@irdl_op_definition
class MaskBiasOp(IRDLOperation):
    """The additive form of a boolean mask (stored one byte per element, 0 or 1): 0.0
    where the mask is true (the key is read), -inf where it is false, as attention adds it.

    %bias = graph.mask_bias %mask : tensor<2x16xi8> -> tensor<2x16xf32>
    """

    name = "graph.mask_bias"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, result_type: Attribute):
        super().__init__(operands=[input], result_types=[result_type])

    def verify_(self) -> None:
        mask, out = self.input.type, self.result.type
        assert isinstance(mask, TensorType)
        if mask.element_type != i8:
            raise VerifyException(f"graph.mask_bias operand must be a tensor of i8, not {mask}")
        _float_tensor(self.result, "graph.mask_bias result")
        assert isinstance(out, TensorType)
        if out.get_shape() != mask.get_shape():
            raise VerifyException("graph.mask_bias result must have its operand's shape")


@irdl_op_definition
class AsStridedOp(IRDLOperation):
    """A copy of a strided view of the row-major elements of x: result element
    [i0, i1, ...] is element offset + Σ i_d · strides[d] of x. Permutes, slices and
    broadcasts that a kernel cannot read in place become this.

    %y = graph.as_strided %x {strides = [120, 8, 24, 1], offset = 0 : i64} : ...
    """

    name = "graph.as_strided"
    input = operand_def(TensorType)
    strides = prop_def(ArrayAttr[IntegerAttr])
    offset = prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(
        self, input: SSAValue, result_type: Attribute, strides: Sequence[int], offset: int
    ):
        super().__init__(
            operands=[input],
            result_types=[result_type],
            properties={
                "strides": ArrayAttr([IntegerAttr(s, i64) for s in strides]),
                "offset": IntegerAttr(offset, i64),
            },
        )

    def verify_(self) -> None:
        x, out = self.input.type, self.result.type
        assert isinstance(x, TensorType) and isinstance(out, TensorType)
        if x.element_type != out.element_type:
            raise VerifyException("graph.as_strided keeps the dtype")
        strides = [s.value.data for s in self.strides.data]
        shape = out.get_shape()
        if len(strides) != len(shape) or any(s < 0 for s in strides):
            raise VerifyException("graph.as_strided needs one non-negative stride per result dim")
        last = self.offset.value.data + sum(
            (n - 1) * s for n, s in zip(shape, strides, strict=True)
        )
        if self.offset.value.data < 0 or (_numel(shape) and last >= _numel(x.get_shape())):
            raise VerifyException(f"graph.as_strided reads element {last} of {x}")


def _ints(attr: ArrayAttr[IntegerAttr]) -> list[int]:
    return [a.value.data for a in attr.data]


def _pair(attr: ArrayAttr[IntegerAttr]) -> tuple[int, int]:
    """The (along h, along w) of a 2-d field, such as a pool's window."""
    h, w = _ints(attr)
    return h, w


def _int_array(values: Sequence[int]) -> ArrayAttr:
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


@irdl_op_definition
class GatherOp(IRDLOperation):
    """Result element [o0, o1, ...] is element offset + Σ o_d · strides[d] + Σ_t k_t ·
    index_steps[t] of x's row-major elements, where k_t is element Σ o_d · index_strides[t][d]
    of index tensor t, counted from the end of its dim of index_sizes[t] elements where it is
    negative. Strides may be negative (a flip) or 0 (a broadcast). index_select, gather,
    advanced indexing, flip and roll become this.

    %y = graph.gather %x[%ids] {strides = [0, 1], offset = 0 : i64, index_strides = [[1, 0]],
           index_sizes = [100], index_steps = [64]}
           : tensor<100x64xf32>, tensor<7xi64> -> tensor<7x64xf32>
    """

    name = "graph.gather"
    input = operand_def(TensorType)
    indices = var_operand_def(TensorType)
    strides = prop_def(ArrayAttr[IntegerAttr])
    offset = prop_def(IntegerAttr)
    index_strides = prop_def(ArrayAttr[ArrayAttr[IntegerAttr]])
    index_sizes = prop_def(ArrayAttr[IntegerAttr])
    index_steps = prop_def(ArrayAttr[IntegerAttr])
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `[` $indices `]` attr-dict `:` type($input) (`,` type($indices)^)? "
        "`->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue,
        result_type: Attribute,
        strides: Sequence[int],
        offset: int,
        indices: Sequence[tuple[SSAValue, Sequence[int], int, int]] = (),
    ):
        """`indices`: per index tensor, (its value, its strides per result dim, the size
        of the dim it picks in, that dim's stride in x)."""
        super().__init__(
            operands=[input, [i[0] for i in indices]],
            result_types=[result_type],
            properties={
                "strides": _int_array(strides),
                "offset": IntegerAttr(offset, i64),
                "index_strides": ArrayAttr([_int_array(i[1]) for i in indices]),
                "index_sizes": _int_array([i[2] for i in indices]),
                "index_steps": _int_array([i[3] for i in indices]),
            },
        )

    def verify_(self) -> None:
        x, out = self.input.type, self.result.type
        assert isinstance(x, TensorType) and isinstance(out, TensorType)
        if x.element_type != out.element_type:
            raise VerifyException("graph.gather keeps the dtype")
        shape, strides = out.get_shape(), _ints(self.strides)
        count = len(self.indices)
        if len(strides) != len(shape):
            raise VerifyException("graph.gather needs one stride per result dim")
        if not len(self.index_strides) == len(self.index_sizes) == len(self.index_steps) == count:
            raise VerifyException("graph.gather needs strides, a size and a step per index")
        low = high = self.offset.value.data
        for size, stride in zip(shape, strides, strict=True):
            low, high = low + min(0, (size - 1) * stride), high + max(0, (size - 1) * stride)
        for index, index_strides, size, step in zip(
            self.indices,
            self.index_strides.data,
            _ints(self.index_sizes),
            _ints(self.index_steps),
            strict=True,
        ):
            typ = index.type
            if not isinstance(typ, TensorType) or typ.element_type not in (i32, i64):
                raise VerifyException(f"graph.gather indices must be i32 or i64, not {typ}")
            reach = sum((n - 1) * q for n, q in zip(shape, _ints(index_strides), strict=True))
            if len(index_strides) != len(shape) or min(_ints(index_strides), default=0) < 0:
                raise VerifyException("graph.gather needs a non-negative index stride per dim")
            if _numel(shape) and reach >= _numel(typ.get_shape()):
                raise VerifyException(f"graph.gather reads element {reach} of {typ}")
            if size < 1 or step < 0:
                raise VerifyException("graph.gather picks in dims of positive size")
            high += (size - 1) * step
        if _numel(shape) and (low < 0 or high >= _numel(x.get_shape())):
            raise VerifyException(f"graph.gather reads elements {low}..{high} of {x}")


class Triangle(StrEnum):
    """The part of a matrix graph.triangle keeps."""

    #: col - row >= diagonal (torch.triu)
    UPPER = "upper"
    #: col - row <= diagonal (torch.tril)
    LOWER = "lower"


@irdl_attr_definition
class TriangleAttr(EnumAttribute[Triangle], SpacedOpaqueSyntaxAttribute):
    """`#graph<triangle upper>`"""

    name = "graph.triangle"


@irdl_op_definition
class TriangleOp(IRDLOperation):
    """The upper (torch.triu) or lower (torch.tril) triangle of each matrix of the last two
    dims, from its `diagonal` on; zeros elsewhere.

    %y = graph.triangle %x {part = #graph<triangle upper>, diagonal = 1 : i64}
           : tensor<2x8x8xf32> -> tensor<2x8x8xf32>
    """

    name = "graph.triangle"
    input = operand_def(TensorType)
    part = prop_def(TriangleAttr)
    diagonal = prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue, part: Triangle, diagonal: int):
        super().__init__(
            operands=[input],
            result_types=[input.type],
            properties={"part": TriangleAttr(part), "diagonal": IntegerAttr(diagonal, i64)},
        )

    def verify_(self) -> None:
        x = _float_tensor(self.input, "graph.triangle input")
        if len(x.get_shape()) < 2 or self.result.type != x:
            raise VerifyException("graph.triangle takes a matrix or a batch of them, as it gives")


class Pooling(StrEnum):
    """What graph.pool computes of each window."""

    #: the largest element (NaN wins, as torch's)
    MAX = "max"
    #: the mean, by the divisor the op's fields give
    AVG = "avg"
    #: the index (h · width + w, i64) of the element MAX picks, as max pooling's indices
    ARGMAX = "argmax"


@irdl_attr_definition
class PoolingAttr(EnumAttribute[Pooling], SpacedOpaqueSyntaxAttribute):
    """`#graph<pooling max>`"""

    name = "graph.pooling"


#: a fixed pooling window's fields (graph.pool's, graph.pool_backward's), each a pair
#: (along h, along w)
WINDOW_FIELDS = ("window", "stride", "padding", "dilation")


def _window_properties(
    window: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int]
) -> dict[str, Attribute]:
    fields = (window, stride, padding, dilation)
    return {name: _int_array(pair) for name, pair in zip(WINDOW_FIELDS, fields, strict=True)}


def _pooling_properties(
    kind: Pooling,
    window: Sequence[int] | None,
    steps: tuple[Sequence[int], Sequence[int], Sequence[int]],
    count_pad: bool,
    divisor: int | None,
) -> dict[str, Attribute]:
    """A pooling's properties (graph.pool's and its gradient's): adaptive where `window`
    is None, else the window with its stride, padding and dilation (`steps`)."""
    properties: dict[str, Attribute] = {"kind": PoolingAttr(kind)}
    if window is None:
        properties["adaptive"] = UnitAttr()
    else:
        properties |= _window_properties(window, *steps)
    if count_pad:
        properties["count_pad"] = UnitAttr()
    if divisor is not None:
        properties["divisor"] = IntegerAttr(divisor, i64)
    return properties


def _window_of(op: IRDLOperation) -> dict[str, tuple[int, int]]:
    """A fixed window's fields by name, each (along h, along w)."""
    return {name: _pair(getattr(op, name)) for name in WINDOW_FIELDS}


def _verify_window(what: str, op: IRDLOperation) -> dict[str, tuple[int, int]]:
    """Checks a fixed window's fields (pairs; a positive window, stride and dilation), and
    gives them."""
    if any(getattr(op, name) is None or len(getattr(op, name)) != 2 for name in WINDOW_FIELDS):
        raise VerifyException(f"{what} needs a window, stride, padding and dilation of 2")
    fixed = _window_of(op)
    if min(fixed["window"] + fixed["stride"] + fixed["dilation"]) < 1:
        raise VerifyException(f"{what} needs a positive window, stride and dilation")
    return fixed


@irdl_op_definition
class PoolOp(IRDLOperation):
    """Pooling over the last two dims: output [oh, ow] of each [h, w] plane reduces one
    window. A fixed window of `window` taps (`dilation` apart) starts at o · stride -
    padding, its taps outside the plane skipped; an average divides by `divisor` where
    given, else by the taps inside the padded plane (`count_pad`) or inside the plane.
    An `adaptive` window of output i spans floor(i · h / oh) to ceil((i + 1) · h / oh).

    %y = graph.pool %x {kind = #graph<pooling max>, window = [3, 3], stride = [2, 2],
           padding = [1, 1], dilation = [1, 1]} : tensor<2x3x9x11xf32> -> tensor<2x3x5x6xf32>
    %a = graph.pool %x {kind = #graph<pooling avg>, adaptive}
           : tensor<2x3x9x11xf32> -> tensor<2x3x7x7xf32>
    """

    name = "graph.pool"
    input = operand_def(TensorType)
    kind = prop_def(PoolingAttr)
    window = opt_prop_def(ArrayAttr[IntegerAttr])
    stride = opt_prop_def(ArrayAttr[IntegerAttr])
    padding = opt_prop_def(ArrayAttr[IntegerAttr])
    dilation = opt_prop_def(ArrayAttr[IntegerAttr])
    adaptive = opt_prop_def(UnitAttr)
    count_pad = opt_prop_def(UnitAttr)
    divisor = opt_prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(
        self,
        input: SSAValue,
        kind: Pooling,
        result_type: Attribute,
        window: Sequence[int] | None = None,
        stride: Sequence[int] = (1, 1),
        padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
        count_pad: bool = False,
        divisor: int | None = None,
    ):
        """An adaptive pooling where `window` is None, else a fixed window's."""
        properties = _pooling_properties(
            kind, window, (stride, padding, dilation), count_pad, divisor
        )
        super().__init__(operands=[input], result_types=[result_type], properties=properties)

    def fixed(self) -> dict[str, tuple[int, int]]:
        """A fixed window's fields by name, each (along h, along w)."""
        return _window_of(self)

    def verify_(self) -> None:
        x = _float_tensor(self.input, "graph.pool input")
        out = self.result.type
        assert isinstance(out, TensorType)
        shape, sizes = x.get_shape(), out.get_shape()
        argmax = self.kind.data == Pooling.ARGMAX
        element = i64 if argmax else x.element_type
        if len(shape) < 2 or len(sizes) != len(shape) or shape[:-2] != sizes[:-2]:
            raise VerifyException(f"graph.pool of {x} cannot give {out}")
        if out.element_type != element or min(sizes[-2:]) < 1 or min(shape[-2:]) < 1:
            raise VerifyException(f"graph.pool {self.kind.data} of {x} cannot give {out}")
        fields = [self.window, self.stride, self.padding, self.dilation]
        if self.adaptive is not None:
            if any(f is not None for f in fields):
                raise VerifyException("an adaptive graph.pool has no window, stride or padding")
            return
        fixed = _verify_window("graph.pool", self)
        for d, (n, o) in enumerate(zip(shape[-2:], sizes[-2:], strict=True)):
            k, pad = fixed["window"][d], fixed["padding"][d]
            if pad < 0 or 2 * pad > k or (o - 1) * fixed["stride"][d] - pad >= n:
                raise VerifyException(
                    f"graph.pool of {n} by a window of {k} padded by {pad} cannot give {o}"
                )


@irdl_op_definition
class PoolBackwardOp(IRDLOperation):
    """Pooling's input gradient over the last two dims (graph.pool's), from the output's
    gradient: element (iy, ix) of each plane sums over the outputs whose window holds it;
    for max, the gradients of those whose `indices` (iy · w + ix of the tap each output
    kept, i64) name it; for avg, each gradient over its output's count (as graph.pool's
    average divides: `divisor`, or the taps inside the padded plane with `count_pad`, or
    inside the plane). An `adaptive` pooling's windows are graph.pool's.

    %dx = graph.pool_backward %dy indices %i {kind = #graph<pooling max>, window = [2, 2],
            stride = [2, 2], padding = [0, 0], dilation = [1, 1]}
            : tensor<2x3x4x5xf32>, tensor<2x3x4x5xi64> -> tensor<2x3x8x10xf32>
    """

    name = "graph.pool_backward"
    grad = operand_def(TensorType)
    indices = opt_operand_def(TensorType)
    kind = prop_def(PoolingAttr)
    window = opt_prop_def(ArrayAttr[IntegerAttr])
    stride = opt_prop_def(ArrayAttr[IntegerAttr])
    padding = opt_prop_def(ArrayAttr[IntegerAttr])
    dilation = opt_prop_def(ArrayAttr[IntegerAttr])
    count_pad = opt_prop_def(UnitAttr)
    divisor = opt_prop_def(IntegerAttr)
    adaptive = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$grad (`indices` $indices^)? attr-dict `:` type($grad) (`,` type($indices)^)? `->`"
        " type($result)"
    )

    def __init__(
        self,
        grad: SSAValue,
        indices: SSAValue | None,
        result_type: Attribute,
        window: Sequence[int] | None,
        stride: Sequence[int] = (1, 1),
        padding: Sequence[int] = (0, 0),
        dilation: Sequence[int] = (1, 1),
        count_pad: bool = False,
        divisor: int | None = None,
    ):
        """Max pooling's gradient where `indices` are given, else average pooling's; an
        adaptive pooling's where `window` is None."""
        kind = Pooling.MAX if indices is not None else Pooling.AVG
        properties = _pooling_properties(
            kind, window, (stride, padding, dilation), count_pad, divisor
        )
        operands = [grad, [indices] if indices is not None else []]
        super().__init__(operands=operands, result_types=[result_type], properties=properties)

    def fixed(self) -> dict[str, tuple[int, int]]:
        """The window's fields by name, each (along h, along w)."""
        return _window_of(self)

    def verify_(self) -> None:
        what = "graph.pool_backward"
        grad = _float_tensor(self.grad, f"{what} gradient")
        kind, out = self.kind.data, self.result.type
        if kind == Pooling.ARGMAX or (self.indices is None) != (kind == Pooling.AVG):
            raise VerifyException(f"{what} is of max pooling (with indices) or avg (without)")
        indices = self.indices.type if self.indices is not None else None
        if indices is not None and indices != TensorType(i64, grad.get_shape()):
            raise VerifyException(f"{what}'s indices must be i64 of the gradient's shape")
        assert isinstance(out, TensorType)
        shape, sizes = grad.get_shape(), out.get_shape()
        if len(shape) < 2 or len(sizes) != len(shape) or shape[:-2] != sizes[:-2]:
            raise VerifyException(f"{what} of {grad} cannot give {out}")
        if out.element_type != grad.element_type or min(sizes[-2:]) < 1:
            raise VerifyException(f"{what} of {grad} cannot give {out}")
        if self.adaptive is None:
            _verify_window(what, self)
            return
        fields = [self.window, self.stride, self.padding, self.dilation, self.divisor]
        if any(f is not None for f in fields) or self.count_pad is not None:
            raise VerifyException(f"an adaptive {what} has no window, stride, padding or count")


class Resize(StrEnum):
    """How graph.resize reads its input at an output position."""

    #: the element at floor(o · scale)
    NEAREST = "nearest"
    #: the bilinear interpolation of the four elements around the source position
    BILINEAR = "bilinear"


@irdl_attr_definition
class ResizeAttr(EnumAttribute[Resize], SpacedOpaqueSyntaxAttribute):
    """`#graph<resize bilinear>`"""

    name = "graph.resize"


class ResizeBase(IRDLOperation):
    """An upsampling's properties, and the sizes both of its ops take: each [h, w] plane of
    the last two dims of one tensor and of the other, of one float type."""

    input = operand_def(TensorType)
    mode = prop_def(ResizeAttr)
    scales = prop_def(ArrayAttr[FloatAttr])
    align_corners = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(
        self,
        input: SSAValue,
        mode: Resize,
        result_type: Attribute,
        scales: Sequence[float],
        align_corners: bool = False,
    ):
        properties: dict[str, Attribute] = {
            "mode": ResizeAttr(mode),
            "scales": ArrayAttr([FloatAttr(float(s), Float64Type()) for s in scales]),
        }
        if align_corners:
            properties["align_corners"] = UnitAttr()
        super().__init__(operands=[input], result_types=[result_type], properties=properties)

    def verify_(self) -> None:
        x = _float_tensor(self.input, f"{self.name} input")
        out = self.result.type
        assert isinstance(out, TensorType)
        shape, sizes = x.get_shape(), out.get_shape()
        if len(shape) < 2 or len(sizes) != len(shape) or shape[:-2] != sizes[:-2]:
            raise VerifyException(f"{self.name} of {x} cannot give {out}")
        if out.element_type != x.element_type or min(*shape[-2:], *sizes[-2:]) < 1:
            raise VerifyException(f"{self.name} of {x} cannot give {out}")
        if len(self.scales) != 2 or any(s.value.data < 0 for s in self.scales.data):
            raise VerifyException(f"{self.name} needs two non-negative scales")
        if self.align_corners is not None and self.mode.data != Resize.BILINEAR:
            raise VerifyException(f"{self.name} aligns corners in bilinear mode alone")


@irdl_op_definition
class ResizeOp(ResizeBase):
    """Each [h, w] plane of the last two dims resized to [oh, ow], as torch's upsampling:
    output o reads source position o · scale (nearest: its floor; bilinear without
    `align_corners`: (o + 0.5) · scale - 0.5, at least 0), per dim by `scales` (input over
    output unless the caller's scale factor says otherwise; (h - 1) / (oh - 1) with
    `align_corners`).

    %y = graph.resize %x {mode = #graph<resize bilinear>, scales = [0.5 : f64, 0.5 : f64]}
           : tensor<2x3x5x7xf32> -> tensor<2x3x10x14xf32>
    """

    name = "graph.resize"


@irdl_op_definition
class ResizeBackwardOp(ResizeBase):
    """The input gradient of a graph.resize of the same properties, from its output's
    gradient dy [.., oh, ow]: each input element sums the elements of dy whose outputs read
    it, by the weights they read it with.

    %dx = graph.resize_backward %dy {mode = #graph<resize bilinear>, scales = [0.5 : f64, 0.5 : f64]}
            : tensor<2x3x10x14xf32> -> tensor<2x3x5x7xf32>
    """

    name = "graph.resize_backward"


@irdl_op_definition
class CatOp(IRDLOperation):
    """Its inputs one after another along `dim`: they have one dtype and the same sizes in
    every other dim.

    %y = graph.cat %a, %b {dim = 1 : i64} : tensor<2x3xf32>, tensor<2x5xf32> -> tensor<2x8xf32>
    """

    name = "graph.cat"
    inputs = var_operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$inputs attr-dict `:` type($inputs) `->` type($result)"

    def __init__(self, inputs: Sequence[SSAValue], dim: int, result_type: Attribute):
        super().__init__(
            operands=[inputs], result_types=[result_type], properties={"dim": IntegerAttr(dim, i64)}
        )

    def verify_(self) -> None:
        out = self.result.type
        assert isinstance(out, TensorType)
        shape, dim = out.get_shape(), self.dim.value.data
        if not self.inputs or not 0 <= dim < len(shape):
            raise VerifyException("graph.cat takes inputs along one of the result's dims")
        total = 0
        for value in self.inputs:
            typ = value.type
            assert isinstance(typ, TensorType)
            sizes = typ.get_shape()
            if typ.element_type != out.element_type or len(sizes) != len(shape):
                raise VerifyException(f"graph.cat input {typ} does not fit {out}")
            if any(a != b for d, (a, b) in enumerate(zip(sizes, shape, strict=True)) if d != dim):
                raise VerifyException(f"graph.cat input {typ} does not fit {out}")
            total += sizes[dim]
        if total != shape[dim]:
            raise VerifyException(
                f"graph.cat inputs give {total} along dim {dim}, not {shape[dim]}"
            )


@irdl_op_definition
class IndexCopyOp(IRDLOperation):
    """`input` with rows along `dim` replaced: row index[j] of the result is row j of
    `source` (which has index's length along `dim` and input's sizes elsewhere), the other
    rows are input's. A static KV cache's update (Hugging Face's `index_copy_` at the cache
    positions): the positions are a runtime tensor, so one kernel serves every step.

    %y = graph.index_copy %cache[%pos], %new {dim = 2 : i64}
           : tensor<1x2x64x16xf32>, tensor<1xi64>, tensor<1x2x1x16xf32> -> tensor<1x2x64x16xf32>
    """

    name = "graph.index_copy"
    input = operand_def(TensorType)
    index = operand_def(TensorType)
    source = operand_def(TensorType)
    dim = prop_def(IntegerAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$input `[` $index `]` `,` $source attr-dict `:` type($input) `,` type($index) `,` "
        "type($source) `->` type($result)"
    )

    def __init__(self, input: SSAValue, dim: int, index: SSAValue, source: SSAValue):
        super().__init__(
            operands=[input, index, source],
            result_types=[input.type],
            properties={"dim": IntegerAttr(dim, i64)},
        )

    def verify_(self) -> None:
        x = _storage_tensor(self.input, "graph.index_copy input")
        source = _storage_tensor(self.source, "graph.index_copy source")
        index = self.index.type
        if not isinstance(index, TensorType) or index.element_type not in (i32, i64):
            raise VerifyException(f"graph.index_copy index must be i32 or i64, not {index}")
        if len(index.get_shape()) > 1:
            raise VerifyException("graph.index_copy index must be 0-d or 1-d")
        if self.result.type != x or source.element_type != x.element_type:
            raise VerifyException("graph.index_copy keeps its input's type and dtype")
        shape, dim = list(x.get_shape()), self.dim.value.data
        if not 0 <= dim < len(shape):
            raise VerifyException(f"graph.index_copy dim {dim} is not a dim of {x}")
        shape[dim] = _numel(tuple(index.get_shape()))
        if list(source.get_shape()) != shape:
            raise VerifyException(f"graph.index_copy source {source} does not fit {x}")


@irdl_op_definition
class GroupedMatmulOp(IRDLOperation):
    """A mixture of experts' matmul: rows of `lhs` [rows, k] multiplied by the weight of
    their group, `rhs` [groups, k, n] (`transpose_b`: stored [groups, n, k]). The groups'
    rows lie one after another, group g's from offsets[g - 1] (0 for g = 0) up to
    offsets[g] (cumulative counts, i32 or i64, read at run time: a group may be empty);
    rows past the last offset are zero.

    %c = graph.grouped_matmul %a, %w, %offsets {transpose_b} : tensor<32x64xf32>, tensor<4x128x64xf32>, tensor<4xi32> -> tensor<32x128xf32>
    """

    name = "graph.grouped_matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    offsets = operand_def(TensorType)
    transpose_b = opt_prop_def(UnitAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$lhs `,` $rhs `,` $offsets attr-dict `:` type($lhs) `,` type($rhs) `,` "
        "type($offsets) `->` type($result)"
    )

    def __init__(
        self,
        lhs: SSAValue,
        rhs: SSAValue,
        offsets: SSAValue,
        result_type: Attribute,
        transpose_b: bool,
    ):
        super().__init__(
            operands=[lhs, rhs, offsets],
            result_types=[result_type],
            properties={"transpose_b": UnitAttr()} if transpose_b else {},
        )

    def verify_(self) -> None:
        a = _float_tensor(self.lhs, "graph.grouped_matmul lhs")
        b = _float_tensor(self.rhs, "graph.grouped_matmul rhs")
        out = _float_tensor(self.result, "graph.grouped_matmul result")
        if not a.element_type == b.element_type == out.element_type:
            raise VerifyException("graph.grouped_matmul operands and result must share one dtype")
        offsets = self.offsets.type
        if not isinstance(offsets, TensorType) or offsets.element_type not in (i32, i64):
            raise VerifyException(f"graph.grouped_matmul offsets must be i32 or i64, not {offsets}")
        a_shape, b_shape = a.get_shape(), b.get_shape()
        if len(a_shape) != 2 or len(b_shape) != 3:
            raise VerifyException("graph.grouped_matmul needs lhs [rows, k] and rhs [groups, k, n]")
        if offsets.get_shape() != (b_shape[0],):
            raise VerifyException(
                f"graph.grouped_matmul offsets {list(offsets.get_shape())} must be one per group"
                f" of {b_shape[0]}"
            )
        k, n = (b_shape[2], b_shape[1]) if self.transpose_b else (b_shape[1], b_shape[2])
        if a_shape[1] != k:
            raise VerifyException(
                f"graph.grouped_matmul contracts {a_shape[1]} columns of lhs with {k} of rhs"
            )
        if out.get_shape() != (a_shape[0], n):
            raise VerifyException(
                f"graph.grouped_matmul result shape {list(out.get_shape())} should be"
                f" {[a_shape[0], n]}"
            )


@irdl_op_definition
class FusedOp(IRDLOperation):
    """Ops that become one kernel: a matmul or a row op (softmax, a norm) with the
    elementwise chains fused before and after it, or an elementwise chain alone. The body
    reads only its arguments (the kernel's inputs, in order of first use); it yields the
    kernel's result, then a value of the prologue that is also used elsewhere (the kernel
    writes it out too).

    %y, %x = graph.fused(%a, %b, %w, %bias) {
    ^bb0(%a1: tensor<4x64xf32>, %b1: tensor<4x64xf32>, %w1: tensor<64xf32>, %bias1: tensor<64xf32>):
      %x1 = graph.add %a1, %b1 : tensor<4x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
      %y1 = graph.layer_norm %x1, %w1, %bias1 {eps = 1.0e-05 : f64} : ...
      graph.yield %y1, %x1 : tensor<4x64xf32>, tensor<4x64xf32>
    } : (...) -> (tensor<4x64xf32>, tensor<4x64xf32>)
    """

    name = "graph.fused"
    inputs = var_operand_def(TensorType)
    body = region_def("single_block")
    outputs = var_result_def(TensorType)
    traits = traits_def(IsolatedFromAbove())
    assembly_format = "`(` $inputs `)` $body attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(self, inputs: Sequence[SSAValue], body: Region, result_types: Sequence[Attribute]):
        super().__init__(operands=[inputs], regions=[body], result_types=[result_types])

    @property
    def block(self) -> Block:
        return self.body.block

    def verify_(self) -> None:
        arg_types = [a.type for a in self.block.args]
        if arg_types != [v.type for v in self.inputs]:
            raise VerifyException("graph.fused block arguments must have its inputs' types")
        last = self.block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("graph.fused body must end with graph.yield")
        if [v.type for v in last.values] != [r.type for r in self.outputs]:
            raise VerifyException("graph.fused results must have the types its body yields")


@irdl_op_definition
class YieldOp(IRDLOperation):
    """The values a `graph.fused` stands for.

    graph.yield %y, %x : tensor<4x64xf32>, tensor<4x64xf32>
    """

    name = "graph.yield"
    values = var_operand_def(TensorType)
    traits = traits_def(IsTerminator(), HasParent(FusedOp))
    assembly_format = "$values attr-dict `:` type($values)"

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[values])


#: the graph op of each pointwise op, by its name in the table
ELEMENTWISE: dict[str, type[ElementwiseOp]] = {
    entry.name: GeluOp if entry.name == "gelu" else _elementwise_op(entry) for entry in TABLE
}
AddOp, SubOp, MulOp, DivOp = (ELEMENTWISE[name] for name in ("add", "sub", "mul", "div"))
ExpOp, TanhOp, SigmoidOp = (ELEMENTWISE[name] for name in ("exp", "tanh", "sigmoid"))
SiluOp, ReluOp, NegOp = (ELEMENTWISE[name] for name in ("silu", "relu", "neg"))
ConvertOp = ELEMENTWISE["convert"]


def elementwise(name: str, operands: Sequence[SSAValue], result_type: Attribute) -> ElementwiseOp:
    """The graph op of the pointwise op `name` on `operands`."""
    op_class = ELEMENTWISE[name]
    if issubclass(op_class, NaryOp):
        return op_class(operands, result_type)
    if issubclass(op_class, BinaryOp):
        lhs, rhs = operands
        return op_class(lhs, rhs, result_type)
    assert issubclass(op_class, UnaryOp), f"{op_class.__name__} is not an op of the table"
    (operand,) = operands
    return op_class(operand, result_type)


@irdl_attr_definition
class CoverageAttr(RecordAttr):
    """Where the frontend put a graph's ops: how many it took, how many run as emmy's
    kernels and how many it computed at compile time, their FLOPs, and the ops counted one
    FLOP per output element (no formula), by op name. The frontend records it on the
    function; a compile's report reads it.

        func.func @main(...) attributes {coverage = #graph.coverage<ops = 3 : i64,
            native_ops = 3 : i64, folded_ops = 0 : i64, flops = 96 : i64,
            native_flops = 96 : i64, per_element_ops = {"aten.gelu.default" = 1 : i64}>}
    """

    name = "graph.coverage"
    ops: IntegerAttr
    native_ops: IntegerAttr
    folded_ops: IntegerAttr
    flops: IntegerAttr
    native_flops: IntegerAttr
    per_element_ops: DictionaryAttr

    def __init__(
        self,
        ops: int,
        native_ops: int,
        folded_ops: int,
        flops: int,
        native_flops: int,
        per_element_ops: Mapping[str, int],
    ):
        counts = (ops, native_ops, folded_ops, flops, native_flops)
        per_element = {op: IntegerAttr(n, i64) for op, n in sorted(per_element_ops.items())}
        super().__init__(*(IntegerAttr(n, i64) for n in counts), DictionaryAttr(per_element))

    def counts(self) -> dict[str, int | dict[str, int]]:
        names = ("ops", "native_ops", "folded_ops", "flops", "native_flops")
        counts: dict[str, int | dict[str, int]] = {n: _count(getattr(self, n)) for n in names}
        counts["per_element_ops"] = {op: _count(n) for op, n in self.per_element_ops.data.items()}
        return counts

    def verify(self) -> None:
        if not all(isinstance(n, IntegerAttr) for n in self.per_element_ops.data.values()):
            raise VerifyException("#graph.coverage: per_element_ops counts ops by name")


def _count(attr: Attribute) -> int:
    assert isinstance(attr, IntegerAttr), "verified: a count is an integer"
    return attr.value.data


Graph = Dialect(
    "graph",
    [
        *ELEMENTWISE.values(),
        ConstantOp,
        SoftmaxOp,
        SoftmaxBackwardOp,
        MatmulOp,
        ConvOp,
        ConvTransposeOp,
        ConvWeightGradientOp,
        LayerNormOp,
        RmsNormOp,
        LayerNormBackwardOp,
        RmsNormBackwardOp,
        BatchNormStatsOp,
        ReduceOp,
        CumsumOp,
        EmbeddingOp,
        EmbeddingBackwardOp,
        AttentionOp,
        AttentionGradientsOp,
        AttentionBackwardOp,
        RopeOp,
        CachedAttentionOp,
        ReshapeOp,
        MaskBiasOp,
        AsStridedOp,
        GatherOp,
        TriangleOp,
        PoolOp,
        PoolBackwardOp,
        ResizeOp,
        ResizeBackwardOp,
        CatOp,
        IndexCopyOp,
        GroupedMatmulOp,
        FusedOp,
        YieldOp,
    ],
    [
        GeluApproximationAttr,
        AttentionGradientAttr,
        CoverageAttr,
        ReductionAttr,
        TriangleAttr,
        PoolingAttr,
        ResizeAttr,
    ],
)
