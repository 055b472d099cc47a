"""Evaluates kernel-language expressions over a problem key and a config, in Python.

Used for fork constraints (which configs are valid for a key) and the conditions of a
kernel's parameters, before any IR is built; both are syntax trees (emmy.dsl.ast), in their
declaration or in a knob's constraint, never text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from emmy.base import dtypes
from emmy.base.errors import EvaluationError
from emmy.dsl import ast
from emmy.dsl.ast import names_read

Value = int | float | str | bool


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _sizeof(dtype: Value) -> int:
    if not dtypes.is_storage(dtype):
        raise ValueError(f"sizeof needs a dtype, not {dtype!r}")
    return dtypes.lookup(dtype).bytes


FUNCTIONS: dict[str, Callable[..., Value]] = {
    "ceil_div": _ceil_div,
    "min": min,
    "max": max,
    "sizeof": _sizeof,
}

#: Python's operators, on values of any type: where one does not apply (a symbol plus a
#: number) it raises TypeError, which `evaluate` reports
BINARY: dict[str, Callable[[Any, Any], Value]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
    "%": lambda a, b: a % b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _negative(value: Any) -> Value:
    """-value, as Python computes it: a TypeError for a symbol."""
    return -value


def evaluate(
    expr: ast.Expr, env: Mapping[str, Value], symbols: frozenset[str] = frozenset()
) -> Value:
    """The value of an expression; names not in `env` but in `symbols` stand for themselves."""
    match expr:
        case ast.IntLit(value) | ast.FloatLit(value=value):
            return value
        case ast.Name(name):
            if name in env:
                return env[name]
            if name in symbols or dtypes.is_storage(name):  # a symbolic option, or a dtype
                return name
            raise EvaluationError(expr.at, f"unknown name {name!r}")
        case ast.Neg(operand):
            return _negative(evaluate(operand, env, symbols))
        case ast.Not(operand):
            return not evaluate(operand, env, symbols)
        case ast.And(operands):
            return all(evaluate(o, env, symbols) for o in operands)
        case ast.Or(operands):
            return any(evaluate(o, env, symbols) for o in operands)
        case ast.Compare(lhs, op, rhs):
            return _apply(expr, evaluate(lhs, env, symbols), op, evaluate(rhs, env, symbols))
        case ast.Infix(first, rest):
            value = evaluate(first, env, symbols)
            for op, rhs in rest:
                value = _apply(expr, value, op, evaluate(rhs, env, symbols))
            return value
        case ast.Call(function_name, args):
            function = FUNCTIONS.get(function_name)
            if function is None:
                raise EvaluationError(expr.at, f"{function_name}() cannot be used here")
            values = [evaluate(a, env, symbols) for a in args]
            try:
                return function(*values)
            except (TypeError, ValueError) as error:
                raise EvaluationError(expr.at, f"{function_name}(): {error}") from None
        case _:  # an Index: a constraint reads no tensor
            raise EvaluationError(expr.at, "indexing cannot be used here")


def _apply(expr: ast.Expr, lhs: Value, op: ast.Operator, rhs: Value) -> Value:
    try:
        return BINARY[op](lhs, rhs)
    except (ZeroDivisionError, TypeError) as error:
        raise EvaluationError(expr.at, str(error)) from None


class Condition:
    """A parsed condition (a fork's constraint, a parameter's `when`), evaluated over the
    few names it reads: once per combination of their values, so that enumerating a fork
    space costs little more than a lookup per config. A name the environment does not
    give stands for itself (a symbol: `layout == nk`, `algo == online`)."""

    #: combinations of values remembered per condition, before it starts afresh
    REMEMBERED = 65536

    def __init__(self, expr: ast.Expr):
        self.expr = expr
        self.names = tuple(sorted(names_read(expr)))
        self._known: dict[tuple[object, ...], bool] = {}

    @staticmethod
    def of(expr: ast.Expr) -> Condition:
        """The condition of an expression, one per expression (equal ones share it)."""
        return _condition(expr)

    def holds(self, env: Mapping[str, Value]) -> bool:
        values = tuple(env.get(name, _MISSING) for name in self.names)
        known = self._known.get(values)
        if known is not None:
            return known
        given = {n: env[n] for n in self.names if n in env}
        symbols = frozenset(self.names).difference(given)
        if len(self._known) >= self.REMEMBERED:
            self._known.clear()
        known = self._known[values] = bool(evaluate(self.expr, given, symbols))
        return known


_MISSING = object()


@cache
def _condition(expr: ast.Expr) -> Condition:
    return Condition(expr)
