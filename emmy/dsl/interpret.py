"""Evaluates kernel-language expressions over a problem key and a config, in Python.

Used for fork constraints (which configs are valid for a key) before any IR is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cache, lru_cache

from lark import Token, Tree

from emmy import dtypes
from emmy.dsl.parser import names_read, parse_expression
from emmy.errors import EvaluationError

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

BINARY: dict[str, Callable[[Value, Value], Value]] = {
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


def evaluate(
    node: Tree | Token, env: Mapping[str, Value], symbols: frozenset[str] = frozenset()
) -> Value:
    """The value of an expression; names not in `env` but in `symbols` stand for themselves."""
    if isinstance(node, Token):
        raise EvaluationError(node, f"unexpected {node!s}")
    kind = node.data
    children = node.children
    if kind == "int_lit":
        return int(children[0])
    if kind == "float_lit":
        return float(children[0])
    if kind == "name":
        name = str(children[0])
        if name in env:
            return env[name]
        if name in symbols or dtypes.is_storage(name):  # a symbolic option, or a dtype (T == bf16)
            return name
        raise EvaluationError(node, f"unknown name {name!r}")
    if kind == "neg":
        return -evaluate(children[0], env, symbols)
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


@cache
def _constraint(text: str) -> tuple[Tree, tuple[str, ...]]:
    tree = parse_expression(text, "<fork constraint>")
    return tree, tuple(sorted(names_read(tree)))


_MISSING = object()


@lru_cache(maxsize=65536)
def _holds(text: str, values: tuple, symbols: frozenset[str]) -> bool:
    tree, names = _constraint(text)
    env = {n: v for n, v in zip(names, values, strict=True) if v is not _MISSING}
    return bool(evaluate(tree, env, symbols))


def symbols_of(text: str, declared: Iterable[str]) -> frozenset[str]:
    """The names a condition reads that name no key or fork: symbols standing for
    themselves, so a symbolic key compares with any of its values (`layout == nk` where
    layout is kn)."""
    return frozenset(_constraint(text)[1]).difference(declared)


def holds(text: str, env: Mapping[str, Value], symbols: frozenset[str] = frozenset()) -> bool:
    """Whether a constraint holds. It reads a few names only, so it is evaluated once per
    combination of their values: enumerating a fork space costs little more than a lookup."""
    names = _constraint(text)[1]
    return _holds(text, tuple(env.get(n, _MISSING) for n in names), symbols)
