"""A problem key as the kernel language reads it: the expressions of its chains, and a key
against its kernel's declaration (its defaults, its parameters, the typed key of a site).

The key codec itself is emmy.base.problem_key (below the IR, which holds typed keys); a chain
there is its text, whose expression is read here, once per text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache

from emmy.base import dtypes
from emmy.base.problem_key import (
    INDEX_NAME,
    WIDE_INDEX,
    Chain,
    KeyValue,
    ProblemKey,
    plain_values,
)
from emmy.dsl.ast import Expr, KernelDecl, Name, Param, renamed, walk
from emmy.dsl.interpret import Condition
from emmy.dsl.parser import DslError, parse_expression
from emmy.dsl.unparse import unparse

_INPUT_NAME = re.compile(r"in(0|[1-9][0-9]*)")


# -- the chains of a key ------------------------------------------------------------------


def chain_tree(chain: Chain | str, where: str = "<chain of a key>") -> Expr:
    """The expression of a chain (or of a chain's text)."""
    return _parsed_chain(str(chain), where)


@cache
def _parsed_chain(text: str, where: str) -> Expr:
    # a model's layers repeat their keys: each chain text is parsed once (a tree is never
    # changed in place)
    return parse_expression(text, where)


def parse_chain(text: str, where: str = "<chain of a key>") -> Chain:
    """A chain written by hand, in the form the compiler writes chains (every operation in
    parentheses of its own)."""
    return Chain(unparse(chain_tree(text, where), grouped=True))


def rename_chain(chain: Chain, names: Mapping[str, str]) -> Chain:
    """The chain with each name in `names` replaced, all at once."""
    return Chain(unparse(renamed(chain_tree(chain), names), grouped=True))


def shift_chain(chain: Chain, by: int) -> Chain:
    """The chain with input `in<i>` renumbered `in<i + by>` (inputs put after `by` others)."""
    return rename_chain(chain, {f"in{i}": f"in{i + by}" for i in chain_inputs(chain)})


def chain_inputs(chain: Chain) -> list[int]:
    """The numbers of the inputs the chain reads, in order of first use."""
    numbers: list[int] = []
    for node in walk(chain_tree(chain)):
        match = _INPUT_NAME.fullmatch(node.id) if isinstance(node, Name) else None
        if match and int(match.group(1)) not in numbers:
            numbers.append(int(match.group(1)))
    return numbers


# -- a key against its kernel's declaration ----------------------------------------------


def problem_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> ProblemKey:
    """The key of a site of `decl`, the same on every machine: the declared order of names,
    without the names at their declared default (so a key that gains an optional name
    keeps the text its measurements were recorded under), then `index=i64` where the
    site indexes in 64 bits (a name every kernel has, declared by none)."""
    plain = plain_values(key)
    names = [n for n in decl.key if n in plain and plain[n] != decl.key_defaults.get(n, _ABSENT)]
    if plain.get(INDEX_NAME) == WIDE_INDEX and INDEX_NAME not in decl.key:
        names.append(INDEX_NAME)
    return ProblemKey.of((name, plain[name]) for name in names)


def canonical_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> str:
    """The text of the key of a site of `decl` (see `problem_key`): what rows are stored
    under."""
    return str(problem_key(decl, key))


_ABSENT = object()


def complete_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> dict[str, int | str]:
    """The key with every name the problem left out at its declared default."""
    return {**decl.key_defaults, **plain_values(key)}


def check_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> None:
    """A DslError at the declaration unless the key gives every name it declares, an index
    type of i32 or i64 and a storage type to every parameter."""
    key = complete_key(decl, key)
    if str(key.get(INDEX_NAME, "i32")) not in ("i32", WIDE_INDEX):
        raise DslError(
            decl.path, decl.line, 1, f"{INDEX_NAME}={key[INDEX_NAME]} is not i32 or {WIDE_INDEX}"
        )
    missing = [name for name in decl.key if name not in key]
    if missing:
        raise DslError(
            decl.path, decl.line, 1, f"kernel {decl.name} needs key {', '.join(missing)}"
        )
    for param in decl.params:
        if not dtypes.is_storage(param_dtype(param, key)):
            raise DslError(
                decl.path,
                decl.line,
                1,
                f"unsupported dtype {param_dtype(param, key)!r} for {param.name}",
            )


def active_params(decl: KernelDecl, key: Mapping[str, KeyValue]) -> list[Param]:
    """The parameters a kernel has at this key: one that depends on a key is there only
    where that key is `yes`."""
    full = complete_key(decl, key)
    return [p for p in decl.params if p.when is None or _present(p.when, full)]


def _present(condition: Expr, key: Mapping[str, int | str]) -> bool:
    """Whether a parameter's condition holds at a key: a bare key name where it is `yes`."""
    if isinstance(condition, Name):
        return str(key.get(condition.id)) == "yes"
    return Condition.of(condition).holds(key)


def param_dtype(param: Param, key: Mapping[str, int | str]) -> str:
    """A parameter's storage type: the value of its key (`T`), or a storage type it names
    itself (`i8`)."""
    return str(key[param.dtype]) if param.dtype in key else param.dtype
