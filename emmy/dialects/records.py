"""Typed records the passes and the frontend leave on the IR (a decision's evidence, a
graph's coverage): attributes whose fields print by name, in order, and read back as the
values a report lists.

    #fork.db_evidence<rows = [3 : i64], median_s = 2.5e-06 : f64, ...>
    #graph.coverage<ops = 12 : i64, native_ops = 10 : i64, ...>
"""

from __future__ import annotations

from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.parser import AttrParser
from xdsl.printer import Printer

#: what a report lists of a record: JSON-like values
PlainValue = None | bool | int | float | str | list | dict


class RecordAttr(ParametrizedAttribute):
    """A typed record: its fields print by name, in order (`<name = value, ...>`), and
    `to_json` gives the values a report lists of it."""

    def to_json(self) -> dict[str, PlainValue]:
        raise NotImplementedError(f"{self.name} gives no JSON")

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
