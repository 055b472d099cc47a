"""A registry of the ops a frontend converts: which entry converts each fx node, and
whether it takes a node at all, asked without converting it (as a partitioner asks
"is this node supported?" before it hands the rest to torch).

An exact entry claims op names (`aten.softmax.int`); a class entry claims the nodes a
predicate picks (every op of a pointwise table, every node whose value is a size). Exact
entries come first, then class entries in the order they were registered, so that a
single op registered by name overrides the class it also belongs to.

    OPS = OpRegistry()

    @OPS.handles("aten.softmax.int", "aten._softmax.default", accepts=softmax_refusal)
    def softmax(converter, node): ...

    @OPS.handles_class(lambda node: is_pointwise(node.target), members=POINTWISE_NAMES)
    def pointwise(converter, node): ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import fx

from emmy.base.errors import ConversionError

#: converts a node: called as `handler(converter, node)`, it returns the node's value
Handler = Callable[[Any, fx.Node], object]
#: a handler as its module defines it, which registering it keeps
DefinedHandler = TypeVar("DefinedHandler", bound=Handler)
#: why an entry refuses a node it claims (its shapes, its dtypes), or None to take it
Refusal = Callable[[fx.Node], str | None]
Claim = Callable[[fx.Node], bool]


def accept_all(node: fx.Node) -> str | None:
    """The default refusal hook: a refusal known only while converting is raised then."""
    return None


@dataclass(frozen=True)
class Support:
    """Whether a node is supported: true when `reason` is None; otherwise `reason` is the
    one-line error converting the node raises."""

    reason: str | None = None

    def __bool__(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class OpEntry:
    """One registered way of converting ops. An exact entry (`claims` None) claims the
    op names `names`; a class entry claims the nodes `claims` picks, and lists as `names`
    the op names it is known to take. `accepts` refuses, ahead of conversion, the nodes
    the handler cannot take."""

    handler: Handler
    names: frozenset[str]
    claims: Claim | None = None
    accepts: Refusal = accept_all


def op_name(node: fx.Node) -> str:
    """The name an op is registered by: `aten.add.Tensor`, `emmy.rope.default`."""
    return str(node.target)


def op_overload(node: fx.Node) -> torch._ops.OpOverload:
    """The op a node calls, for the entries registered by name, whose targets are ops
    (`aten.add.Tensor`, a custom op's overload) rather than Python functions."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        raise ConversionError(f"{op_name(node)} is not an op overload")
    return target


class OpRegistry:
    """Entries by op name, then class entries in registration order."""

    def __init__(self) -> None:
        self._exact: dict[str, OpEntry] = {}
        self._classes: list[OpEntry] = []

    def handles(
        self, *names: str, accepts: Refusal = accept_all
    ) -> Callable[[DefinedHandler], DefinedHandler]:
        """Registers the decorated handler for the ops `names`."""

        def register(handler: DefinedHandler) -> DefinedHandler:
            entry = OpEntry(handler, frozenset(names), accepts=accepts)
            for name in names:
                if name in self._exact:
                    raise ValueError(f"{name} is registered twice")
                self._exact[name] = entry
            return handler

        return register

    def handles_class(
        self, claims: Claim, *, members: Iterable[str] = (), accepts: Refusal = accept_all
    ) -> Callable[[DefinedHandler], DefinedHandler]:
        """Registers the decorated handler for the nodes `claims` picks that no exact entry
        or earlier class entry claims; `members` are the op names it lists as supported."""

        def register(handler: DefinedHandler) -> DefinedHandler:
            self._classes.append(OpEntry(handler, frozenset(members), claims, accepts))
            return handler

        return register

    def entry_for(self, node: fx.Node) -> OpEntry | None:
        """The entry that converts `node`: the one registered by its op's name, else the
        first class entry that claims it."""
        exact = self._exact.get(op_name(node))
        if exact is not None:
            return exact
        return next(
            (entry for entry in self._classes if entry.claims is not None and entry.claims(node)),
            None,
        )

    def handler_for(self, name: str) -> OpEntry | None:
        """The entry that converts op `name`, for the names `supported_ops` lists."""
        exact = self._exact.get(name)
        if exact is not None:
            return exact
        return next((entry for entry in self._classes if name in entry.names), None)

    def supported_ops(self) -> frozenset[str]:
        """The names of the ops some entry converts."""
        return frozenset(self._exact).union(*(entry.names for entry in self._classes))

    def supports(self, node: fx.Node) -> Support:
        """Whether a call_function node converts, decided without converting it: a
        refusal found only while converting (a shape no kernel takes) still raises then."""
        if node.op != "call_function":
            return Support(f"a {node.op} node is not an op")
        entry = self.entry_for(node)
        if entry is None:
            return Support(f"unsupported op {op_name(node)}")
        return Support(entry.accepts(node))
