"""emmy.fork: the choice points of the compiler.

A `fork.site` is one instantiated kernel family for one problem key; it holds the forks of
that site, the kernel and its launch. Its kind says what it stands for: a kernel of its
own, a host-level choice (one fork that picks an option of a `fork.alternatives`), or a
call the device's host runs (the vendor library). A `fork.knob` is a named choice among
integer or symbolic options; its i32 result (the option's value, or a symbol's index) is
used by the kernel body, so the IR is valid before any choice is made. `fork.alternatives` picks one of
several regions by a knob. Forks have side effects as the rewriter knows, so CSE
never merges two of them and DCE never deletes an unresolved one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    IntegerAttr,
    NoneAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import (
    Attribute,
    Block,
    Data,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SpacedOpaqueSyntaxAttribute,
    SSAValue,
)
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_attr_def,
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
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import (
    HasParent,
    IsTerminator,
    NoTerminator,
    SymbolOpInterface,
    SymbolTable,
    SymbolUserOpInterface,
)
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum  # what EnumAttribute takes

from emmy.base.errors import EmmyError
from emmy.base.problem_key import ProblemKey, SiteRef
from emmy.dialects.records import EvidenceAttr, PlainValue, RecordedAttr
from emmy.dsl.ast import Expr
from emmy.dsl.parser import parse_expression
from emmy.dsl.unparse import unparse

Option = int | str
T = TypeVar("T")


def option_attr(value: Option) -> Attribute:
    return StringAttr(value) if isinstance(value, str) else IntegerAttr(value, i64)


def option_value(attr: Attribute) -> Option:
    if isinstance(attr, StringAttr):
        return attr.data
    assert isinstance(attr, IntegerAttr)
    return attr.value.data


def _print_option(printer: Printer, value: Option) -> None:
    printer.print_string(f'"{value}"' if isinstance(value, str) else str(value))


def _parse_option(parser: AttrParser) -> Option:
    text = parser.parse_optional_str_literal()
    return text if text is not None else parser.parse_integer()


class SiteKind(StrEnum):
    """What a site stands for, which decides what it may hold and who may name it."""

    #: a kernel of its own, that `kernel.call` runs
    KERNEL = "kernel"
    #: one fork picking an option of the host-level `fork.alternatives` that names the site
    CHOICE = "choice"
    #: an operation the device's host runs (the vendor library), named by `kernel.call`
    HOST_CALL = "host_call"


@irdl_attr_definition
class SiteKindAttr(EnumAttribute[SiteKind], SpacedOpaqueSyntaxAttribute):
    """The kind of a site: `#fork<site_kind choice>`."""

    name = "fork.site_kind"


def _parse_entries(parser: AttrParser, parse_value: Callable[[], T]) -> list[tuple[str, T]]:
    """`<name = value, ...>`, in order (`<>` or nothing for none): a record's fields."""

    def entry() -> tuple[str, T]:
        name = parser.parse_identifier_or_str_literal()
        parser.parse_punctuation("=")
        return name, parse_value()

    entries = parser.parse_optional_comma_separated_list(parser.Delimiter.ANGLE, entry)
    return entries or []


def _print_entries(
    printer: Printer,
    entries: Iterable[tuple[str | StringAttr, T]],
    print_value: Callable[[T], None],
) -> None:
    def entry(item: tuple[str | StringAttr, T]) -> None:
        printer.print_identifier_or_string_literal(item[0])
        printer.print_string(" = ")
        print_value(item[1])

    with printer.in_angle_brackets():
        printer.print_list(entries, entry)


def _check_names(record: str, what: str, names: ArrayAttr[StringAttr], values: ArrayAttr) -> None:
    """The names of a record's fields are unique, one per value."""
    if len(names) != len(values):
        raise VerifyException(f"{record} has {len(names)} {what} names but {len(values)} values")
    seen: set[str] = set()
    for name in names:
        if name.data in seen:
            raise VerifyException(f"{record} names {what} {name.data!r} twice")
        seen.add(name.data)


@irdl_attr_definition
class ConfigAttr(ParametrizedAttribute):
    """Each fork's value, in the forks' order: an integer or a symbol.

    #fork.config<vec = 4, algo = "online">
    """

    name = "fork.config"
    forks: ArrayAttr[StringAttr]
    values: ArrayAttr[IntegerAttr[I64] | StringAttr]

    def __init__(self, values: Mapping[str, Option]):
        super().__init__(
            ArrayAttr([StringAttr(n) for n in values]),
            ArrayAttr([option_attr(v) for v in values.values()]),
        )

    def as_dict(self) -> dict[str, Option]:
        return {n.data: option_value(v) for n, v in zip(self.forks, self.values, strict=True)}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        entries = _parse_entries(parser, lambda: option_attr(_parse_option(parser)))
        return [ArrayAttr([StringAttr(n) for n, _ in entries]), ArrayAttr([v for _, v in entries])]

    def print_parameters(self, printer: Printer) -> None:
        _print_entries(printer, self.as_dict().items(), lambda v: _print_option(printer, v))

    def verify(self) -> None:
        _check_names("#fork.config", "fork", self.forks, self.values)


@irdl_attr_definition
class ProvenanceAttr(ParametrizedAttribute):
    """Where each fork's value came from: "pin", or the oracle that decided the site.

    #fork.provenance<vec = "db", algo = "pin">
    """

    name = "fork.provenance"
    forks: ArrayAttr[StringAttr]
    sources: ArrayAttr[StringAttr]

    def __init__(self, sources: Mapping[str, str]):
        super().__init__(
            ArrayAttr([StringAttr(n) for n in sources]),
            ArrayAttr([StringAttr(s) for s in sources.values()]),
        )

    def as_dict(self) -> dict[str, str]:
        return {n.data: s.data for n, s in zip(self.forks, self.sources, strict=True)}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        entries = _parse_entries(parser, lambda: StringAttr(parser.parse_str_literal()))
        return [ArrayAttr([StringAttr(n) for n, _ in entries]), ArrayAttr([s for _, s in entries])]

    def print_parameters(self, printer: Printer) -> None:
        _print_entries(printer, zip(self.forks, self.sources, strict=True), printer.print_attribute)

    def verify(self) -> None:
        _check_names("#fork.provenance", "fork", self.forks, self.sources)


def _as_record(value: EvidenceAttr | Mapping[str, PlainValue]) -> EvidenceAttr:
    return value if isinstance(value, EvidenceAttr) else RecordedAttr(value)


def _listed(record: EvidenceAttr) -> dict[str, PlainValue]:
    """A record's values as the report lists them: every dict's keys sorted, the order it
    has always listed them in."""
    return {k: _sorted_json(v) for k, v in sorted(record.to_json().items())}


def _sorted_json(value: PlainValue) -> PlainValue:
    if isinstance(value, dict):
        return {k: _sorted_json(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_json(v) for v in value]
    return value


@irdl_attr_definition
class DecisionAttr(ParametrizedAttribute):
    """How resolve-forks decided a site: the oracle (a string: a package may add oracles),
    its evidence, and the runner-up where it weighed one, as typed records (emmy.dialects.
    evidence; an oracle of another package records its own as `#fork.recorded`).

        #fork.decision<oracle = "db", evidence = #evidence.db<rows = [3 : i64], ...>,
                       runner_up = #evidence.measured_runner_up<...>>
    """

    name = "fork.decision"
    oracle: StringAttr
    evidence: EvidenceAttr
    runner_up: EvidenceAttr | NoneAttr

    def __init__(
        self,
        oracle: str,
        evidence: EvidenceAttr | Mapping[str, PlainValue],
        runner_up: EvidenceAttr | Mapping[str, PlainValue] | None = None,
    ):
        super().__init__(
            StringAttr(oracle),
            _as_record(evidence),
            NoneAttr() if runner_up is None else _as_record(runner_up),
        )

    def evidence_value(self) -> dict[str, PlainValue]:
        return _listed(self.evidence)

    def runner_up_value(self) -> dict[str, PlainValue] | None:
        return None if isinstance(self.runner_up, NoneAttr) else _listed(self.runner_up)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        def field(name: str) -> Attribute:
            parser.parse_keyword(name)
            parser.parse_punctuation("=")
            return parser.parse_attribute()

        with parser.in_angle_brackets():
            oracle = field("oracle")
            parser.parse_punctuation(",")
            evidence = field("evidence")
            runner_up = NoneAttr()
            if parser.parse_optional_punctuation(","):
                runner_up = field("runner_up")
        return [oracle, evidence, runner_up]

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string("oracle = ")
            printer.print_attribute(self.oracle)
            printer.print_string(", evidence = ")
            printer.print_attribute(self.evidence)
            if not isinstance(self.runner_up, NoneAttr):
                printer.print_string(", runner_up = ")
                printer.print_attribute(self.runner_up)

    def verify(self) -> None:
        if not self.oracle.data:
            raise VerifyException("#fork.decision names no oracle")


@irdl_attr_definition
class ProblemKeyAttr(Data[ProblemKey]):
    """The problem key of a site, typed (emmy.base.problem_key: integers, flags, input kinds,
    chains); it prints as the key's canonical text, byte for byte:

        #fork.key<"rows=4,cols=1000,T=f32,inputs=full,fn=(in0 * 0.5)">

    (a site shows the text alone: `fork.site @s "softmax" "rows=4,..."`)."""

    name = "fork.key"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> ProblemKey:
        with parser.in_angle_brackets():
            return parse_problem_key(parser)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(f'<"{self.data}">')

    def verify(self) -> None:
        if not isinstance(self.data, ProblemKey):
            raise VerifyException(f"#fork.key holds a ProblemKey, not {self.data!r}")


def parse_written(parser: AttrParser, read: Callable[[str], T]) -> T:
    """A value written as its text (a string literal); text `read` refuses (an EmmyError)
    is a parse error at the literal, its one line."""
    start = parser.pos
    text = parser.parse_str_literal()
    try:
        return read(text)
    except EmmyError as error:
        parser.raise_error(str(error), start, parser.pos)


def parse_problem_key(parser: AttrParser) -> ProblemKey:
    """A problem key written as its text; a malformed one is a parse error."""
    return parse_written(parser, ProblemKey.parse)


@irdl_attr_definition
class ConstraintAttr(Data[Expr]):
    """A fork's constraint, as the kernel language's syntax tree (emmy.dsl.ast), which the
    fork space evaluates; it prints as the expression's text:

        #fork.constraint<"cols % vec == 0">

    (a knob shows the text alone: `fork.knob "vec" [1, 2, 4] default 4 where "..."`)."""

    name = "fork.constraint"

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> Expr:
        with parser.in_angle_brackets():
            return parse_constraint(parser)

    def print_parameter(self, printer: Printer) -> None:
        printer.print_string(f'<"{self.text}">')

    @property
    def text(self) -> str:
        """The expression as the kernel language writes it."""
        return unparse(self.data)

    def verify(self) -> None:
        if not isinstance(self.data, Expr):
            raise VerifyException(f"#fork.constraint holds an expression, not {self.data!r}")


def parse_constraint(parser: AttrParser) -> Expr:
    """A constraint written as its text; a malformed one is a parse error."""
    return parse_written(parser, lambda text: parse_expression(text, "<fork constraint>"))


@irdl_attr_definition
class PathCallAttr(ParametrizedAttribute):
    """One kernel call of an option of a host-level choice, with what a bench needs to run
    it alone: the family, key and config of its site and the types of its tensors.

        #fork.path_call<"softmax", "rows=12,cols=6,T=f32", #fork.config<vec = 2>,
                        [tensor<12x6xf32>], [tensor<12x6xf32>]>
    """

    name = "fork.path_call"
    family: StringAttr
    key: ProblemKeyAttr
    config: ConfigAttr
    inputs: ArrayAttr[TensorType[Attribute]]
    outputs: ArrayAttr[TensorType[Attribute]]

    @property
    def site(self) -> SiteRef:
        return SiteRef(self.family.data, self.key.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            family = StringAttr(parser.parse_str_literal())
            parser.parse_punctuation(",")
            key = ProblemKeyAttr(parse_problem_key(parser))
            rest = []
            for _ in range(3):  # the config, the inputs, the outputs
                parser.parse_punctuation(",")
                rest.append(parser.parse_attribute())
        return [family, key, *rest]

    def print_parameters(self, printer: Printer) -> None:
        # the key as its text alone, as a site shows it
        printer.print_string(f'<"{self.family.data}", "{self.key.data}", ')
        printer.print_list((self.config, self.inputs, self.outputs), printer.print_attribute)
        printer.print_string(">")


@irdl_attr_definition
class PathsAttr(ParametrizedAttribute):
    """The options of a host-level choice, each as the kernel calls it makes, in order.

    #fork.paths<fused = [#fork.path_call<"attention", ...>],
                unfused = [#fork.path_call<"matmul", ...>, ...]>
    """

    name = "fork.paths"
    options: ArrayAttr[StringAttr]
    calls: ArrayAttr[ArrayAttr[PathCallAttr]]

    def __init__(self, paths: Mapping[str, Sequence[PathCallAttr]]):
        super().__init__(
            ArrayAttr([StringAttr(o) for o in paths]),
            ArrayAttr([ArrayAttr(calls) for calls in paths.values()]),
        )

    def as_dict(self) -> dict[str, list[PathCallAttr]]:
        return {o.data: list(c) for o, c in zip(self.options, self.calls, strict=True)}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        entries = _parse_entries(parser, parser.parse_attribute)
        return [ArrayAttr([StringAttr(n) for n, _ in entries]), ArrayAttr([c for _, c in entries])]

    def print_parameters(self, printer: Printer) -> None:
        _print_entries(printer, zip(self.options, self.calls, strict=True), printer.print_attribute)

    def verify(self) -> None:
        _check_names("#fork.paths", "option", self.options, self.calls)


def site_named(op: Operation, ref: SymbolRefAttr) -> SiteOp:
    """The site a symbol of `op` names; a verify error naming the symbol otherwise."""
    name = ref.string_value()
    try:
        found = SymbolTable.lookup_symbol(op, ref)
    except ValueError:  # no symbol table holds `op`: nothing to resolve the name in
        found = None
    if found is None:
        raise VerifyException(f"{op.name} names @{name}, which is not defined")
    if not isinstance(found, SiteOp):
        raise VerifyException(f"{op.name} names @{name}, which is a {found.name}, not a fork.site")
    return found


@irdl_op_definition
class SiteOp(IRDLOperation):
    """One kernel family instantiated for one problem key (a typed `#fork.key`, shown as
    its text; the passes read its values, never its text).

    fork.site @softmax_0 "softmax" "T=f32,cols=1000,rows=4" {
      %vec = fork.knob "vec" [1, 2, 4, 8] default 4 where "cols % vec == 0"
      kernel.func @softmax_0(...) { ... }
      kernel.launch @softmax_0 grid %g block %b smem %s
    }

    A site of another kind than `kernel` says so before its name, and holds no kernel:

    fork.site choice @attention_path_0 "attention_path" "bh=4,..." {
      %path = fork.knob "path" ["fused", "unfused"] default "fused"
    }
    fork.site host_call @vendor_matmul_3 "vendor_matmul" "batch=1,m=8,..." {
    }

    The passes record on it, as typed attributes, how its forks were decided (`decision`:
    the oracle, its evidence and runner-up; `provenance`: each fork's source), its `config`
    once specialised, and for a choice the kernel calls of every option (`paths`):

    fork.site @softmax_1 "softmax" "n=4" attributes {
        decision = #fork.decision<oracle = "db", evidence = #evidence.db<...>>,
        config = #fork.config<vec = 4, algo = "online">,
        provenance = #fork.provenance<vec = "db", algo = "pin">} {
    }
    """

    name = "fork.site"
    sym_name = prop_def(StringAttr)
    kind = prop_def(SiteKindAttr, default_value=SiteKindAttr(SiteKind.KERNEL))
    family = prop_def(StringAttr)
    key = prop_def(ProblemKeyAttr)
    #: the decision of resolve-forks
    decision = opt_attr_def(DecisionAttr)
    #: each fork's value once specialised
    config = opt_attr_def(ConfigAttr)
    #: where each fork's value came from
    provenance = opt_attr_def(ProvenanceAttr)
    #: a choice's options, each as the `#fork.path_call`s it makes
    paths = opt_attr_def(PathsAttr)
    body = region_def("single_block")
    traits = traits_def(SymbolOpInterface(), NoTerminator())

    def __init__(
        self,
        name: str,
        family: str,
        key: ProblemKey,
        body: Region | None = None,
        kind: SiteKind = SiteKind.KERNEL,
    ):
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "kind": SiteKindAttr(kind),
                "family": StringAttr(family),
                "key": ProblemKeyAttr(key),
            },
            regions=[body or Region(Block())],
        )

    @property
    def ref(self) -> SiteRef:
        """What records name this site by: its family and typed key."""
        return SiteRef(self.family.data, self.key.data)

    @property
    def site_kind(self) -> SiteKind:
        return self.kind.data

    def knobs(self) -> list[KnobOp]:
        return [op for op in self.body.block.ops if isinstance(op, KnobOp)]

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        if self.site_kind != SiteKind.KERNEL:
            printer.print_string(f"{self.site_kind.value} ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(f' "{self.family.data}" "{self.key.data}"')
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)

    @classmethod
    def parse(cls, parser: Parser) -> SiteOp:
        kind = SiteKind.KERNEL
        start = parser.pos
        kind_name = parser.parse_optional_identifier()
        if kind_name is not None:
            if kind_name not in set(SiteKind):
                known = ", ".join(SiteKind)
                parser.raise_error(
                    f"unknown site kind {kind_name!r} (kinds: {known})", start, parser.pos
                )
            kind = SiteKind(kind_name)
        name = parser.parse_symbol_name().data
        family = parser.parse_str_literal()
        key = parse_problem_key(parser)
        attributes = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region()
        if not body.blocks:
            body.add_block(Block())
        site = cls(name, family, key, body, kind)
        if attributes is not None:
            site.attributes |= attributes.data
        return site

    def _verify_kind(self, where: str, forks: list[str]) -> None:
        """What a site holds follows from its kind."""
        if self.site_kind != SiteKind.KERNEL:
            kernel = next(
                (op for op in self.body.block.ops if op.has_trait(SymbolOpInterface)), None
            )
            if kernel is not None:
                raise VerifyException(
                    f"{where} is a {self.site_kind.value} site, which holds no kernel, "
                    f"but it holds {kernel.name}"
                )
        if self.site_kind == SiteKind.CHOICE and len(forks) > 1:
            raise VerifyException(f"{where} is a choice site, of one fork, but it has {forks}")
        if self.site_kind == SiteKind.HOST_CALL and forks:
            raise VerifyException(f"{where} is a host_call site, which has no forks: {forks}")
        if self.paths is not None and self.site_kind != SiteKind.CHOICE:
            raise VerifyException(f"{where} has paths, but only a choice site has options")

    def _verify_records(self, where: str) -> None:
        """The records of the passes agree with one another."""
        if self.config is not None and self.provenance is not None:
            configured = list(self.config.as_dict())
            sourced = list(self.provenance.as_dict())
            if configured != sourced:
                raise VerifyException(
                    f"provenance of {where} names forks {sourced}, its config {configured}"
                )
        if self.config is not None and self.paths is not None:
            options = [o.data for o in self.paths.options]
            for fork_name, value in self.config.as_dict().items():
                if value not in options:
                    raise VerifyException(
                        f"config of {where} picks {fork_name} = {value!r}, which is not one "
                        f"of its paths {options}"
                    )

    def verify_(self) -> None:
        names = [k.knob_name.data for k in self.knobs()]
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise VerifyException(f"fork.site has two forks named {sorted(duplicates)[0]!r}")
        where = f"fork.site @{self.sym_name.data}"
        self._verify_kind(where, names)
        self._verify_records(where)


@irdl_op_definition
class KnobOp(IRDLOperation):
    """A named choice among options; its result is the option (a symbol's index for symbols).

        %vec = fork.knob "vec" [1, 2, 4, 8] default 4 where "cols % vec == 0"
        %algo = fork.knob "algo" ["two_pass", "online"] default "two_pass"

    After resolution it carries the chosen value and where the choice came from ("pin", or
    the oracle that decided its site):

        %vec = fork.knob "vec" [1, 2, 4, 8] default 4 = 2 by "pin"
    """

    name = "fork.knob"
    knob_name = prop_def(StringAttr, prop_name="name")
    options = prop_def(ArrayAttr)
    default = prop_def(Attribute)
    constraint = opt_prop_def(ConstraintAttr)
    value = opt_prop_def(Attribute)
    provenance = opt_prop_def(StringAttr)
    result = result_def(i32)

    def __init__(
        self,
        name: str,
        options: Sequence[Option],
        default: Option,
        constraint: Expr | None = None,
    ):
        properties: dict[str, Attribute] = {
            "name": StringAttr(name),
            "options": ArrayAttr([option_attr(o) for o in options]),
            "default": option_attr(default),
        }
        if constraint is not None:
            properties["constraint"] = ConstraintAttr(constraint)
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

    def resolve(self, value: Option, source: str) -> None:
        self.value = option_attr(value)
        self.provenance = StringAttr(source)

    def print(self, printer: Printer) -> None:
        printer.print_string(f' "{self.knob_name.data}" [')
        printer.print_list(self.option_values, lambda o: _print_option(printer, o))
        printer.print_string("] default ")
        _print_option(printer, option_value(self.default))
        if self.constraint is not None:
            printer.print_string(f' where "{self.constraint.text}"')
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
            constraint = parse_constraint(parser)
        op = cls(name, options, default, constraint)
        if parser.parse_optional_punctuation("="):
            op.value = option_attr(_parse_option(parser))
        if parser.parse_optional_keyword("by"):
            op.provenance = StringAttr(parser.parse_str_literal())
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


class ChosenBySite(SymbolUserOpInterface):
    """A host-level `fork.alternatives` names a choice site, whose fork has its options."""

    def verify(self, op: Operation) -> None:
        assert isinstance(op, AlternativesOp)
        if op.site is None:
            return  # chosen by a knob of its kernel's site
        site = site_named(op, op.site)
        if site.site_kind != SiteKind.CHOICE:
            raise VerifyException(
                f"fork.alternatives names @{site.sym_name.data}, a {site.site_kind.value} "
                "site, not a choice site"
            )
        options = [n.data for n in op.names]
        for knob in site.knobs():  # none once specialised
            if knob.option_values != options:
                raise VerifyException(
                    f"fork.alternatives options {options} differ from fork "
                    f"{knob.knob_name.data!r} options {knob.option_values} of @{site.sym_name.data}"
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

    In a host function, chosen by the fork of the choice site it names (a site of its own,
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
    traits = traits_def(NoTerminator(), ChosenBySite())

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


Fork = Dialect(
    "fork",
    [SiteOp, KnobOp, AlternativesOp, YieldOp],
    [
        SiteKindAttr,
        ProblemKeyAttr,
        ConstraintAttr,
        ConfigAttr,
        ProvenanceAttr,
        DecisionAttr,
        RecordedAttr,
        PathCallAttr,
        PathsAttr,
    ],
)
