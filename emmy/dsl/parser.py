"""Parses .emmy kernel declarations into syntax trees (emmy.dsl.ast); errors name
file:line:column.

lark parses the grammar (grammar.lark); `_Build` turns each rule's tree into its node, the
one place that reads the grammar's rule names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.tree import Meta

from emmy.base.errors import DslError
from emmy.dsl import ast
from emmy.dsl.ast import KernelDecl, names_read

GRAMMAR = Path(__file__).with_name("grammar.lark")
LAUNCH_ITEMS = ("grid", "block", "shared")

Literal = int | str


@dataclass(frozen=True)
class _KeyClause:
    names: tuple[tuple[str, Literal | None], ...]


@dataclass(frozen=True)
class _ExampleClause:
    bindings: tuple[tuple[str, Literal], ...]


@dataclass(frozen=True)
class _LaunchClause:
    items: tuple[tuple[Token, ast.Expr], ...]


def _position(item: object) -> ast.Position:
    if isinstance(item, Token):
        return item.line or 0, item.column or 0
    if isinstance(item, ast.Node):
        return item.at
    return ast.NOWHERE


def _at(meta: Meta, children: list) -> ast.Position:
    """Where a rule's text starts: its first token, kept out of its children or not."""
    if not getattr(meta, "empty", True):
        return meta.line, meta.column
    return next(
        (p for p in map(_position, children) if p != ast.NOWHERE),
        ast.NOWHERE,
    )


def _name(item: Token) -> ast.Name:
    return ast.Name(str(item), at=_position(item))


def _literal(value: Token) -> Literal:
    return int(value) if value.type == "SIGNED_INT" else str(value).strip('"')


def _fold(items: list) -> tuple[ast.Expr, tuple[tuple[ast.Operator, ast.Expr], ...]]:
    """`a op b op c` as its first operand and its (operator, operand) pairs."""
    first, *rest = items
    return first, tuple(
        (ast.Operator(str(op)), rhs) for op, rhs in zip(rest[::2], rest[1::2], strict=True)
    )


@v_args(meta=True)
class _Build(Transformer):
    """Each grammar rule's tree as its syntax-tree node (a rule that is a list, `args` or
    `dims`, as a tuple). `kernel` and `start` stay trees: `_kernel` assembles a
    declaration, whose errors are DslErrors rather than lark's wrapped ones."""

    # -- expressions
    def int_lit(self, meta, children):
        return ast.IntLit(int(children[0]), at=_at(meta, children))

    def float_lit(self, meta, children):
        return ast.FloatLit(str(children[0]), at=_at(meta, children))

    def name(self, meta, children):
        return _name(children[0])

    def neg(self, meta, children):
        return ast.Neg(children[0], at=_at(meta, children))

    def not_(self, meta, children):
        return ast.Not(children[0], at=_at(meta, children))

    def or_expr(self, meta, children):
        return ast.Or(tuple(children), at=_at(meta, children))

    def and_expr(self, meta, children):
        return ast.And(tuple(children), at=_at(meta, children))

    def cmp_expr(self, meta, children):
        lhs, op, rhs = children
        return ast.Compare(lhs, ast.Operator(str(op)), rhs, at=_at(meta, children))

    def sum_expr(self, meta, children):
        return ast.Sum(*_fold(children), at=_at(meta, children))

    def product(self, meta, children):
        return ast.Product(*_fold(children), at=_at(meta, children))

    def call(self, meta, children):
        function, args = children
        return ast.Call(str(function), args or (), at=_at(meta, children))

    def index(self, meta, children):
        tensor, indices = children
        return ast.Index(str(tensor), indices, at=_at(meta, children))

    def args(self, meta, children):
        return tuple(children)

    # -- statements
    def let_stmt(self, meta, children):
        targets, value = children
        return ast.Let(targets, value, at=_at(meta, children))

    def single_target(self, meta, children):
        return (_name(children[0]),)

    def tuple_target(self, meta, children):
        return tuple(map(_name, children))

    def var_stmt(self, meta, children):
        target, value = children
        return ast.Var(_name(target), value, at=_at(meta, children))

    def assign_stmt(self, meta, children):
        target, value = children
        return ast.Assign(_name(target), value, at=_at(meta, children))

    def store_stmt(self, meta, children):
        tensor, indices, value = children
        return ast.Store(_name(tensor), indices, value, at=_at(meta, children))

    def for_stmt(self, meta, children):
        index, start, stop, step, *rest = children
        width = rest.pop(0) if rest and isinstance(rest[0], ast.Expr) else None
        return ast.For(_name(index), start, stop, step, width, tuple(rest), at=_at(meta, children))

    def match_stmt(self, meta, children):
        subject, *arms = children
        return ast.Match(_name(subject), tuple(arms), at=_at(meta, children))

    def match_arm(self, meta, children):
        label, *body = children
        return ast.MatchArm(str(label), tuple(body), at=_at(meta, children))

    def if_stmt(self, meta, children):
        condition, *body = children
        return ast.If(condition, tuple(body), at=_at(meta, children))

    def sync_stmt(self, meta, children):
        return ast.Sync(at=_at(meta, children))

    def shared_stmt(self, meta, children):
        name, dtype, count = children
        return ast.SharedArray(_name(name), _name(dtype), count, at=_at(meta, children))

    def local_stmt(self, meta, children):
        name, dtype, count = children
        return ast.LocalArray(_name(name), _name(dtype), count, at=_at(meta, children))

    def call_stmt(self, meta, children):
        function, args = children
        return ast.CallStmt(_name(function), args or (), at=_at(meta, children))

    # -- the declaration's header
    def params(self, meta, children):
        return tuple(children)

    def param(self, meta, children):
        name, direction, dtype, dims, *suffix = children
        variadic = any(isinstance(t, Token) and t.type == "VARIADIC" for t in suffix)
        when = next((t for t in suffix if isinstance(t, ast.Expr)), None)
        return ast.Param(
            str(name),
            ast.Direction(str(direction)),
            str(dtype),
            dims,
            variadic,
            when,
            at=_at(meta, children),
        )

    def dims(self, meta, children):
        return tuple(map(str, children))

    def key_clause(self, meta, children):
        return _KeyClause(tuple(children))

    def key_name(self, meta, children):
        name, *default = children
        return str(name), _literal(default[0]) if default else None

    def example_clause(self, meta, children):
        return _ExampleClause(tuple(children))

    def binding(self, meta, children):
        name, value = children
        return str(name), _literal(value)

    def fork_clause(self, meta, children):
        name, default, *options = children
        where = options.pop() if options and isinstance(options[-1], ast.Expr) else None
        return ast.ForkDecl(str(name), default, tuple(options), where, at=_position(name))

    def int_option(self, meta, children):
        return int(children[0])

    def sym_option(self, meta, children):
        return str(children[0])

    def launch_clause(self, meta, children):
        return _LaunchClause(tuple(children))

    def launch_item(self, meta, children):
        name, value = children
        return name, value


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
    built = _Build().transform(tree)
    return [_kernel(path, node) for node in built.children]


def parse_file(path: str | Path) -> list[KernelDecl]:
    return parse_source(Path(path).read_text(), str(path))


def parse_expression(text: str, path: str = "<expression>") -> ast.Expr:
    """One expression in the kernel language, e.g. an elementwise chain of a problem key."""
    try:
        tree = _parser("expr").parse(text)
    except UnexpectedInput as error:
        raise _syntax_error(path, error) from None
    return _Build().transform(tree)


def _kernel(path: str, node: Tree) -> KernelDecl:
    # `_Build` made each child but the name: the parameters, then clauses and statements
    children: list[Any] = list(node.children)
    name, params, *rest = children
    decl = KernelDecl(str(name), path, node.meta.line, list(params), [])
    body: list[ast.Stmt] = []
    for item in rest:
        match item:
            case _KeyClause(names):
                for key_name, default in names:
                    decl.key.append(key_name)
                    if default is not None:
                        decl.key_defaults[key_name] = default
            case _ExampleClause(bindings):
                decl.example.update(bindings)
            case ast.ForkDecl():
                decl.forks.append(item)
            case _LaunchClause(items):
                for launch_name, value in items:
                    if str(launch_name) not in LAUNCH_ITEMS:
                        raise decl.error(
                            _name(launch_name),
                            f"unknown launch item {str(launch_name)!r}; one of {', '.join(LAUNCH_ITEMS)}",
                        )
                    decl.launch[str(launch_name)] = value
            case _:
                body.append(item)
    decl.body = tuple(body)
    _check_declaration(decl, _at(node.meta, node.children))
    return decl


def _check_declaration(decl: KernelDecl, at: ast.Position) -> None:
    def error(message: str) -> DslError:
        return DslError(decl.path, *at, message)

    if not decl.key:
        raise error(f"kernel {decl.name} declares no key")
    for param in decl.params:
        if param.when is None:
            continue
        # beside key names, a condition names symbols a key compares with (`layout == nk`)
        read = names_read(param.when)
        if not read & set(decl.key):
            raise error(f"parameter {param.name} depends on {min(read)!r}, which is not a key")
    for fork in decl.forks:
        if fork.default not in fork.options:
            raise decl.error(
                fork, f"default {fork.default!r} of fork {fork.name} is not among its options"
            )
        if len({type(o) for o in fork.options}) != 1:
            raise decl.error(fork, f"fork {fork.name} mixes integers and symbols")
    for required in ("grid", "block"):
        if required not in decl.launch:
            raise error(f"kernel {decl.name} has no launch {required}")
