"""Parses .emmy kernel declarations into `KernelDecl`s; errors name file:line:column."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from emmy.base.errors import DslError
from emmy.dsl.interpret import Condition
from emmy.dsl.nodes import subtree, token
from emmy.dsl.unparse import unparse

GRAMMAR = Path(__file__).with_name("grammar.lark")
LAUNCH_ITEMS = ("grid", "block", "shared")


@dataclass(frozen=True)
class Param:
    name: str
    direction: str  # "in" | "out"
    dtype: str  # a key name such as "T", or a storage type such as "i8"
    #: key names, or sizes (a pair of statistics per row: `f32[rows, 2]`)
    dims: tuple[str, ...]
    variadic: bool
    #: a key name (the parameter exists only where that key is `yes`) or a condition over
    #: the key (`split > 1`)
    when: Condition | None = None

    def shape(self, key: Mapping[str, object]) -> tuple[int, ...]:
        """Its shape at a key: each dim a key's value or a size; KeyError or ValueError
        where the key lacks one."""
        return tuple(int(d) if d.isdigit() else int(str(key[d])) for d in self.dims)


@dataclass(frozen=True)
class ForkDecl:
    name: str
    default: int | str
    options: tuple[int | str, ...]
    #: the constraint a config must satisfy (`where cols % vec == 0`), if any
    where: Condition | None
    line: int
    column: int

    @property
    def is_symbolic(self) -> bool:
        return isinstance(self.default, str)

    @cached_property
    def where_text(self) -> str | None:
        """The constraint as text, as a knob of the IR shows it to its readers."""
        return None if self.where is None else unparse(self.where.tree)


@dataclass(eq=False)
class KernelDecl:
    """Everything a kernel declaration says: signature, key, forks, launch and body. A
    declaration is itself alone (compared and hashed by identity): what is read from it
    once, such as its fork space, is kept per declaration."""

    name: str
    path: str
    line: int
    params: list[Param]
    key: list[str]
    #: keys a problem may leave out; a key at its default is left out of the canonical text
    key_defaults: dict[str, int | str] = field(default_factory=dict)
    example: dict[str, int | str] = field(default_factory=dict)
    forks: list[ForkDecl] = field(default_factory=list)
    launch: dict[str, Tree] = field(default_factory=dict)
    body: list[Tree] = field(default_factory=list)

    def fork(self, name: str) -> ForkDecl | None:
        return next((f for f in self.forks if f.name == name), None)

    def error(self, node: Tree | Token | None, message: str) -> DslError:
        line, column = position(node) if node is not None else (self.line, 1)
        return DslError(self.path, line, column, message)


def position(node: Tree | Token) -> tuple[int, int]:
    if isinstance(node, Token):
        return node.line or 0, node.column or 0
    if getattr(node.meta, "empty", True):
        for child in node.children:
            if isinstance(child, (Tree, Token)):
                return position(child)
        return 0, 0
    return node.meta.line, node.meta.column


@cache
def _parser(start: str) -> Lark:
    return Lark(
        GRAMMAR.read_text(), start=start, parser="lalr", propagate_positions=True, cache=True
    )


def _syntax_error(path: str, error: UnexpectedInput) -> DslError:
    line, column = getattr(error, "line", 0) or 0, getattr(error, "column", 0) or 0
    if isinstance(error, UnexpectedToken):
        found = "end of file" if error.token.type == "$END" else repr(str(error.token))
        expected = ", ".join(sorted(error.expected)[:6])
        message = f"unexpected {found}; expected one of: {expected}"
    elif isinstance(error, UnexpectedCharacters):
        message = f"unexpected character {error.char!r}"
    elif isinstance(error, UnexpectedEOF):
        message = "unexpected end of file"
    else:
        message = str(error).splitlines()[0]
    return DslError(path, line, column, message)


def parse_source(text: str, path: str = "<string>") -> list[KernelDecl]:
    """All kernel declarations of a .emmy source text."""
    try:
        tree = _parser("start").parse(text)
    except UnexpectedInput as error:
        raise _syntax_error(path, error) from None
    return [_kernel(path, subtree(node)) for node in tree.children]


def parse_file(path: str | Path) -> list[KernelDecl]:
    return parse_source(Path(path).read_text(), str(path))


def parse_expression(text: str, path: str = "<expression>") -> Tree:
    """One expression in the kernel language, e.g. an elementwise chain of a problem key."""
    try:
        return _parser("expr").parse(text)
    except UnexpectedInput as error:
        raise _syntax_error(path, error) from None


def _option(node: Tree) -> int | str:
    value = token(node.children[0])
    return int(value) if node.data == "int_option" else str(value)


def _literal(value: Token) -> int | str:
    return int(value) if value.type == "SIGNED_INT" else str(value).strip('"')


def _kernel(path: str, node: Tree) -> KernelDecl:
    name, params, *rest = node.children
    decl = KernelDecl(str(name), path, node.meta.line, [], [])
    for param in params.children:
        pname, direction, dtype, dims, *suffix = param.children
        variadic = any(isinstance(t, Token) and t.type == "VARIADIC" for t in suffix)
        # a key name (the parameter exists where it is `yes`) or a condition (`split > 1`)
        when = next((Condition(t) for t in suffix if isinstance(t, Tree)), None)
        decl.params.append(
            Param(
                str(pname),
                str(direction),
                str(dtype),
                tuple(map(str, dims.children)),
                variadic,
                when,
            )
        )
    for item in rest:
        match item.data:
            case "key_clause":
                for key_name in item.children:
                    kname, *default = key_name.children
                    decl.key.append(str(kname))
                    if default:
                        decl.key_defaults[str(kname)] = _literal(token(default[0]))
            case "example_clause":
                for binding in item.children:
                    bname, value = binding.children
                    decl.example[str(bname)] = _literal(token(value))
            case "fork_clause":
                fname, default, *options = item.children
                line, column = position(token(fname))
                where = (
                    Condition(options.pop())
                    if options
                    and isinstance(options[-1], Tree)
                    and options[-1].data not in ("int_option", "sym_option")
                    else None
                )
                decl.forks.append(
                    ForkDecl(
                        str(fname),
                        _option(default),
                        tuple(_option(o) for o in options),
                        where,
                        line,
                        column,
                    )
                )
            case "launch_clause":
                for launch_item in item.children:
                    lname, expr = launch_item.children
                    if str(lname) not in LAUNCH_ITEMS:
                        raise decl.error(
                            lname,
                            f"unknown launch item {str(lname)!r}; one of {', '.join(LAUNCH_ITEMS)}",
                        )
                    decl.launch[str(lname)] = expr
            case _:
                decl.body.append(item)
    _check_declaration(decl, node)
    return decl


def _check_declaration(decl: KernelDecl, node: Tree) -> None:
    if not decl.key:
        raise decl.error(node, f"kernel {decl.name} declares no key")
    for param in decl.params:
        if param.when is None:
            continue
        # beside key names, a condition names symbols a key compares with (`layout == nk`)
        read = param.when.names
        if not set(read) & set(decl.key):
            raise decl.error(
                node, f"parameter {param.name} depends on {min(read)!r}, which is not a key"
            )
    for fork in decl.forks:
        if fork.default not in fork.options:
            raise DslError(
                decl.path,
                fork.line,
                fork.column,
                f"default {fork.default!r} of fork {fork.name} is not among its options",
            )
        if len({type(o) for o in fork.options}) != 1:
            raise DslError(
                decl.path, fork.line, fork.column, f"fork {fork.name} mixes integers and symbols"
            )
    for required in ("grid", "block"):
        if required not in decl.launch:
            raise decl.error(node, f"kernel {decl.name} has no launch {required}")
    unknown = set(decl.launch) - {"grid", "block", "shared"}
    if unknown:
        raise decl.error(
            decl.launch[sorted(unknown)[0]], f"unknown launch item {sorted(unknown)[0]!r}"
        )
