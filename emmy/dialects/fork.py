"""emmy.fork: the choice points of the compiler.

A `fork.site` is one instantiated kernel family for one problem key; it holds the forks of
that site, the kernel and its launch. A `fork.knob` is a named choice among integer or
symbolic options; its i32 result (the option's value, or a symbol's index) is used by the
kernel body, so the IR is valid before any choice is made. `fork.alternatives` picks one of
several regions by a knob. Forks have side effects as far as the rewriter knows, so CSE
never merges two of them and DCE never deletes an unresolved one.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_region_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

Option = int | str


def option_attr(value: Option) -> Attribute:
    return StringAttr(value) if isinstance(value, str) else IntegerAttr(value, i64)


def option_value(attr: Attribute) -> Option:
    if isinstance(attr, StringAttr):
        return attr.data
    assert isinstance(attr, IntegerAttr)
    return attr.value.data


def _print_option(printer: Printer, value: Option) -> None:
    printer.print_string(f'"{value}"' if isinstance(value, str) else str(value))


def _parse_option(parser: Parser) -> Option:
    text = parser.parse_optional_str_literal()
    return text if text is not None else parser.parse_integer()


@irdl_op_definition
class SiteOp(IRDLOperation):
    """One kernel family instantiated for one problem key.

    fork.site @softmax_0 "softmax" "T=f32,cols=1000,rows=4" {
      %vec = fork.knob "vec" [1, 2, 4, 8] default 4 where "cols % vec == 0"
      kernel.func @softmax_0(...) { ... }
      kernel.launch @softmax_0 grid %g block %b smem %s
    }
    """

    name = "fork.site"
    sym_name = prop_def(StringAttr)
    family = prop_def(StringAttr)
    key = prop_def(StringAttr)
    body = region_def("single_block")
    traits = traits_def(SymbolOpInterface(), NoTerminator())

    def __init__(self, name: str, family: str, key: str, body: Region | None = None):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "family": StringAttr(family),
                "key": StringAttr(key),
            },
            regions=[body or Region(Block())],
        )

    def knobs(self) -> list[KnobOp]:
        return [op for op in self.body.block.ops if isinstance(op, KnobOp)]

    def config(self) -> dict[str, Option]:
        """The resolved value of every fork of the site (raises if one is unresolved)."""
        config = {}
        for knob in self.knobs():
            if knob.value is None:
                raise VerifyException(
                    f"fork {knob.knob_name.data!r} of {self.sym_name.data} is unresolved"
                )
            config[knob.knob_name.data] = option_value(knob.value)
        return config

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(f' "{self.family.data}" "{self.key.data}"')
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)

    @classmethod
    def parse(cls, parser: Parser) -> SiteOp:
        name = parser.parse_symbol_name().data
        family = parser.parse_str_literal()
        key = parser.parse_str_literal()
        attributes = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region()
        if not body.blocks:
            body.add_block(Block())
        site = cls(name, family, key, body)
        if attributes is not None:
            site.attributes |= attributes.data
        return site

    def verify_(self) -> None:
        names = [k.knob_name.data for k in self.knobs()]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise VerifyException(f"fork.site has two forks named {sorted(duplicates)[0]!r}")


@irdl_op_definition
class KnobOp(IRDLOperation):
    """A named choice among options; its result is the option (a symbol's index for symbols).

        %vec = fork.knob "vec" [1, 2, 4, 8] default 4 where "cols % vec == 0"
        %algo = fork.knob "algo" ["two_pass", "online"] default "two_pass"

    After resolution it carries the chosen value and where the choice came from:

        %vec = fork.knob "vec" [1, 2, 4, 8] default 4 = 2 by {oracle = "pin"}
    """

    name = "fork.knob"
    knob_name = prop_def(StringAttr, prop_name="name")
    options = prop_def(ArrayAttr)
    default = prop_def(Attribute)
    constraint = opt_prop_def(StringAttr)
    value = opt_prop_def(Attribute)
    provenance = opt_prop_def(DictionaryAttr)
    result = result_def(i32)

    def __init__(
        self,
        name: str,
        options: Sequence[Option],
        default: Option,
        constraint: str | None = None,
    ):
        properties: dict[str, Attribute] = {
            "name": StringAttr(name),
            "options": ArrayAttr([option_attr(o) for o in options]),
            "default": option_attr(default),
        }
        if constraint:
            properties["constraint"] = StringAttr(constraint)
        super().__init__(properties=properties, result_types=[i32])

    @property
    def option_values(self) -> list[Option]:
        return [option_value(a) for a in self.options]

    @property
    def is_symbolic(self) -> bool:
        return any(isinstance(a, StringAttr) for a in self.options)

    def encode(self, value: Option) -> int:
        """The i32 the kernel body sees for an option."""
        return self.option_values.index(value) if self.is_symbolic else int(value)

    def resolve(self, value: Option, provenance: dict[str, Attribute]) -> None:
        self.value = option_attr(value)
        self.provenance = DictionaryAttr(provenance)

    def print(self, printer: Printer) -> None:
        printer.print_string(f' "{self.knob_name.data}" [')
        printer.print_list(self.option_values, lambda o: _print_option(printer, o))
        printer.print_string("] default ")
        _print_option(printer, option_value(self.default))
        if self.constraint is not None:
            printer.print_string(f' where "{self.constraint.data}"')
        if self.value is not None:
            printer.print_string(" = ")
            _print_option(printer, option_value(self.value))
        if self.provenance is not None:
            printer.print_string(" by ")
            printer.print_attribute(self.provenance)

    @classmethod
    def parse(cls, parser: Parser) -> KnobOp:
        name = parser.parse_str_literal()
        options = parser.parse_comma_separated_list(
            Parser.Delimiter.SQUARE, lambda: _parse_option(parser)
        )
        parser.parse_keyword("default")
        default = _parse_option(parser)
        constraint = None
        if parser.parse_optional_keyword("where"):
            constraint = parser.parse_str_literal()
        op = cls(name, options, default, constraint)
        if parser.parse_optional_punctuation("="):
            op.value = option_attr(_parse_option(parser))
        if parser.parse_optional_keyword("by"):
            provenance = parser.parse_attribute()
            if not isinstance(provenance, DictionaryAttr):
                parser.raise_error("expected a dictionary of provenance after 'by'")
            op.provenance = provenance
        return op

    def verify_(self) -> None:
        values = self.option_values
        if not values:
            raise VerifyException(f"fork {self.knob_name.data!r} has no options")
        if len(set(values)) != len(values):
            raise VerifyException(f"fork {self.knob_name.data!r} lists an option twice")
        if len({type(v) for v in values}) != 1:
            raise VerifyException(f"fork {self.knob_name.data!r} mixes integer and symbol options")
        if option_value(self.default) not in values:
            raise VerifyException(
                f"default {option_value(self.default)!r} of fork {self.knob_name.data!r} "
                f"is not one of its options {values}"
            )
        if self.value is not None and option_value(self.value) not in values:
            raise VerifyException(
                f"value {option_value(self.value)!r} of fork {self.knob_name.data!r} "
                f"is not one of its options {values}"
            )


@irdl_op_definition
class AlternativesOp(IRDLOperation):
    """Runs one of its regions: an algorithmic choice.

    Inside a kernel, chosen by a symbolic knob of the site:

        fork.alternatives %algo ["two_pass", "online"] {
          ...
        } {
          ...
        }

    In a host function, chosen by the `path` knob of the site it names (a site of its own,
    with no kernel); each region yields the values the op stands for:

        %o = fork.alternatives @attention_path_0 ["fused", "unfused"] {
          %a = graph.attention %q, %k, %v {scale = 0.125 : f64} : ...
          fork.yield %a : tensor<1x2x8x16xf32>
        } {
          ...
          fork.yield %b : tensor<1x2x8x16xf32>
        } : tensor<1x2x8x16xf32>
    """

    name = "fork.alternatives"
    selector = opt_operand_def(i32)
    site = opt_prop_def(SymbolRefAttr)
    names = prop_def(ArrayAttr[StringAttr])
    branches = var_region_def("single_block")
    outputs = var_result_def()
    traits = traits_def(NoTerminator())

    def __init__(
        self,
        selector: SSAValue | str,
        names: Sequence[str],
        branches: Sequence[Region],
        result_types: Sequence[Attribute] = (),
    ):
        by_site = isinstance(selector, str)
        properties: dict[str, Attribute] = {"names": ArrayAttr([StringAttr(n) for n in names])}
        if by_site:
            properties["site"] = SymbolRefAttr(selector)
        super().__init__(
            operands=[[] if by_site else [selector]],
            properties=properties,
            regions=[list(branches)],
            result_types=[list(result_types)],
        )

    def yielded(self, index: int) -> YieldOp | None:
        last = self.branches[index].block.last_op
        return last if isinstance(last, YieldOp) else None

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        if self.site is not None:
            printer.print_symbol_name(self.site.root_reference.data)
        else:
            assert self.selector is not None
            printer.print_ssa_value(self.selector)
        printer.print_string(" ")
        printer.print_attribute(self.names)
        for branch in self.branches:
            printer.print_string(" ")
            printer.print_region(branch, print_entry_block_args=False, print_empty_block=False)
        if self.outputs:
            printer.print_string(" : ")
            printer.print_list(self.outputs.types, printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> AlternativesOp:
        site = parser.parse_optional_symbol_name()
        selector = site.data if site is not None else parser.parse_operand()
        names = parser.parse_attribute()
        if not isinstance(names, ArrayAttr):
            parser.raise_error("expected the list of alternative names")
        branches = []
        while (region := parser.parse_optional_region()) is not None:
            if not region.blocks:
                region.add_block(Block())
            branches.append(region)
        types = []
        if parser.parse_optional_punctuation(":"):
            types = parser.parse_comma_separated_list(Parser.Delimiter.NONE, parser.parse_attribute)
        return cls(selector, [n.data for n in names], branches, types)

    def verify_(self) -> None:
        options = [n.data for n in self.names]
        if len(options) != len(self.branches):
            raise VerifyException(
                f"fork.alternatives names {len(options)} options but has "
                f"{len(self.branches)} regions"
            )
        if (self.site is None) == (self.selector is None):
            raise VerifyException("fork.alternatives is chosen by a knob or by a site, not both")
        if self.selector is not None:
            knob = self.selector.owner
            if isinstance(knob, KnobOp) and knob.option_values != options:
                raise VerifyException(
                    f"fork.alternatives options {options} differ from "
                    f"fork {knob.knob_name.data!r} options {knob.option_values}"
                )
        types = list(self.outputs.types)
        for index, option in enumerate(options):
            yielded = self.yielded(index)
            found = list(yielded.values.types) if yielded is not None else []
            if found != types:
                raise VerifyException(
                    f"fork.alternatives option {option!r} yields {len(found)} value(s) of "
                    f"types {found}; the op has results of types {types}"
                )


@irdl_op_definition
class YieldOp(IRDLOperation):
    """The values a region of a `fork.alternatives` stands for.

    fork.yield %a : tensor<1x2x8x16xf32>
    """

    name = "fork.yield"
    values = var_operand_def()
    traits = traits_def(IsTerminator(), HasParent(AlternativesOp))
    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[list(values)])


Fork = Dialect("fork", [SiteOp, KnobOp, AlternativesOp, YieldOp], [])
