"""emmy.kernel: SIMT-level kernel ops and the host-side launches.

A kernel is a `kernel.func` whose parameters are device pointers. Its body computes with
builtin integer/float types using arith and math, reads the CUDA thread coordinates,
loads and stores through pointers (converting storage types to f32 and back), loops with
`kernel.for` (a strided loop whose element index may be vectorised by `width`), and
reduces across groups of threads with `kernel.group_reduce`. `kernel.launch` gives the
launch geometry of a kernel as SSA values of its site; `kernel.call` binds a site's
kernel to tensors on the host.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    Float32Type,
    FunctionType,
    IntegerAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    i1,
    i32,
    i64,
)
from xdsl.dialects.utils import EnumAttribute, parse_assignment, print_assignment
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AttrSetConstraint,
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import (
    HasParent,
    IsTerminator,
    NoTerminator,
    Pure,
    RecursiveMemoryEffect,
    SymbolOpInterface,
    SymbolUserOpInterface,
)
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum  # what EnumAttribute takes

from emmy.base import dtypes
from emmy.base.pointwise_ops import DEVICE_FUNCTIONS
from emmy.dialects import fork


class Dimension(StrEnum):
    """A dimension of CUDA's thread and block coordinates."""

    X = "x"
    Y = "y"
    Z = "z"


@irdl_attr_definition
class DimensionAttr(EnumAttribute[Dimension], SpacedOpaqueSyntaxAttribute):
    """`#kernel<dimension x>`; a coordinate op spells it bare: `kernel.thread_id x`."""

    name = "kernel.dimension"


#: emmy's storage types (emmy.base.dtypes: f32, f16, bf16, i8, i32, i64, c64, c128) by name; the
#: cast says what the functional call makes, a StrEnum class, which the checker cannot infer
StorageType = cast(
    type[StrEnum], StrEnum("StorageType", {name.upper(): name for name in dtypes.DTYPES})
)


@irdl_attr_definition
class StorageTypeAttr(EnumAttribute[StorageType], SpacedOpaqueSyntaxAttribute):
    """`#kernel<dtype bf16>`"""

    name = "kernel.dtype"


#: the integers a kernel indexes global tensors and loops with: i32, or i64 at a site whose
#: tensors have 2^31 elements or more (its key's `index=i64`)
INDEX_TYPES = (i32, i64)
IndexInt = AttrSetConstraint.get(*INDEX_TYPES)


def _print_index(printer: Printer, index: SSAValue) -> None:
    """`%i`, or `%i : i64` for a 64-bit index (the i32 form keeps its old text)."""
    printer.print_ssa_value(index)
    if index.type != i32:
        printer.print_string(" : ")
        printer.print_attribute(index.type)


def _parse_index(parser: Parser) -> SSAValue:
    index = parser.parse_unresolved_operand()
    typ = parser.parse_type() if parser.parse_optional_punctuation(":") else i32
    return parser.resolve_operand(index, typ)


def _print_element(
    printer: Printer, ptr: SSAValue, index: SSAValue, attributes: dict[str, Attribute]
) -> None:
    """`%x[%i] {attributes} : ` of a load or store, up to its types."""
    printer.print_ssa_value(ptr)
    printer.print_string("[")
    _print_index(printer, index)
    printer.print_string("]")
    printer.print_op_attributes(attributes)
    printer.print_string(" : ")


def _parse_element(parser: Parser) -> tuple[UnresolvedOperand, SSAValue, dict[str, Attribute]]:
    """The pointer (unresolved until its type is read), index and attributes of `%x[%i]
    {attributes} :`."""
    ptr = parser.parse_unresolved_operand()
    parser.parse_punctuation("[")
    index = _parse_index(parser)
    parser.parse_punctuation("]")
    attributes = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    return ptr, index, attributes


@irdl_attr_definition
class PtrType(ParametrizedAttribute, TypeAttribute):
    """A device pointer to elements of a storage type, e.g. `!kernel.ptr<bf16>`."""

    name = "kernel.ptr"
    element: Attribute

    def __init__(self, element: Attribute):
        super().__init__(element)

    def verify(self) -> None:
        if not dtypes.is_storage_type(self.element):
            raise VerifyException(f"kernel.ptr cannot point to {self.element}")


def pointee(value: SSAValue) -> Attribute:
    """The storage type a pointer's elements have: a kernel's parameter, an array, a load's
    or a store's operand."""
    assert isinstance(value.type, PtrType), f"{value.type} is not a pointer"
    return value.type.element


def loaded_type(element: Attribute) -> Attribute:
    """Floats of any storage type are loaded as f32; integers as themselves."""
    if dtypes.is_float_type(element):
        return Float32Type()
    return element


@irdl_op_definition
class FuncOp(IRDLOperation):
    """A kernel function: device pointer parameters, no results.

        kernel.func @scale(%x : !kernel.ptr<f32> "x", %y : !kernel.ptr<f32> "y") {
          kernel.return
        }

    A parameter marked `aliased` (`%y : !kernel.ptr<f32> "y" aliased`) may share bytes with
    another parameter of the same launch, one of the two written: the host plan, which
    binds buffers to every launch, says so. Not isolated from above: the body may use the
    fork values of its site.
    """

    name = "kernel.func"

    sym_name = prop_def(StringAttr)
    arg_names = prop_def(ArrayAttr[StringAttr])
    #: the names of the `aliased` parameters; absent, no parameter aliases another
    aliased = opt_prop_def(ArrayAttr[StringAttr])
    body = region_def("single_block")

    traits = traits_def(SymbolOpInterface(), RecursiveMemoryEffect())

    def __init__(self, name: str, arg_names: Sequence[str], arg_types: Sequence[Attribute]):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "arg_names": ArrayAttr([StringAttr(n) for n in arg_names]),
            },
            regions=[Region(Block(arg_types=arg_types))],
        )

    @property
    def function_type(self) -> FunctionType:
        return FunctionType.from_lists([a.type for a in self.body.block.args], [])

    def aliased_names(self) -> set[str]:
        return {n.data for n in self.aliased.data} if self.aliased is not None else set()

    def set_aliased(self, names: Iterable[str]) -> None:
        """Marks the parameters `names` aliased (in parameter order), and no others."""
        marked = set(names)
        ordered = [n for n in self.arg_names.data if n.data in marked]
        self.aliased = ArrayAttr(ordered) if ordered else None

    def written_args(self) -> set[int]:
        """The positions of the parameters the kernel stores through."""
        stored = {op.ptr for op in self.walk() if isinstance(op, StoreOp)}
        return {i for i, arg in enumerate(self.body.block.args) if arg in stored}

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string("(")
        aliased = self.aliased_names()
        args = zip(self.body.block.args, self.arg_names.data, strict=True)
        for i, (arg, arg_name) in enumerate(args):
            if i:
                printer.print_string(", ")
            printer.print_ssa_value(arg)
            printer.print_string(" : ")
            printer.print_attribute(arg.type)
            printer.print_string(f' "{arg_name.data}"')
            if arg_name.data in aliased:
                printer.print_string(" aliased")
        printer.print_string(") ")
        printer.print_region(self.body, print_entry_block_args=False)

    @classmethod
    def parse(cls, parser: Parser) -> FuncOp:
        name = parser.parse_symbol_name().data

        def parse_param() -> tuple[Parser.Argument, str, bool]:
            arg = parser.parse_argument(expect_type=True)
            arg_name = parser.parse_str_literal()
            return arg, arg_name, parser.parse_optional_keyword("aliased") is not None

        params = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parse_param)
        body = parser.parse_region([arg for arg, _, _ in params])
        op = cls(name, [n for _, n, _ in params], [])
        op.set_aliased(n for _, n, aliased in params if aliased)
        op.body.detach_block(0)
        op.body.add_block(body.detach_block(0))
        return op

    def verify_(self) -> None:
        if len(self.arg_names) != len(self.body.block.args):
            raise VerifyException("kernel.func needs one name per parameter")
        unknown = self.aliased_names() - {n.data for n in self.arg_names}
        if unknown:
            raise VerifyException(
                f"kernel.func marks {sorted(unknown)[0]!r} aliased, not a parameter"
            )
        for arg in self.body.block.args:
            if not isinstance(arg.type, PtrType):
                raise VerifyException(f"kernel.func parameters must be kernel.ptr, got {arg.type}")
        if not isinstance(self.body.block.last_op, ReturnOp):
            raise VerifyException("kernel.func body must end with kernel.return")


@irdl_op_definition
class ReturnOp(IRDLOperation):
    """Ends a kernel function: `kernel.return`."""

    name = "kernel.return"
    traits = traits_def(IsTerminator(), HasParent(FuncOp))
    assembly_format = "attr-dict"


class _CoordinateOp(IRDLOperation):
    """A CUDA thread coordinate along one dimension, as i32."""

    dim = prop_def(DimensionAttr)
    result = result_def(i32)
    traits = traits_def(Pure())
    assembly_format = "$dim attr-dict"

    def __init__(self, dim: Dimension | str = Dimension.X):
        super().__init__(properties={"dim": DimensionAttr(Dimension(dim))}, result_types=[i32])


@irdl_op_definition
class ThreadIdOp(_CoordinateOp):
    """`%t = kernel.thread_id x`: threadIdx.x."""

    name = "kernel.thread_id"


@irdl_op_definition
class BlockIdOp(_CoordinateOp):
    """`%b = kernel.block_id x`: blockIdx.x."""

    name = "kernel.block_id"


@irdl_op_definition
class BlockDimOp(_CoordinateOp):
    """`%n = kernel.block_dim x`: blockDim.x."""

    name = "kernel.block_dim"


@irdl_op_definition
class GridDimOp(_CoordinateOp):
    """`%n = kernel.grid_dim x`: gridDim.x."""

    name = "kernel.grid_dim"


@irdl_op_definition
class LoadOp(IRDLOperation):
    """Loads one element, converting float storage to f32.

    %v = kernel.load %x[%i] : !kernel.ptr<bf16> -> f32
    %w = kernel.load %x[%j : i64] : !kernel.ptr<bf16> -> f32    (a 64-bit kernel's index)
    """

    name = "kernel.load"
    ptr = operand_def(PtrType)
    index = operand_def(IndexInt)
    result = result_def()

    def __init__(self, ptr: SSAValue, index: SSAValue):
        assert isinstance(ptr.type, PtrType)
        super().__init__(operands=[ptr, index], result_types=[loaded_type(ptr.type.element)])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        _print_element(printer, self.ptr, self.index, self.attributes)
        printer.print_attribute(self.ptr.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> LoadOp:
        ptr, index, attributes = _parse_element(parser)
        ptr_type = parser.parse_type()
        parser.parse_punctuation("->")
        result_type = parser.parse_type()  # as written: verify_ says if it is not the ptr's
        return cls.create(
            operands=[parser.resolve_operand(ptr, ptr_type), index],
            result_types=[result_type],
            attributes=attributes,
        )

    def verify_(self) -> None:
        assert isinstance(self.ptr.type, PtrType)
        expected = loaded_type(self.ptr.type.element)
        if self.result.type != expected:
            raise VerifyException(
                f"kernel.load from {self.ptr.type} gives {expected}, not {self.result.type}"
            )


@irdl_op_definition
class StoreOp(IRDLOperation):
    """Stores one element, converting from f32 to the pointer's storage type.

    kernel.store %v, %y[%i] : f32, !kernel.ptr<bf16>
    kernel.store %v, %y[%j : i64] : f32, !kernel.ptr<bf16>    (a 64-bit kernel's index)
    """

    name = "kernel.store"
    value = operand_def()
    ptr = operand_def(PtrType)
    index = operand_def(IndexInt)

    def __init__(self, value: SSAValue, ptr: SSAValue, index: SSAValue):
        super().__init__(operands=[value, ptr, index])

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_ssa_value(self.value)
        printer.print_string(", ")
        _print_element(printer, self.ptr, self.index, self.attributes)
        printer.print_attribute(self.value.type)
        printer.print_string(", ")
        printer.print_attribute(self.ptr.type)

    @classmethod
    def parse(cls, parser: Parser) -> StoreOp:
        value = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        ptr, index, attributes = _parse_element(parser)
        value_type = parser.parse_type()
        parser.parse_punctuation(",")
        ptr_type = parser.parse_type()
        operands = [
            parser.resolve_operand(value, value_type),
            parser.resolve_operand(ptr, ptr_type),
        ]
        return cls.create(operands=[*operands, index], attributes=attributes)

    def verify_(self) -> None:
        assert isinstance(self.ptr.type, PtrType)
        expected = loaded_type(self.ptr.type.element)
        if self.value.type != expected:
            raise VerifyException(
                f"kernel.store to {self.ptr.type} takes {expected}, not {self.value.type}"
            )


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Carries loop values to the next iteration of a kernel.for."""

    name = "kernel.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator())
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[values])


@irdl_op_definition
class ForOp(IRDLOperation):
    """A strided loop over element indices, vectorisable by `width` consecutive elements.

        %s = kernel.for %j = %lo to %hi step %st width %w iter_args(%acc = %zero) -> (f32) {
          ...
          kernel.yield %next : f32
        }

    Semantics: for j0 in range(lo, hi, step): for k in range(width): body(j = j0 + k).
    The range must be a multiple of `width` (the kernel's constraints guarantee it), so
    loads and stores at `base + j` can be emitted as one vector access per `j0`. The
    width is usually a fork: it must be a constant of 1, 2, 4, 8 or 16 once forks are
    specialised. The index, bounds and step are one type: i32, or i64 in a 64-bit kernel.
    """

    name = "kernel.for"
    lower = operand_def(IndexInt)
    upper = operand_def(IndexInt)
    step = operand_def(IndexInt)
    width = operand_def(i32)
    iter_args = var_operand_def()
    res = var_result_def()
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        lower: SSAValue,
        upper: SSAValue,
        step: SSAValue,
        width: SSAValue,
        iter_args: Sequence[SSAValue],
        body: Region,
    ):
        super().__init__(
            operands=[lower, upper, step, width, iter_args],
            result_types=[[a.type for a in iter_args]],
            regions=[body],
        )

    def print(self, printer: Printer) -> None:
        index, *carried = self.body.block.args
        printer.print_string(" ")
        printer.print_ssa_value(index)
        printer.print_string(" = ")
        printer.print_ssa_value(self.lower)
        printer.print_string(" to ")
        printer.print_ssa_value(self.upper)
        printer.print_string(" step ")
        printer.print_ssa_value(self.step)
        printer.print_string(" width ")
        printer.print_ssa_value(self.width)
        if carried:
            printer.print_string(" iter_args(")
            printer.print_list(
                zip(carried, self.iter_args, strict=True),
                lambda pair: print_assignment(printer, *pair),
            )
            printer.print_string(") -> (")
            printer.print_list([a.type for a in carried], printer.print_attribute)
            printer.print_string(")")
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)

    @classmethod
    def parse(cls, parser: Parser) -> ForOp:
        index = parser.parse_argument(expect_type=False)
        parser.parse_punctuation("=")
        lower = parser.parse_operand()
        parser.parse_keyword("to")
        upper = parser.parse_operand()
        parser.parse_keyword("step")
        step = parser.parse_operand()
        parser.parse_keyword("width")
        width = parser.parse_operand()
        carried: list[Parser.UnresolvedArgument] = []
        inits = []
        types: list[Attribute] = []
        if parser.parse_optional_keyword("iter_args"):
            pairs = parser.parse_comma_separated_list(
                Parser.Delimiter.PAREN, lambda: parse_assignment(parser)
            )
            parser.parse_punctuation("->")
            types = parser.parse_comma_separated_list(Parser.Delimiter.PAREN, parser.parse_type)
            carried = [arg for arg, _ in pairs]
            inits = [parser.resolve_operand(o, t) for (_, o), t in zip(pairs, types, strict=True)]
        args = [
            index.resolve(lower.type),
            *(a.resolve(t) for a, t in zip(carried, types, strict=True)),
        ]
        body = parser.parse_region(args)
        return cls(lower, upper, step, width, inits, body)

    def verify_(self) -> None:
        index, *carried = self.body.block.args
        if not index.type == self.lower.type == self.upper.type == self.step.type:
            raise VerifyException("kernel.for index, bounds and step must be one integer type")
        if [a.type for a in carried] != [a.type for a in self.iter_args]:
            raise VerifyException("kernel.for iter_args and block arguments differ in type")
        last = self.body.block.last_op
        if not isinstance(last, YieldOp):
            raise VerifyException("kernel.for body must end with kernel.yield")
        if [v.type for v in last.values] != [a.type for a in self.iter_args]:
            raise VerifyException("kernel.yield must carry the loop's iter_args types")


@irdl_op_definition
class IfOp(IRDLOperation):
    """Runs its region where the condition holds; no values flow out, and no barrier may be
    inside (threads that skip it would never reach it).

        kernel.if %in_bounds {
          kernel.store %v, %y[%i] : f32, !kernel.ptr<f32>
        }
    """

    name = "kernel.if"
    condition = operand_def(i1)
    body = region_def("single_block")
    traits = traits_def(NoTerminator(), RecursiveMemoryEffect())
    assembly_format = "$condition $body attr-dict"

    def __init__(self, condition: SSAValue, body: Region):
        super().__init__(operands=[condition], regions=[body])

    def verify_(self) -> None:
        if any(isinstance(op, BarrierOp) for op in self.body.walk()):
            raise VerifyException(
                "kernel.barrier inside kernel.if: threads that skip it would deadlock"
            )


@irdl_op_definition
class SharedArrayOp(IRDLOperation):
    """A block's array in dynamic shared memory, `offset` bytes in, `count` elements long.

    %tile = kernel.shared_array %offset, %count : !kernel.ptr<f32>
    """

    name = "kernel.shared_array"
    offset = operand_def(i32)
    count = operand_def(i32)
    result = result_def(PtrType)
    assembly_format = "$offset `,` $count attr-dict `:` type($result)"

    def __init__(self, offset: SSAValue, count: SSAValue, element: Attribute):
        super().__init__(operands=[offset, count], result_types=[PtrType(element)])


@irdl_op_definition
class LocalArrayOp(IRDLOperation):
    """A thread's own array of `count` elements (registers, once loops over it unroll).

    %acc = kernel.local_array %count : !kernel.ptr<f32>
    """

    name = "kernel.local_array"
    count = operand_def(i32)
    result = result_def(PtrType)
    assembly_format = "$count attr-dict `:` type($result)"

    def __init__(self, count: SSAValue, element: Attribute):
        super().__init__(operands=[count], result_types=[PtrType(element)])


@irdl_op_definition
class LdmatrixOp(IRDLOperation):
    """Warp-collective: loads `count` 8x8 matrices of 16-bit values from shared memory into
    a thread's fragment registers (ldmatrix.sync.aligned.m8n8.x{count}[.trans]); each lane
    gives the address of one row, `ptr[offset]`.

        kernel.ldmatrix %frag[%i], %a_tile[%offset] {count = 4 : i32, trans = false}
    """

    name = "kernel.ldmatrix"
    fragment = operand_def(PtrType)
    fragment_offset = operand_def(i32)
    ptr = operand_def(PtrType)
    offset = operand_def(i32)
    count = prop_def(IntegerAttr)
    trans = prop_def(BoolAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$fragment `[` $fragment_offset `]` `,` $ptr `[` $offset `]` attr-dict `:` "
        "type($fragment) `,` type($ptr)"
    )

    def __init__(
        self,
        fragment: SSAValue,
        fragment_offset: SSAValue,
        ptr: SSAValue,
        offset: SSAValue,
        count: int,
        trans: bool,
    ):
        super().__init__(
            operands=[fragment, fragment_offset, ptr, offset],
            properties={"count": IntegerAttr(count, 32), "trans": BoolAttr.from_bool(trans)},
        )

    def verify_(self) -> None:
        if self.count.value.data not in (1, 2, 4):
            raise VerifyException("kernel.ldmatrix loads 1, 2 or 4 matrices")


@irdl_op_definition
class MmaOp(IRDLOperation):
    """Warp-collective m16n8k16 tensor-core product: acc[offset:offset+4] += A·B, with A and
    B fragments of 16-bit `dtype` and f32 accumulators (mma.sync.aligned.m16n8k16.row.col).

        kernel.mma %acc[%c], %a_frag[%a], %b_frag[%b] {dtype = #kernel<dtype bf16>}
    """

    name = "kernel.mma"
    acc = operand_def(PtrType)
    offset = operand_def(i32)
    a = operand_def(PtrType)
    a_offset = operand_def(i32)
    b = operand_def(PtrType)
    b_offset = operand_def(i32)
    dtype = prop_def(StorageTypeAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = (
        "$acc `[` $offset `]` `,` $a `[` $a_offset `]` `,` $b `[` $b_offset `]` attr-dict `:` "
        "type($acc) `,` type($a) `,` type($b)"
    )

    def __init__(self, acc, offset, a, a_offset, b, b_offset, dtype: str):
        super().__init__(
            operands=[acc, offset, a, a_offset, b, b_offset],
            properties={"dtype": StorageTypeAttr(StorageType(dtype))},
        )

    def verify_(self) -> None:
        if not dtypes.is_half(self.dtype.data):
            raise VerifyException(f"kernel.mma multiplies f16 or bf16, not {self.dtype.data}")


@irdl_op_definition
class PackHalf2Op(IRDLOperation):
    """Rounds two f32 values to 16-bit `dtype` and packs them into one 32-bit fragment
    register, `lo` in the low half: how an mma's f32 result becomes another mma's A fragment
    without a trip through shared memory.

        kernel.pack_half2 %p_frag[%i], %lo, %hi {dtype = #kernel<dtype bf16>} : !kernel.ptr<u32>
    """

    name = "kernel.pack_half2"
    fragment = operand_def(PtrType)
    offset = operand_def(i32)
    lo = operand_def(Float32Type)
    hi = operand_def(Float32Type)
    dtype = prop_def(StorageTypeAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$fragment `[` $offset `]` `,` $lo `,` $hi attr-dict `:` type($fragment)"

    def __init__(self, fragment, offset, lo, hi, dtype: str):
        super().__init__(
            operands=[fragment, offset, lo, hi],
            properties={"dtype": StorageTypeAttr(StorageType(dtype))},
        )

    def verify_(self) -> None:
        if not dtypes.is_half(self.dtype.data):
            raise VerifyException(f"kernel.pack_half2 packs f16 or bf16, not {self.dtype.data}")


@irdl_op_definition
class CopyAsyncOp(IRDLOperation):
    """Starts an asynchronous 16-byte copy from global `src[src_offset]` to shared
    `dst[dst_offset]`; only `valid_bytes` are read, the rest is zero (cp.async.cg).

        kernel.cp_async %tile[%d], %a[%s], %valid : !kernel.ptr<bf16>, !kernel.ptr<bf16>
    """

    name = "kernel.cp_async"
    dst = operand_def(PtrType)
    dst_offset = operand_def(i32)
    src = operand_def(PtrType)
    src_offset = operand_def(i32)
    valid_bytes = operand_def(i32)
    assembly_format = (
        "$dst `[` $dst_offset `]` `,` $src `[` $src_offset `]` `,` $valid_bytes attr-dict "
        "`:` type($dst) `,` type($src)"
    )

    def __init__(self, dst, dst_offset, src, src_offset, valid_bytes):
        super().__init__(operands=[dst, dst_offset, src, src_offset, valid_bytes])


@irdl_op_definition
class CopyAsyncWaitOp(IRDLOperation):
    """Commits this thread's pending cp_asyncs as a group, then waits until at most
    `pending` groups are still in flight (cp.async.commit_group; cp.async.wait_group).
    `pending` is an integer once forks are fixed (a pipeline's depth less two).

        kernel.cp_async_wait %pending
    """

    name = "kernel.cp_async_wait"
    pending = operand_def(i32)
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: SSAValue):
        super().__init__(operands=[pending])


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """`kernel.barrier`: every thread of the block waits here (__syncthreads)."""

    name = "kernel.barrier"
    assembly_format = "attr-dict"


@irdl_op_definition
class DeviceCallOp(IRDLOperation):
    """A scalar function of emmy's device header, `emmy::<callee>(args...)`: the device
    expression of a pointwise op (emmy.base.pointwise_ops) on f32, integers or i1.

    %y = kernel.device_call "pw_softplus"(%x, %beta, %t) : (f32, f32, f32) -> f32
    """

    name = "kernel.device_call"
    callee = prop_def(StringAttr)
    args = var_operand_def()
    result = result_def()
    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$callee `(` $args `)` attr-dict `:` functional-type($args, $result)"

    def __init__(self, callee: str, args: Sequence[SSAValue], result_type: Attribute):
        super().__init__(
            operands=[args], result_types=[result_type], properties={"callee": StringAttr(callee)}
        )

    def verify_(self) -> None:
        for typ in [*(a.type for a in self.args), self.result.type]:
            if not (isinstance(typ, Float32Type) or isinstance(typ, IntegerType)):
                raise VerifyException(f"kernel.device_call takes f32 and integers, not {typ}")
        if self.callee.data not in DEVICE_FUNCTIONS:
            raise VerifyException(
                f"kernel.device_call callee {self.callee.data!r} is not a device function of "
                "a pointwise op"
            )


class GroupReduction(StrEnum):
    """How kernel.group_reduce combines its group's values."""

    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"
    #: (max, sum) pairs of an online softmax: the sums rescaled to the group's max
    ONLINE_SOFTMAX = "online_softmax"


@irdl_attr_definition
class GroupReductionAttr(EnumAttribute[GroupReduction], SpacedOpaqueSyntaxAttribute):
    """`#kernel<reduction max>`; kernel.group_reduce spells it as a string: `"max"`."""

    name = "kernel.reduction"


class ReduceStrategy(StrEnum):
    """How kernel.group_reduce moves values between a group's threads (emmy::Reduce)."""

    #: warp shuffles, then shared memory between a group's warps
    SHUFFLE = "shuffle"
    #: shared memory alone
    SMEM = "smem"


@irdl_attr_definition
class ReduceStrategyAttr(EnumAttribute[ReduceStrategy], SpacedOpaqueSyntaxAttribute):
    """`#kernel<reduce_strategy smem>`; kernel.group_reduce lists them as strings:
    `["shuffle", "smem"]`."""

    name = "kernel.reduce_strategy"


#: the values per thread each kind of kernel.group_reduce combines, by the kind's name
REDUCE_KINDS: dict[str, int] = {
    GroupReduction.SUM: 1,
    GroupReduction.MAX: 1,
    GroupReduction.MIN: 1,
    GroupReduction.PROD: 1,
    GroupReduction.ONLINE_SOFTMAX: 2,
}


@irdl_op_definition
class GroupReduceOp(IRDLOperation):
    """Reduces values over aligned groups of `group` consecutive threads of a block.

        %m = kernel.group_reduce "max" (%v) group %g strategy %s ["shuffle", "smem"]

    Every thread of the block must reach it (it uses barriers and the block's shared memory
    as scratch); every thread gets its group's result. `strategy` (a symbolic fork's
    knob) selects one of `strategies` by index (`chosen_strategy` once it is a constant);
    kind `online_softmax` combines (max, sum) pairs.
    """

    name = "kernel.group_reduce"
    kind = prop_def(GroupReductionAttr)
    strategies = prop_def(ArrayAttr[ReduceStrategyAttr])
    values = var_operand_def()
    group = operand_def(i32)
    strategy = operand_def(i32)
    reduced = var_result_def()
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(
        self,
        kind: GroupReduction | str,
        values: Sequence[SSAValue],
        group: SSAValue,
        strategy: SSAValue,
        strategies: Sequence[ReduceStrategy | str],
    ):
        super().__init__(
            operands=[values, group, strategy],
            result_types=[[v.type for v in values]],
            properties={
                "kind": GroupReductionAttr(GroupReduction(kind)),
                "strategies": ArrayAttr(
                    [ReduceStrategyAttr(ReduceStrategy(s)) for s in strategies]
                ),
            },
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_string_literal(self.kind.data)
        printer.print_string(" (")
        printer.print_list(self.values, printer.print_ssa_value)
        printer.print_string(") group ")
        printer.print_ssa_value(self.group)
        printer.print_string(" strategy ")
        printer.print_ssa_value(self.strategy)
        printer.print_string(" [")
        printer.print_list(self.strategies, lambda s: printer.print_string_literal(s.data))
        printer.print_string("]")

    def chosen_strategy(self, index: int) -> ReduceStrategy:
        """The strategy the knob's value (`index`) selects."""
        return self.strategies.data[index].data

    @classmethod
    def parse(cls, parser: Parser) -> GroupReduceOp:
        kind = parser.parse_str_enum(GroupReduction)
        values = parser.parse_comma_separated_list(
            Parser.Delimiter.PAREN,
            lambda: parser.resolve_operand(parser.parse_unresolved_operand(), Float32Type()),
        )
        parser.parse_keyword("group")
        group = parser.parse_operand()
        parser.parse_keyword("strategy")
        strategy = parser.parse_operand()
        strategies = parser.parse_comma_separated_list(
            Parser.Delimiter.SQUARE, lambda: _parse_strategy(parser)
        )
        return cls(kind, values, group, strategy, strategies)

    def verify_(self) -> None:
        arity = REDUCE_KINDS[self.kind.data]
        if len(self.values) != arity:
            raise VerifyException(f"reduction {self.kind.data.value!r} takes {arity} value(s)")
        if any(v.type != Float32Type() for v in self.values):
            raise VerifyException("kernel.group_reduce reduces f32 values")


def _parse_strategy(parser: Parser) -> ReduceStrategy:
    start = parser.pos
    name = parser.parse_str_literal()
    known = [strategy.value for strategy in ReduceStrategy]
    if name not in known:
        message = f"unknown reduction strategy {name!r} (one of {', '.join(known)})"
        parser.raise_error(message, start, parser.pos)
    return ReduceStrategy(name)


class LaunchesItsSitesKernel(SymbolUserOpInterface):
    """`kernel.launch` names the kernel.func of the site it is in."""

    def verify(self, op: Operation) -> None:
        assert isinstance(op, LaunchOp)
        site = op.parent_op()
        if not isinstance(site, fork.SiteOp):
            return  # HasParent says so (traits are checked in no fixed order)
        name = op.kernel.string_value()
        funcs = [o for o in site.body.block.ops if isinstance(o, FuncOp)]
        if not any(f.sym_name.data == name for f in funcs):
            raise VerifyException(
                f"kernel.launch names @{name}, which is not a kernel.func of its site "
                f"@{site.sym_name.data}"
            )


@irdl_op_definition
class LaunchOp(IRDLOperation):
    """The launch geometry of a site's kernel, in 1-D.

    kernel.launch @softmax_0 grid %g block %b smem %s
    """

    name = "kernel.launch"
    kernel = prop_def(SymbolRefAttr)
    grid = operand_def(i32)
    block = operand_def(i32)
    smem = operand_def(i32)
    traits = traits_def(HasParent(fork.SiteOp), LaunchesItsSitesKernel())
    assembly_format = "$kernel `grid` $grid `block` $block `smem` $smem attr-dict"

    def __init__(self, kernel: str, grid: SSAValue, block: SSAValue, smem: SSAValue):
        super().__init__(operands=[grid, block, smem], properties={"kernel": SymbolRefAttr(kernel)})


class CallsARunnableSite(SymbolUserOpInterface):
    """`kernel.call` names a site the device runs: a kernel site or a host call."""

    def verify(self, op: Operation) -> None:
        assert isinstance(op, CallOp)
        site = fork.site_named(op, op.site)
        if site.site_kind == fork.SiteKind.CHOICE:
            raise VerifyException(
                f"kernel.call names @{site.sym_name.data}, a choice site, which has nothing "
                "to run (a fork.alternatives names it)"
            )


@irdl_op_definition
class CallOp(IRDLOperation):
    """Runs a site on host tensors: inputs bound to the kernel's leading parameters, one
    fresh output tensor per result bound to the trailing ones.

        %y = kernel.call @softmax_0(%x) : (tensor<4x1000xf32>) -> tensor<4x1000xf32>
    """

    name = "kernel.call"
    site = prop_def(SymbolRefAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    traits = traits_def(CallsARunnableSite())
    assembly_format = "$site `(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(self, site: str, inputs: Sequence[SSAValue], output_types: Sequence[Attribute]):
        super().__init__(
            operands=[inputs],
            result_types=[output_types],
            properties={"site": SymbolRefAttr(site)},
        )


Kernel = Dialect(
    "kernel",
    [
        FuncOp,
        ReturnOp,
        ThreadIdOp,
        BlockIdOp,
        BlockDimOp,
        GridDimOp,
        LoadOp,
        StoreOp,
        ForOp,
        YieldOp,
        BarrierOp,
        IfOp,
        SharedArrayOp,
        LocalArrayOp,
        LdmatrixOp,
        MmaOp,
        PackHalf2Op,
        CopyAsyncOp,
        CopyAsyncWaitOp,
        GroupReduceOp,
        DeviceCallOp,
        LaunchOp,
        CallOp,
    ],
    [PtrType, DimensionAttr, StorageTypeAttr, GroupReductionAttr, ReduceStrategyAttr],
)
