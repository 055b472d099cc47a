"""Constant evaluation of arith values, with C's integer semantics.

Once forks are specialised, launch geometry, loop widths and reduction group sizes are
arith expressions of constants; this is how the emitter and the launch plan read them.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.ir import Operation, SSAValue


def _c_div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _c_rem(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


_INT_BINARY: dict[type, Callable[[int, int], int]] = {
    arith.AddiOp: operator.add,
    arith.SubiOp: operator.sub,
    arith.MuliOp: operator.mul,
    arith.DivSIOp: _c_div,
    arith.RemSIOp: _c_rem,
    arith.MaxSIOp: max,
    arith.MinSIOp: min,
    arith.AndIOp: operator.and_,
    arith.OrIOp: operator.or_,
    arith.XOrIOp: operator.xor,
}
_CMPI = {
    0: operator.eq,
    1: operator.ne,
    2: operator.lt,
    3: operator.le,
    4: operator.gt,
    5: operator.ge,
}


#: values already folded, for a reader of a module that does not change meanwhile (the
#: emitter): an expression's operands are shared by many uses
Folded = dict[SSAValue, "int | float | None"]


def fold(value: SSAValue, memo: Folded | None = None) -> int | float | None:
    """The value of an SSA value computed from constants alone, else None; with `memo`,
    each value is folded once (the module must not change while `memo` is in use)."""
    if memo is None:
        return _fold(value, None)
    if value not in memo:
        memo[value] = _fold(value, memo)
    return memo[value]


def _fold(value: SSAValue, memo: Folded | None) -> int | float | None:
    op = value.owner
    if not isinstance(op, Operation):  # a block's argument
        return None
    if isinstance(op, arith.ConstantOp):
        attr = op.value
        if isinstance(attr, IntegerAttr):
            return attr.value.data
        if isinstance(attr, FloatAttr):
            return attr.value.data
        return None
    if type(op) in _INT_BINARY:
        lhs, rhs = fold(op.operands[0], memo), fold(op.operands[1], memo)
        if not isinstance(lhs, int) or not isinstance(rhs, int):
            return None
        if type(op) in (arith.DivSIOp, arith.RemSIOp) and rhs == 0:
            return None
        return _INT_BINARY[type(op)](lhs, rhs)
    if isinstance(op, arith.CmpiOp):
        lhs, rhs = fold(op.lhs, memo), fold(op.rhs, memo)
        if lhs is None or rhs is None:
            return None
        return int(_CMPI[op.predicate.value.data](lhs, rhs))
    if isinstance(op, arith.SelectOp):
        cond = fold(op.cond, memo)
        if cond is None:
            return None
        return fold(op.lhs if cond else op.rhs, memo)
    if isinstance(op, arith.ExtSIOp):  # a fork's i32 value in a 64-bit kernel
        return fold(op.input, memo)
    if isinstance(op, arith.TruncIOp):  # a 64-bit kernel's size, narrowed for its op
        inner = fold(op.input, memo)
        if not isinstance(inner, int):
            return None
        bits = op.result.type.width.data
        wrapped = inner % (1 << bits)
        return wrapped - (1 << bits) if wrapped >= 1 << (bits - 1) else wrapped
    if isinstance(op, arith.NegfOp):
        inner = fold(op.operands[0], memo)
        return None if inner is None else -inner
    return None


def fold_int(value: SSAValue, what: str) -> int:
    """A value that must be a known integer once forks are fixed."""
    result = fold(value)
    if not isinstance(result, int) or isinstance(result, bool):
        raise ValueError(f"{what} is not a constant integer; are all forks resolved?")
    return result


def float_literal(value: float) -> str:
    """A CUDA float literal that round-trips exactly."""
    if math.isnan(value):
        return "(0.0f / 0.0f)"
    if math.isinf(value):
        return "emmy::inf()" if value > 0 else "(-emmy::inf())"
    text = f"{value:.9g}"  # nine significant digits round-trip any float32
    if not any(c in text for c in ".e"):
        text += ".0"
    return text + "f"
