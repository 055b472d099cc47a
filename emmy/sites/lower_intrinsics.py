"""Lowers the kernel language's intrinsic statements, the tensor-core and asynchronous-copy
operations of f16/bf16 kernels (`matmul_tc`, `attention_tc`):

    ldmatrix(frag, frag_offset, tile, offset, count) and ldmatrix_trans(...);
    mma(acc, offset, a_frag, a_offset, b_frag, b_offset): acc[offset:+4] += A·B;
    pack_half2(frag, offset, lo, hi): frag[offset] = lo and hi as two T (f16/bf16);
    cp_async(tile, offset, tensor, index..., valid_elements): 16 bytes, zero-filled;
    cp_async_wait(pending): commit this thread's copies, wait for all but `pending`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from xdsl.dialects import arith
from xdsl.dialects.builtin import i32
from xdsl.ir import Attribute, Operation, SSAValue

from emmy.base import dtypes
from emmy.base.errors import DslError, NarrowIndexError
from emmy.base.problem_key import KeyValue
from emmy.dialects import kernel
from emmy.dsl import ast
from emmy.dsl.ast import KernelDecl

Args = tuple[ast.Expr, ...]


class _Lowering(Protocol):
    """What an intrinsic needs of the kernel's lowering (emmy.sites.lower.Lowering)."""

    @property
    def decl(self) -> KernelDecl: ...

    @property
    def key(self) -> Mapping[str, KeyValue]: ...

    @property
    def index(self) -> Attribute:
        """The integer type the kernel indexes with."""
        ...

    @property
    def params(self) -> Mapping[str, tuple[str, ...]]:
        """The dims of each tensor parameter and array, by name."""
        ...

    def emit(self, op: Operation) -> None: ...

    def add(self, op: Operation) -> SSAValue: ...

    def const_int(self, value: int) -> SSAValue: ...

    def bound(self, name: str) -> SSAValue: ...

    def int_expr(self, node: ast.Expr) -> SSAValue: ...

    def narrow_expr(self, node: ast.Expr) -> SSAValue: ...

    def float_expr(self, node: ast.Expr) -> SSAValue: ...

    def linear_offset(
        self, node: ast.Node, dims: tuple[str, ...], indices: Args, trailing: str | None = None
    ) -> SSAValue: ...

    def error(self, node: ast.Node, message: str) -> DslError: ...


def lower_intrinsic(lowering: _Lowering, stmt: ast.CallStmt) -> None:
    """Appends the op of an intrinsic statement; a DslError where it is none."""
    name = stmt.function.id
    lower = INTRINSICS.get(name)
    if lower is None:
        raise lowering.error(stmt.function, f"{name}(...) is not a statement")
    lower(lowering, stmt, name, stmt.args)


def _array(lowering: _Lowering, node: ast.Expr) -> SSAValue:
    if not isinstance(node, ast.Name) or node.id not in lowering.params:
        raise lowering.error(node, "expected the name of an array")
    return lowering.bound(node.id)


def _literal(lowering: _Lowering, node: ast.Expr, what: str) -> int:
    if not isinstance(node, ast.IntLit):
        raise lowering.error(node, f"{what} must be an integer literal")
    return node.value


def _half_dtype(lowering: _Lowering, node: ast.Node, what: str) -> str:
    """The key's T, which a tensor-core statement needs to be f16 or bf16."""
    dtype = str(lowering.key.get("T"))
    if not dtypes.is_half(dtype):
        raise lowering.error(node, f"{what} f16 or bf16, and T is {dtype}")
    return dtype


def _ldmatrix(lowering: _Lowering, node: ast.CallStmt, name: str, args: Args) -> None:
    if len(args) != 5:
        raise lowering.error(node, f"{name}(frag, frag_offset, tile, offset, count)")
    count = _literal(lowering, args[4], "the number of matrices")
    lowering.emit(
        kernel.LdmatrixOp(
            _array(lowering, args[0]),
            lowering.narrow_expr(args[1]),
            _array(lowering, args[2]),
            lowering.narrow_expr(args[3]),
            count,
            name.endswith("_trans"),
        )
    )


def _mma(lowering: _Lowering, node: ast.CallStmt, name: str, args: Args) -> None:
    if len(args) != 6:
        raise lowering.error(node, "mma(acc, offset, a_frag, a_offset, b_frag, b_offset)")
    dtype = _half_dtype(lowering, node, "mma multiplies")
    acc, a, b = (_array(lowering, args[i]) for i in (0, 2, 4))
    offsets = [lowering.narrow_expr(args[i]) for i in (1, 3, 5)]
    lowering.emit(kernel.MmaOp(acc, offsets[0], a, offsets[1], b, offsets[2], dtype))


def _pack_half2(lowering: _Lowering, node: ast.CallStmt, name: str, args: Args) -> None:
    if len(args) != 4:
        raise lowering.error(node, "pack_half2(frag, offset, lo, hi)")
    dtype = _half_dtype(lowering, node, "pack_half2 packs")
    lo, hi = (lowering.float_expr(args[i]) for i in (2, 3))
    frag, offset = _array(lowering, args[0]), lowering.narrow_expr(args[1])
    lowering.emit(kernel.PackHalf2Op(frag, offset, lo, hi, dtype))


def _cp_async(lowering: _Lowering, node: ast.CallStmt, name: str, args: Args) -> None:
    if len(args) < 5:
        raise lowering.error(node, "cp_async(tile, offset, tensor, index..., valid_elements)")
    if lowering.index != i32:
        # the intrinsic's global offset is 32-bit (kernel.cp_async)
        raise NarrowIndexError(
            f"{lowering.decl.name} reads global memory with cp_async, whose offsets are 32-bit"
        )
    tile, tensor = _array(lowering, args[0]), _array(lowering, args[2])
    assert isinstance(args[2], ast.Name)  # as `_array` checked
    tensor_name = args[2].id
    dims = lowering.params[tensor_name]
    indices = args[3:-1]
    if len(indices) != len(dims):
        raise lowering.error(node, f"{tensor_name} has {len(dims)} dimension(s)")
    source = lowering.linear_offset(node, dims, indices)
    element_bytes = dtypes.lookup(dtypes.dtype_name(kernel.pointee(tensor))).bytes
    elements = lowering.int_expr(args[-1])
    valid = lowering.add(arith.MuliOp(elements, lowering.const_int(element_bytes)))
    offset = lowering.narrow_expr(args[1])
    lowering.emit(kernel.CopyAsyncOp(tile, offset, tensor, source, valid))


def _cp_async_wait(lowering: _Lowering, node: ast.CallStmt, name: str, args: Args) -> None:
    if len(args) != 1:
        raise lowering.error(node, "cp_async_wait(pending)")
    lowering.emit(kernel.CopyAsyncWaitOp(lowering.int_expr(args[0])))


#: each intrinsic statement's lowering, by its name
INTRINSICS: dict[str, Callable[[_Lowering, ast.CallStmt, str, Args], None]] = {
    "ldmatrix": _ldmatrix,
    "ldmatrix_trans": _ldmatrix,
    "mma": _mma,
    "pack_half2": _pack_half2,
    "cp_async": _cp_async,
    "cp_async_wait": _cp_async_wait,
}
