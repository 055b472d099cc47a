"""Evaluates kernel-language expressions over a problem key and a config, in Python.

Used for fork constraints (which configs are valid for a key) and the conditions of a
kernel's parameters, before any IR is built; both are read from their declaration's parse
tree, never from text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lark import Token, Tree

from emmy.base import dtypes
from emmy.base.errors import EvaluationError
from emmy.dsl.nodes import token

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
    node: Tree | Token, env: Mapping[str, Value], symbols: frozenset[str] = frozenset()
) -> Value:
    """The value of an expression; names not in `env` but in `symbols` stand for themselves."""
    if isinstance(node, Token):
        raise EvaluationError(node, f"unexpected {node!s}")
    kind = node.data
    children = node.children
    if kind == "int_lit":
        return int(token(children[0]))
    if kind == "float_lit":
        return float(token(children[0]))
    if kind == "name":
        name = str(children[0])
        if name in env:
            return env[name]
        if name in symbols or dtypes.is_storage(name):  # a symbolic option, or a dtype (T == bf16)
            return name
        raise EvaluationError(node, f"unknown name {name!r}")
    if kind == "neg":
        return _negative(evaluate(children[0], env, symbols))
    if kind == "not_":
        return not evaluate(children[0], env, symbols)
    if kind == "and_expr":
        return all(evaluate(c, env, symbols) for c in children)
    if kind == "or_expr":
        return any(evaluate(c, env, symbols) for c in children)
    if kind in ("sum_expr", "product", "cmp_expr"):
        value = evaluate(children[0], env, symbols)
        for op, rhs in zip(children[1::2], children[2::2], strict=True):
            try:
                value = BINARY[str(op)](value, evaluate(rhs, env, symbols))
            except (ZeroDivisionError, TypeError) as error:
                raise EvaluationError(node, str(error)) from None
        return value
    if kind == "call":
        fname = str(children[0])
        function = FUNCTIONS.get(fname)
        if function is None:
            raise EvaluationError(node, f"{fname}() cannot be used here")
        args = [evaluate(a, env, symbols) for a in children[1].children] if children[1] else []
        try:
            return function(*args)
        except (TypeError, ValueError) as error:
            raise EvaluationError(node, f"{fname}(): {error}") from None
    raise EvaluationError(node, f"{kind} cannot be used here")


def names_read(node: Tree | Token) -> set[str]:
    """The names an expression reads."""
    if isinstance(node, Token):
        return set()
    if node.data == "name":
        return {str(node.children[0])}
    return set().union(set(), *(names_read(c) for c in node.children if c is not None))


class Condition:
    """A parsed condition (a fork's constraint, a parameter's `when`), evaluated over the
    few names it reads: once per combination of their values, so that enumerating a fork
    space costs little more than a lookup per config. A name the environment does not
    give stands for itself (a symbol: `layout == nk`, `algo == online`)."""

    #: combinations of values remembered per condition, before it starts afresh
    REMEMBERED = 65536

    def __init__(self, tree: Tree):
        self.tree = tree
        self.names = tuple(sorted(names_read(tree)))
        self._known: dict[tuple, bool] = {}

    def holds(self, env: Mapping[str, Value]) -> bool:
        values = tuple(env.get(name, _MISSING) for name in self.names)
        known = self._known.get(values)
        if known is not None:
            return known
        given = {n: env[n] for n in self.names if n in env}
        symbols = frozenset(self.names).difference(given)
        if len(self._known) >= self.REMEMBERED:
            self._known.clear()
        known = self._known[values] = bool(evaluate(self.tree, given, symbols))
        return known


_MISSING = object()
