"""The kernel language's syntax tree: what the parser (emmy.dsl.parser) makes of a .emmy
file, what lowering (emmy.sites.lower) and the interpreter (emmy.dsl.interpret) walk, and
what a knob's constraint holds in the IR (`fork.knob ... where "cols % vec == 0"`).

    fork vec = 4 in [1, 2, 4, 8] where cols % vec == 0;
      -> ForkDecl("vec", 4, (1, 2, 4, 8),
                  Compare(Product(Name("cols"), ((Operator.MOD, Name("vec")),)),
                          Operator.EQ, IntLit(0)))

Every node is a frozen dataclass, equal and hashable by what it says, never by where it
was written: `at`, the line and column its errors name, is left out of both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from emmy.base.errors import DslError

#: a node's line and column in its source, 1-based (0, 0 where it has none)
Position = tuple[int, int]
NOWHERE: Position = (0, 0)


@dataclass(frozen=True)
class Node:
    at: Position = field(default=NOWHERE, compare=False, repr=False, kw_only=True)


class Operator(StrEnum):
    """The kernel language's infix operators, spelled as it spells them."""

    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    MOD = "%"
    EQ = "=="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


# -- expressions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Expr(Node):
    """An expression: an integer of the kernel's index type, an f32, or a condition."""


@dataclass(frozen=True)
class IntLit(Expr):
    value: int


@dataclass(frozen=True)
class FloatLit(Expr):
    #: the literal as written (`1e-5`, `0.7071067811865476`), which prints it back
    text: str

    @property
    def value(self) -> float:
        return float(self.text)


@dataclass(frozen=True)
class Name(Expr):
    """A key name, a fork, a parameter, a bound value, or a symbol (`online`, `bf16`)."""

    id: str


@dataclass(frozen=True)
class Neg(Expr):
    operand: Expr


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr


@dataclass(frozen=True)
class Infix(Expr):
    """`first op rhs op rhs ...` at one precedence level, applied from the left."""

    first: Expr
    rest: tuple[tuple[Operator, Expr], ...]


@dataclass(frozen=True)
class Sum(Infix):
    """`a + b - c`"""


@dataclass(frozen=True)
class Product(Infix):
    """`a * b / c % d`"""


@dataclass(frozen=True)
class Compare(Expr):
    lhs: Expr
    op: Operator
    rhs: Expr


@dataclass(frozen=True)
class Logical(Expr):
    """Conditions joined by one connective, evaluated from the left."""

    operands: tuple[Expr, ...]


@dataclass(frozen=True)
class And(Logical):
    """`a && b && c`"""


@dataclass(frozen=True)
class Or(Logical):
    """`a || b`"""


@dataclass(frozen=True)
class Call(Expr):
    """`min(a, b)`, `group_reduce(sum, v, group, reduction)`, `fn(i)`."""

    function: str
    args: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class Index(Expr):
    """`x[row, col]`: an element of a tensor parameter or an array."""

    tensor: str
    indices: tuple[Expr, ...]


def children(expr: Expr) -> Iterator[Expr]:
    """The expressions directly inside `expr`."""
    match expr:
        case Neg(operand) | Not(operand):
            yield operand
        case Infix(first, rest):
            yield first
            yield from (rhs for _, rhs in rest)
        case Compare(lhs, _, rhs):
            yield lhs
            yield rhs
        case Logical(operands):
            yield from operands
        case Call(_, args):
            yield from args
        case Index(_, indices):
            yield from indices
        case _:
            return  # a literal or a name holds no expression


def walk(expr: Expr) -> Iterator[Expr]:
    """`expr` and every expression inside it, each before those inside it, left to right."""
    yield expr
    for child in children(expr):
        yield from walk(child)


def names_read(expr: Expr) -> set[str]:
    """The names an expression reads (a call's function and an index's tensor are not)."""
    return {node.id for node in walk(expr) if isinstance(node, Name)}


def renamed(expr: Expr, names: Mapping[str, str]) -> Expr:
    """The expression with each name in `names` replaced, all at once."""
    match expr:
        case Name(id):
            return Name(names.get(id, id), at=expr.at)
        case Neg(operand):
            return Neg(renamed(operand, names), at=expr.at)
        case Not(operand):
            return Not(renamed(operand, names), at=expr.at)
        case Infix(first, rest):
            moved = tuple((op, renamed(rhs, names)) for op, rhs in rest)
            return type(expr)(renamed(first, names), moved, at=expr.at)
        case Compare(lhs, op, rhs):
            return Compare(renamed(lhs, names), op, renamed(rhs, names), at=expr.at)
        case Logical(operands):
            return type(expr)(tuple(renamed(o, names) for o in operands), at=expr.at)
        case Call(function, args):
            return Call(function, tuple(renamed(a, names) for a in args), at=expr.at)
        case Index(tensor, indices):
            return Index(tensor, tuple(renamed(i, names) for i in indices), at=expr.at)
        case _:
            return expr  # a literal


# -- statements ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stmt(Node):
    """A statement of a kernel's body."""


@dataclass(frozen=True)
class Let(Stmt):
    """`let a = e;` or `let (a, b) = group_reduce(...);`"""

    targets: tuple[Name, ...]
    value: Expr


@dataclass(frozen=True)
class Var(Stmt):
    """`var acc = 0.0;`: a name `Assign` may rebind."""

    target: Name
    value: Expr


@dataclass(frozen=True)
class Assign(Stmt):
    target: Name
    value: Expr


@dataclass(frozen=True)
class Store(Stmt):
    """`y[row, col] = e;`"""

    tensor: Name
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class For(Stmt):
    """`for i in range(start, stop, step) width w { ... }`"""

    index: Name
    start: Expr
    stop: Expr
    step: Expr
    #: the elements one iteration covers, for vector access (1 where not written)
    width: Expr | None
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class MatchArm(Node):
    #: an option of the fork, a value of the key, or `_`
    label: str
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Match(Stmt):
    """`match algo { online => { ... }, two_pass => { ... } }`"""

    subject: Name
    arms: tuple[MatchArm, ...]


@dataclass(frozen=True)
class If(Stmt):
    condition: Expr
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Sync(Stmt):
    """`sync();`: a barrier of the block's threads."""


@dataclass(frozen=True)
class ArrayDecl(Stmt):
    """An array of `count` elements of `dtype` (a storage type, or a key name's)."""

    name: Name
    dtype: Name
    count: Expr


@dataclass(frozen=True)
class SharedArray(ArrayDecl):
    """`shared tile: f32[n];`: in the block's shared memory"""


@dataclass(frozen=True)
class LocalArray(ArrayDecl):
    """`local acc: f32[n];`: a thread's own"""


@dataclass(frozen=True)
class CallStmt(Stmt):
    """`mma(acc, 0, a, 0, b, 0);`: an intrinsic called for what it does."""

    function: Name
    args: tuple[Expr, ...]


def assigned_names(body: tuple[Stmt, ...]) -> set[str]:
    """The names `body` assigns, in its nested statements too."""
    names: set[str] = set()
    for stmt in body:
        match stmt:
            case Assign(target):
                names.add(target.id)
            case For(body=inner) | If(body=inner):
                names |= assigned_names(inner)
            case Match(arms=arms):
                for arm in arms:
                    names |= assigned_names(arm.body)
            case _:
                pass  # a statement that holds none
    return names


# -- declarations --------------------------------------------------------------------------


class Direction(StrEnum):
    IN = "in"
    OUT = "out"


@dataclass(frozen=True)
class Param(Node):
    name: str
    direction: Direction
    dtype: str  # a key name such as "T", or a storage type such as "i8"
    #: key names, or sizes (a pair of statistics per row: `f32[rows, 2]`)
    dims: tuple[str, ...]
    variadic: bool
    #: a key name (the parameter exists only where that key is `yes`) or a condition over
    #: the key (`split > 1`)
    when: Expr | None = None

    def shape(self, key: Mapping[str, object]) -> tuple[int, ...]:
        """Its shape at a key: each dim a key's value or a size; KeyError or ValueError
        where the key lacks one."""
        return tuple(int(d) if d.isdigit() else int(str(key[d])) for d in self.dims)


@dataclass(frozen=True)
class ForkDecl(Node):
    """`fork vec = 4 in [1, 2, 4, 8] where cols % vec == 0;` (`at` is its name's place)."""

    name: str
    default: int | str
    options: tuple[int | str, ...]
    #: the constraint a config must satisfy, if any
    where: Expr | None

    @property
    def is_symbolic(self) -> bool:
        return isinstance(self.default, str)


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
    #: `grid`, `block` and, where the kernel uses shared memory, `shared`
    launch: dict[str, Expr] = field(default_factory=dict)
    body: tuple[Stmt, ...] = ()

    def fork(self, name: str) -> ForkDecl | None:
        return next((f for f in self.forks if f.name == name), None)

    def error(self, node: Node | None, message: str) -> DslError:
        """An error at `node` of this declaration (at the declaration itself without one)."""
        line, column = node.at if node is not None else (self.line, 1)
        return DslError(self.path, line, column, message)
