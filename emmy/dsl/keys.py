"""Problem keys: the canonical, hashable text of the work a site does, and its codec.

    rows=4,cols=1000,T=f32,inputs=full/row,fn=(in0 + in1),store=no

A key is names in its kernel's declared order, each `name=value`; a value may hold commas
inside parentheses (a chain such as `max(in0, 0.5)`). The text is the identity recorded
rows are stored under, so this module is the one place that reads and writes it:

- `parse_key` / `format_key`: the values as the kernel language reads them (integers as
  int, everything else as the text written), for instantiating a kernel at a key.
- `ProblemKey`: the same text with typed values: the elementwise chains `fn` and
  `epilogue` as `Chain`s, `inputs` as a tuple of `InputKind`s, `yes`/`no` flags as bools.
  Printing a parsed key gives back its text, byte for byte; a value that would not print
  back (a chain not in the form the compiler writes, `007`) is refused or kept as text.

The helpers that read a key against its kernel's declaration (its defaults, its
parameters) are here too; those that need the lowering's storage types stay in lower.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from lark import Token, Tree

from emmy import dtypes
from emmy.compile_options import option_value
from emmy.dsl.interpret import Condition
from emmy.dsl.parser import DslError, KernelDecl, Param, parse_expression
from emmy.dsl.unparse import unparse
from emmy.errors import EmmyError

#: the key names whose values are elementwise chains
CHAIN_NAMES = ("fn", "epilogue")
#: the key name whose value is the input kinds of a chain, `/`-separated
INPUTS_NAME = "inputs"
#: the key name whose value is the storage type of each input of a chain, `/`-separated,
#: where they are not all the kernel's T (absent otherwise: older keys keep their text)
DTYPES_NAME = "dtypes"
#: the key name of the integer type a kernel indexes with, present only as `index=i64`, at
#: a site with a tensor of 2^31 elements or more (every other key keeps its text)
INDEX_NAME = "index"
WIDE_INDEX = "i64"
#: the elements a tensor may have for 32-bit index arithmetic
NARROW_INDEX_LIMIT = 2**31
FLAG_TEXT = {True: "yes", False: "no"}
_INPUT_NAME = re.compile(r"in(0|[1-9][0-9]*)")


class InputKind(StrEnum):
    """How a chain's input is read at a flat output index: `full` has the output's
    elements, `row` one per column, `col` one per row, `scalar` one."""

    FULL = "full"
    ROW = "row"
    COL = "col"
    SCALAR = "scalar"


def parse_input_kinds(text: str) -> tuple[InputKind, ...]:
    """`full/row` as (FULL, ROW); the empty text (a chain with no inputs) as ()."""
    if not text:
        return ()
    kinds = []
    for word in text.split("/"):
        try:
            kinds.append(InputKind(word))
        except ValueError:
            known = ", ".join(InputKind)
            raise EmmyError(
                f"unknown input kind {word!r} in inputs={text!r}; known: {known}"
            ) from None
    return tuple(kinds)


def format_input_kinds(kinds: Iterable[str]) -> str:
    return "/".join(kinds)


@dataclass(frozen=True)
class Chain:
    """An elementwise chain of a key (`gelu((acc + in0))`): a kernel-language expression
    over `acc` (the value of the kernel it is fused into), the inputs `in0`, `in1`, ...,
    numbers, `+ - * /` and calls. It prints in the form the compiler writes chains, every
    operation in parentheses of its own."""

    tree: Tree

    @classmethod
    def parse(cls, text: str, where: str = "<chain of a key>") -> Chain:
        return _parsed_chain(text, where)

    def __str__(self) -> str:
        return unparse(self.tree, grouped=True)

    def renamed(self, names: Mapping[str, str]) -> Chain:
        """The chain with each name in `names` replaced, all at once."""
        return Chain(_renamed(self.tree, names))

    def shifted(self, by: int) -> Chain:
        """The chain with input `in<i>` renumbered `in<i + by>` (inputs put after `by` others)."""
        return self.renamed({f"in{i}": f"in{i + by}" for i in self.input_numbers()})

    def input_numbers(self) -> list[int]:
        """The numbers of the inputs the chain reads, in order of first use."""
        numbers: list[int] = []
        for name in _names(self.tree):
            match = _INPUT_NAME.fullmatch(name)
            if match and int(match.group(1)) not in numbers:
                numbers.append(int(match.group(1)))
        return numbers


@cache
def _parsed_chain(text: str, where: str) -> Chain:
    # a model's layers repeat their keys: each chain text is parsed once (a Chain is never
    # changed in place)
    return Chain(parse_expression(text, where))


def _names(node: Tree | Token) -> Iterator[str]:
    if isinstance(node, Token):
        return
    if node.data == "name":
        yield str(node.children[0])
        return
    for child in node.children:
        if isinstance(child, Tree):
            yield from _names(child)


def _renamed(node: Tree | Token, names: Mapping[str, str]) -> Tree | Token:
    if isinstance(node, Token):
        return node
    if node.data == "name":
        (token,) = node.children
        return Tree("name", [token.update(value=names.get(str(token), str(token)))])
    children = [c if c is None else _renamed(c, names) for c in node.children]
    return Tree(node.data, children)


#: a key's value, typed: int, chain, input kinds, flag, or any other value as its text
KeyValue = int | bool | str | Chain | tuple[InputKind, ...]


def format_value(value: KeyValue) -> str:
    """A value as the key's text holds it."""
    if isinstance(value, bool):
        return FLAG_TEXT[value]
    if isinstance(value, tuple):
        return format_input_kinds(value)
    return str(value)


def plain_values(key: Mapping[str, KeyValue]) -> dict[str, int | str]:
    """The values as the kernel language reads them: integers, and text for the rest."""
    return {
        name: value
        if isinstance(value, int) and not isinstance(value, bool)
        else format_value(value)
        for name, value in key.items()
    }


def format_key(names: Sequence[str], key: Mapping[str, KeyValue]) -> str:
    """The key's text: `names` in order, each with its value of `key`."""
    return _joined((name, key[name]) for name in names)


def _joined(items: Iterable[tuple[str, KeyValue]]) -> str:
    return ",".join(f"{name}={format_value(value)}" for name, value in items)


def _items(text: str) -> Iterator[tuple[str, str]]:
    """The key's (name, value text) pairs, splitting at the commas outside parentheses."""
    items, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            items.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    if current:
        items.append(current)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise EmmyError(f"malformed problem key {text!r}: {item!r} is not name=value")
        yield name.strip(), value


def parse_key(text: str) -> dict[str, int | str]:
    """The key's values; integers as int, everything else as the text written."""
    return {name: option_value(value) for name, value in _items(text)}


def _typed(text: str, name: str, value: str) -> KeyValue:
    """A value of a parsed key, typed where it prints back as the same text."""
    if name in CHAIN_NAMES:
        chain = Chain.parse(value, f"<{name} of the key {text!r}>")
        if str(chain) != value:
            raise EmmyError(
                f"problem key {text!r}: {name}={value} is not a chain as the compiler writes "
                f"it ({chain})"
            )
        return chain
    if name == INPUTS_NAME:
        return parse_input_kinds(value)
    if value in FLAG_TEXT.values():
        return value == FLAG_TEXT[True]
    typed = option_value(value)
    return typed if str(typed) == value else value


@dataclass(frozen=True)
class ProblemKey(Mapping[str, KeyValue]):
    """A problem key with typed values, its names in order; `str()` is its text."""

    fields: tuple[tuple[str, KeyValue], ...]

    def __post_init__(self) -> None:
        names = [name for name, _ in self.fields]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise EmmyError(f"problem key {self}: {', '.join(repeated)} given more than once")

    @classmethod
    def parse(cls, text: str) -> ProblemKey:
        return cls(tuple((name, _typed(text, name, value)) for name, value in _items(text)))

    def __str__(self) -> str:
        return _joined(self.fields)

    def __getitem__(self, name: str) -> KeyValue:
        for field_name, value in self.fields:
            if field_name == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.fields)

    def __len__(self) -> int:
        return len(self.fields)


# -- a key against its kernel's declaration ----------------------------------------------


def canonical_key(decl: KernelDecl, key: Mapping[str, KeyValue]) -> str:
    """The problem key as the same string on every machine: the declared order of names,
    without the names at their declared default (so a key that gains an optional name
    keeps the text its measurements were recorded under), then `index=i64` where the
    site indexes in 64 bits (a name every kernel has, declared by none)."""
    plain = plain_values(key)
    names = [n for n in decl.key if n in plain and plain[n] != decl.key_defaults.get(n, _ABSENT)]
    if plain.get(INDEX_NAME) == WIDE_INDEX and INDEX_NAME not in decl.key:
        names.append(INDEX_NAME)
    return format_key(names, plain)


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


def _present(condition: Condition, key: Mapping[str, int | str]) -> bool:
    """Whether a parameter's condition holds at a key: a bare key name where it is `yes`."""
    if condition.tree.data == "name":
        return str(key.get(condition.names[0])) == "yes"
    return condition.holds(key)


def param_dtype(param: Param, key: Mapping[str, int | str]) -> str:
    """A parameter's storage type: the value of its key (`T`), or a storage type it names
    itself (`i8`)."""
    return str(key[param.dtype]) if param.dtype in key else param.dtype
