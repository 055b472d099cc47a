"""What a compile is asked, as one frozen value: `CompileOptions`.

    CompileOptions.parse(target="nvidia-h200-sm90", pins="vec=4,softmax.algo=online",
                         oracles="pins,db,default", db="none", golden="recipes/gpt2")
  → CompileOptions(target='nvidia-h200-sm90', pins=Pins('vec=4,softmax.algo=online'),
                   oracles=('pins', 'db', 'default'), db=None,
                   golden=(PosixPath('recipes/gpt2'),), flags=())

Options are parsed once, where they enter emmy: the `emmy` command's flags, the keywords of
`emmy.compile` and of the torch.compile backend, the options of emmy-opt's resolve-forks,
the bench's `--pin FORK=V1,V2`. Each textual form has one parser here, each mistake one
line (an EmmyError). Below the edge the compiler, the oracle stack (emmy.recall.oracles),
resolve-forks and the program cache read the typed value; the cache keys on `canonical()`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import cast

from emmy.base.errors import EmmyError
from emmy.base.identity import EMU, arch_of
from emmy.base.paths import default_db_path

#: a fork's option, or a problem key's value, as emmy reads it from text
Value = int | str

#: every built-in oracle, in the order of the default stack
DEFAULT_ORACLES = ("pins", "golden", "db", "prior", "target", "default")
#: the entry point group through which a package adds oracles (name → a class taking an
#: emmy.recall.oracles.OracleContext)
ORACLE_ENTRY_POINTS = "emmy.oracles"
#: the text of `--db` that asks for no tuning database
NO_DATABASE = "none"

_INTEGER = re.compile(r"-?[0-9]+")


def option_value(text: str) -> Value:
    """A value written in a pin or a problem key: an integer where it reads as one
    (`4`, `-1`, `08`), else the text itself."""
    return int(text) if _INTEGER.fullmatch(text) else text


class Pins(Mapping[str, Value]):
    """Forks pinned to a value, in the order given: `vec=4,softmax.algo=online`.

    A plain fork name pins that fork in every site where the value is one of its options;
    `family.fork` or `site.fork` pins it in that family's or that site's sites only. A
    name given twice keeps its last value (at its first place). The order is kept: where
    two pins name one fork of a site (`vec` and `softmax.vec`), the later one applies."""

    __slots__ = ("_pins",)

    def __init__(self, pins: Mapping[str, Value] | Iterable[tuple[str, Value]] = ()) -> None:
        self._pins: dict[str, Value] = dict(pins)

    def __getitem__(self, name: str) -> Value:
        return self._pins[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._pins)

    def __len__(self) -> int:
        return len(self._pins)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pins):
            return list(self._pins.items()) == list(other._pins.items())
        if not isinstance(other, Mapping):
            return False
        return self._pins == {
            name: values for name, values in cast(Mapping[str, object], other).items()
        }

    def __hash__(self) -> int:
        return hash(tuple(self._pins.items()))

    def __str__(self) -> str:
        return ",".join(f"{name}={value}" for name, value in self._pins.items())

    def __repr__(self) -> str:
        return f"Pins({str(self)!r})"


def _pin(item: str, expected: str) -> tuple[str, str]:
    """`fork=text` as (fork, text), both stripped; neither may be empty."""
    name, sep, value = item.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise EmmyError(f"bad pin {item!r}: expected {expected}")
    return name.strip(), value.strip()


def parse_pins(text: str) -> Pins:
    """`vec=4,softmax.algo=online` (the items of repeated `--pin`s joined by commas)."""
    items = filter(None, (item.strip() for item in text.split(",")))
    pins = (_pin(item, "fork=value") for item in items)
    return Pins((name, option_value(value)) for name, value in pins)


def parse_pin_values(items: Sequence[str]) -> dict[str, list[Value]]:
    """The bench's pins, each of one or more values: `--pin vec=1,2 --pin algo=online`
    → {"vec": [1, 2], "algo": ["online"]}."""
    pins: dict[str, list[Value]] = {}
    for item in items:
        name, values = _pin(item, "fork=value[,value...]")
        pins[name] = [option_value(value.strip()) for value in values.split(",")]
    return pins


def known_oracles() -> list[str]:
    """The oracles a stack may name: the built-in ones, then those packages add."""
    added = [entry.name for entry in entry_points(group=ORACLE_ENTRY_POINTS)]
    return list(dict.fromkeys([*DEFAULT_ORACLES, *added]))


def parse_oracles(text: str) -> tuple[str, ...]:
    """`pins,db,default`: the oracle stack, in order ("" the default stack)."""
    if not text:
        return DEFAULT_ORACLES
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    known = known_oracles()
    for name in names:
        if name not in known:
            raise EmmyError(f"unknown oracle {name!r}; known: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise EmmyError(f"oracle list {text!r} names an oracle twice")
    return names


def parse_db(text: str | Path) -> Path | None:
    """The tuning database: a path, "" for emmy's own (default_db_path), "none" for none."""
    if text == NO_DATABASE:
        return None
    return Path(text) if text else default_db_path()


def parse_golden(text: str | Path) -> tuple[Path, ...]:
    """Recipe folders, comma-separated, whose golden files come before the model-agnostic
    ones ("" for none)."""
    return tuple(Path(part) for part in str(text).split(",") if part)


def _check_target(target: str) -> None:
    if target != EMU:
        arch_of(target)  # a malformed identity is one clear line, before any work


@dataclass(frozen=True)
class CompileOptions:
    """Everything a compile is told besides its graph: the device it compiles for, the
    pins, the oracles that decide the other forks and the stores they read, the
    code-generation flags."""

    #: the device identity compiled for (a GPU's slug, or "emu"); only its measurements
    #: and golden files are read
    target: str = EMU
    #: forks pinned to a value; the oracles decide the others
    pins: Pins = Pins()
    #: the oracle stack, asked in order (emmy.recall.oracles)
    oracles: tuple[str, ...] = DEFAULT_ORACLES
    #: the tuning database; None for none
    db: Path | None = field(default_factory=default_db_path)
    #: recipe folders whose golden/<target>.json come before the model-agnostic one
    golden: tuple[Path, ...] = ()
    #: NVRTC's code-generation flags (emmy.base.regime); none for the deployable regime
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_target(self.target)

    @classmethod
    def parse(
        cls,
        *,
        target: str = EMU,
        pins: str = "",
        oracles: str = "",
        db: str | Path = "",
        golden: str | Path = "",
    ) -> CompileOptions:
        """The options as their textual forms give them (see the parsers above)."""
        _check_target(target)
        return cls(
            target=target,
            oracles=parse_oracles(oracles),
            pins=parse_pins(pins),
            db=parse_db(db),
            golden=parse_golden(golden),
        )

    @property
    def default_stack(self) -> bool:
        """Whether the built-in oracles decide, in their default order."""
        return self.oracles == DEFAULT_ORACLES

    def canonical(self) -> str:
        """The options as one text, equal for equal options and different otherwise."""
        return json.dumps(
            {
                "target": self.target,
                "pins": list(self.pins.items()),
                "oracles": list(self.oracles),
                "db": None if self.db is None else str(self.db),
                "golden": [str(path) for path in self.golden],
                "flags": list(self.flags),
            },
            separators=(",", ":"),
        )
