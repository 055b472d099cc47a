"""Typed records the passes and the frontend leave on the IR (a decision's evidence, a
graph's coverage): attributes whose fields print by name, in order, and read back as the
values a report lists.

    #evidence.db<rows = [3 : i64], median_s = 2.5e-06 : f64, ...>
    #graph.coverage<ops = 12 : i64, native_ops = 10 : i64, ...>
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    NoneAttr,
    NoneType,
    StringAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

#: what a report lists of a record: JSON-like values
PlainValue = None | bool | int | float | str | list | dict


def to_attr(value: PlainValue) -> Attribute:
    """A JSON-like value as builtin attributes; `from_attr` gives the same value back.

    Dicts are keyed in sorted order: the order in which evidence was always recorded."""
    if value is None:
        return NoneAttr()
    if isinstance(value, bool):  # before int: a bool is an int to Python
        return IntegerAttr(int(value), i1)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(float(value), f64)
    if isinstance(value, list | tuple):
        return ArrayAttr([to_attr(v) for v in value])
    if isinstance(value, dict):
        return DictionaryAttr({str(k): to_attr(value[k]) for k in sorted(value)})
    raise TypeError(f"no attribute holds {value!r} ({type(value).__name__})")


def from_attr(attr: Attribute) -> PlainValue:
    """The JSON-like value `to_attr` made `attr` of."""
    if isinstance(attr, NoneAttr | NoneType):  # `none` parses back as the type
        return None
    if isinstance(attr, IntegerAttr) and attr.type == i1:
        return bool(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, ArrayAttr):
        return [from_attr(a) for a in attr]
    if isinstance(attr, DictionaryAttr):
        return {k: from_attr(v) for k, v in attr.data.items()}
    raise TypeError(f"{attr} is not an attribute to_attr makes")


def unrecorded(attr: Attribute) -> Attribute | None:
    """The first part of `attr` that `from_attr` cannot read back, or None."""
    if isinstance(attr, ArrayAttr):
        return next((bad for a in attr if (bad := unrecorded(a)) is not None), None)
    if isinstance(attr, DictionaryAttr):
        return next((bad for a in attr.data.values() if (bad := unrecorded(a)) is not None), None)
    if isinstance(attr, NoneAttr | NoneType | StringAttr):
        return None
    if isinstance(attr, IntegerAttr) and attr.type in (i1, i64):
        return None
    if isinstance(attr, FloatAttr) and attr.type == f64:
        return None
    return attr


class RecordAttr(ParametrizedAttribute):
    """A typed record: its fields print by name, in order (`<name = value, ...>`)."""

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        values: list[Attribute] = []
        with parser.in_angle_brackets():
            for index, (name, _) in enumerate(cls.get_irdl_definition().parameters):
                if index:
                    parser.parse_punctuation(",")
                parser.parse_keyword(name)
                parser.parse_punctuation("=")
                values.append(parser.parse_attribute())
        return values

    def print_parameters(self, printer: Printer) -> None:
        names = [name for name, _ in self.get_irdl_definition().parameters]

        def field(item: tuple[str, Attribute]) -> None:
            printer.print_string(f"{item[0]} = ")
            printer.print_attribute(item[1])

        with printer.in_angle_brackets():
            printer.print_list(zip(names, self.parameters, strict=True), field)


class EvidenceAttr(RecordAttr):
    """What an oracle decided a site by, or the runner-up it weighed (a `#fork.decision`'s
    parts): `to_json` gives the values the report lists of it."""

    @abstractmethod
    def to_json(self) -> dict[str, PlainValue]: ...


@irdl_attr_definition
class RecordedAttr(EvidenceAttr):
    """What an oracle of another package records, as JSON-like builtin attributes
    (`to_attr`): the built-in oracles' records are typed.

    #fork.recorded<record = {why = "handed in"}>
    """

    name = "fork.recorded"
    record: DictionaryAttr

    def __init__(self, record: Mapping[str, PlainValue]):
        attr = to_attr(dict(record))
        assert isinstance(attr, DictionaryAttr)
        super().__init__(attr)

    def to_json(self) -> dict[str, PlainValue]:
        return {k: from_attr(v) for k, v in self.record.data.items()}

    def verify(self) -> None:
        bad = unrecorded(self.record)
        if bad is not None:
            raise VerifyException(
                f"#fork.recorded holds {bad}, which is not a recorded value (none, a bool, "
                "an i64, an f64, a string, a list or a dict of them)"
            )
