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
  back (`007`) is kept as text. A site of the IR holds one (`#fork.key<"...">`).

The codec is in the bottom layer, below the IR, and loads no parser: a chain is held as
its text, whose expression the kernel language reads (emmy.dsl.keys: `chain_tree`,
`rename_chain`, `shift_chain`). Reading a key against its kernel's declaration (its
defaults, its parameters) is the kernel language's too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from emmy.base.compile_options import option_value
from emmy.base.errors import EmmyError

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


class InputKind(StrEnum):
    """How a chain's input is read at a flat output index: `full` has the output's
    elements, `row` one per column, `col` one per row, `scalar` one; over an output of rank
    3 or more (an elementwise kernel's key gives its inner and mid), `mid` one per channel
    (dim 1), read at (i / inner) % mid, and `batch` one per element of a batch entry (a
    broadcast over dim 0: a position embedding's), read at i % (mid · inner)."""

    FULL = "full"
    ROW = "row"
    COL = "col"
    SCALAR = "scalar"
    MIDDLE = "mid"
    BATCH = "batch"


def parse_input_kinds(text: str) -> tuple[InputKind, ...]:
    """`full/row` as (FULL, ROW); the empty text (a chain with no inputs) as ()."""
    if not text:
        return ()
    kinds: list[InputKind] = []
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
    numbers, `+ - * /` and calls, held as its text; the compiler writes chains with every
    operation in parentheses of its own (emmy.dsl.keys reads and rewrites them)."""

    text: str

    def __str__(self) -> str:
        return self.text


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
    items: list[str] = []
    depth, current = 0, ""
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


def _typed(name: str, value: str) -> KeyValue:
    """A value of a key's text, typed where it prints back as the same text."""
    if name in CHAIN_NAMES:
        return Chain(value)
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
        return cls(tuple((name, _typed(name, value)) for name, value in _items(text)))

    @classmethod
    def of(cls, items: Iterable[tuple[str, KeyValue]]) -> ProblemKey:
        """The key of these names and values, each typed as its text would be (an integer
        or the text of a chain, input kinds or a flag as the kernel language reads them)."""
        return cls(tuple((name, _typed(name, format_value(value))) for name, value in items))

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


@dataclass(frozen=True)
class SiteRef:
    """A site as every record names it: its family and its typed problem key.

    The text of a reference (`family`, `str(key)`) is written only where a store keys rows
    by it (the tuning database, golden files, the dataset, a campaign file, a report) and
    in printed IR; `parse` reads it back there."""

    family: str
    key: ProblemKey

    @classmethod
    def parse(cls, family: str, key: str) -> SiteRef:
        """The reference a store's row holds as text; EmmyError where the key is malformed."""
        return cls(family, ProblemKey.parse(key))

    @cached_property
    def values(self) -> dict[str, int | str]:
        """The key's values as the kernel language reads them (emmy.dsl), read once."""
        return plain_values(self.key)

    def __str__(self) -> str:
        return f"{self.family} at {self.key}"
