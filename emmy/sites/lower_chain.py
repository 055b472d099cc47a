"""Lowers an elementwise chain (a key's `fn` or `epilogue`) with the types of its values.

A chain's values are f32 (every float storage type computes in f32), i32, i64 (integer
arithmetic is exact, in its own width) or i1 (bools). The inputs have their storage
types (a bool input, stored as i8, is read as i1); a literal takes the type of the values
it meets (`bitwise_and(in0, 1)` on i64 is 64-bit), and the ops of the pointwise table
(emmy.base.pointwise_ops) call their device functions (`kernel.device_call`) except
the `inline` ones, which lower on floats as they always have (the kernel language's own
arithmetic, so the recipes' kernels stay the same).

    fn = "where(in0, (in1 + 1), 0)"   with in0: i8, in1: i64  ->  i64
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, IntegerType, f32, i1
from xdsl.ir import Attribute, Operation, SSAValue

from emmy.base import dtypes
from emmy.base.errors import DslError
from emmy.base.pointwise_ops import (
    BY_CALL,
    CONDITION,
    CONVERT_TARGETS,
    Gives,
    PointwiseOp,
)
from emmy.dialects import kernel
from emmy.dsl import ast

#: integer arithmetic of the chains' infix operators (division is on floats: an integer
#: division is true division, done after a conversion)
_INT_INFIX = {"+": arith.AddiOp, "-": arith.SubiOp, "*": arith.MuliOp}
#: names a chain may read besides its inputs
_FLOAT_NAMES = {"inf": math.inf, "nan": math.nan}


class _Lowering(Protocol):
    """What a chain needs of the kernel's lowering (emmy.sites.lower.Lowering)."""

    def add(self, op: Operation) -> SSAValue: ...

    def const_float(self, value: float) -> SSAValue: ...

    def binary(self, node: ast.Expr, op: str, lhs: SSAValue, rhs: SSAValue) -> SSAValue: ...

    def builtin(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue: ...

    def error(self, node: ast.Node, message: str) -> DslError: ...


@dataclass(frozen=True)
class Literal:
    """A number of the chain, typed once it meets a value."""

    value: int | float

    @property
    def type(self) -> Attribute:
        """Its type where nothing else decides: f32 for a float, i64 for an integer."""
        return f32 if isinstance(self.value, float) else IntegerType(64)


def value_type(dtype: str) -> Attribute:
    """The type a chain computes a storage type's values in."""
    if dtypes.is_float(dtype):
        return f32
    return i1 if dtype == "i8" else dtypes.xdsl_type(dtype)


class ChainLowering:
    """Lowers one chain through `lowering`, reading `names` (the inputs, `acc`)."""

    def __init__(self, lowering: _Lowering, names: dict[str, SSAValue]) -> None:
        self.lowering = lowering
        self.names = names

    def add(self, op: Operation) -> SSAValue:
        return self.lowering.add(op)

    # -- values -------------------------------------------------------------------------
    def value(self, node: ast.Expr, want: Attribute | None = None) -> SSAValue:
        """The SSA value of a chain node; a literal becomes a constant of type `want`."""
        operand = self.operand(node)
        if isinstance(operand, Literal):
            return self.constant(node, operand, want or operand.type)
        if want is not None and operand.type != want:
            return self.cast(operand, want)
        return operand

    def operand(self, node: ast.Expr) -> SSAValue | Literal:
        match node:
            case ast.FloatLit() | ast.IntLit():
                return Literal(node.value)
            case ast.Name():
                return self.name(node)
            case ast.Neg():
                return self.negate(node)
            case ast.Call():
                return self.call(node)
            case ast.Sum() | ast.Product():
                return self.infix(node)
        kind = type(node).__name__.lower()
        raise self.lowering.error(node, f"{kind} is not an operation of an elementwise chain")

    def name(self, node: ast.Name) -> SSAValue | Literal:
        if node.id in _FLOAT_NAMES:
            return Literal(_FLOAT_NAMES[node.id])
        if node.id not in self.names:
            raise self.lowering.error(node, f"unknown name {node.id!r} in an elementwise chain")
        return self.names[node.id]

    def constant(self, node: ast.Expr, literal: Literal, typ: Attribute) -> SSAValue:
        if typ == f32:
            return self.lowering.const_float(float(literal.value))
        if isinstance(literal.value, float) and not literal.value.is_integer():
            raise self.lowering.error(node, f"{literal.value} is not an integer of {typ}")
        value = int(literal.value)
        if typ == i1:
            value = int(bool(value))
        assert isinstance(typ, IntegerType), f"{typ} is not a type of a chain's values"
        return self.add(arith.ConstantOp(IntegerAttr(value, typ)))

    def cast(self, value: SSAValue, typ: Attribute) -> SSAValue:
        """`value` as another of the chain's types, as C converts it (the result of a
        chain as its output's storage: a bool as a 0/1 byte)."""
        source = value.type
        if source == typ:
            return value
        if typ == f32:
            return self.add((arith.UIToFPOp if source == i1 else arith.SIToFPOp)(value, f32))
        assert isinstance(typ, IntegerType)
        if source == f32:
            return self.add(arith.FPToSIOp(value, typ))
        assert isinstance(source, IntegerType)
        if source.width.data > typ.width.data:
            return self.add(arith.TruncIOp(value, typ))
        return self.add((arith.ExtUIOp if source == i1 else arith.ExtSIOp)(value, typ))

    # -- operations ---------------------------------------------------------------------
    def common(self, operands: list[SSAValue | Literal]) -> Attribute:
        """The type values and literals compute in: the first value's, else a literal's."""
        typed = [o.type for o in operands if not isinstance(o, Literal)]
        return typed[0] if typed else operands[0].type

    def negate(self, node: ast.Neg) -> SSAValue | Literal:
        inner = self.operand(node.operand)
        if isinstance(inner, Literal):
            return Literal(-inner.value)
        if inner.type == f32:
            return self.add(arith.NegfOp(inner))
        zero = self.constant(node, Literal(0), inner.type)
        return self.add(arith.SubiOp(zero, inner))

    def infix(self, node: ast.Infix) -> SSAValue:
        values = [self.operand(node.first), *(self.operand(rhs) for _, rhs in node.rest)]
        typ = self.common(values)
        result = self.value_of(node, values[0], typ)
        for (op, _), rhs in zip(node.rest, values[1:], strict=True):
            result = self.arithmetic(node, op, result, self.value_of(node, rhs, typ))
        return result

    def value_of(self, node: ast.Expr, operand: SSAValue | Literal, typ: Attribute) -> SSAValue:
        if isinstance(operand, Literal):
            return self.constant(node, operand, typ)
        return operand

    def arithmetic(self, node: ast.Expr, op: str, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        if lhs.type == f32:
            return self.lowering.binary(node, op, lhs, rhs)
        if op not in _INT_INFIX or lhs.type == i1:
            raise self.lowering.error(node, f"{op} of {lhs.type} values in an elementwise chain")
        return self.add(_INT_INFIX[op](lhs, rhs))

    def call(self, node: ast.Call) -> SSAValue:
        fname = node.function
        entry = BY_CALL.get(fname)
        if entry is None:
            raise self.lowering.error(node, f"{fname}() is not a pointwise op")
        arg_nodes = node.args
        if len(arg_nodes) != entry.arity:
            raise self.lowering.error(node, f"{fname}() takes {entry.arity} operand(s)")
        operands = [self.operand(arg) for arg in arg_nodes]
        values = [o for role, o in zip(entry.roles, operands, strict=True) if role != CONDITION]
        typ = self.common(values) if values else i1
        args = [
            self.value_of(node, o, i1 if role == CONDITION else typ)
            for role, o in zip(entry.roles, operands, strict=True)
        ]
        if entry.inline:
            return self.inline(node, fname, args)
        result = self.result_type(entry, fname, typ)
        return self.add(kernel.DeviceCallOp(entry.device(fname), args, result))

    def inline(self, node: ast.Expr, fname: str, args: list[SSAValue]) -> SSAValue:
        """An op the kernel language computes itself: on floats as it always has; relu
        of integers as a max."""
        (x,) = args
        if x.type == f32:
            return self.lowering.builtin(node, fname, args)
        if fname != "relu":
            raise self.lowering.error(node, f"{fname}() takes floats")
        zero = self.constant(node, Literal(0), x.type)
        return self.add(arith.MaxSIOp(x, zero))

    @staticmethod
    def result_type(entry: PointwiseOp, fname: str, typ: Attribute) -> Attribute:
        if entry.gives == Gives.BOOL:
            return i1
        if entry.gives == Gives.CONVERTED:
            return value_type(CONVERT_TARGETS[fname])
        return typ
