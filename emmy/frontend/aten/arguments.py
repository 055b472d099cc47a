"""Typed readings of an ATen node's arguments.

torch.fx types each argument as any of what one may be (a node, a number, a list, a dtype,
...), while the op's schema fixes which it is. These read one as its schema makes it: by
place (`index`), else by keyword (`name`, where the handler reads one), else its `default`
(absent with no default, an IndexError). One of another kind raises a ConversionError:
converting the node falls back to torch; refusing it is an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import fx
from torch.fx.node import Argument

from emmy.base.errors import ConversionError
from emmy.frontend.op_registry import op_name

#: the default of an argument that has none
_REQUIRED = object()
_INTS = (int, torch.SymInt)
_NUMBERS = (int, float, torch.SymInt, torch.SymFloat)


def arg_given(
    node: fx.Node, index: int, name: str | None = None, default: object = _REQUIRED
) -> object:
    """Argument `index` of the node, given by place, else by keyword `name`, else
    `default`."""
    if index < len(node.args):
        return node.args[index]
    if name is not None and name in node.kwargs:
        return node.kwargs[name]
    if default is _REQUIRED:
        return node.args[index]  # an IndexError
    return default


def _wrong(node: fx.Node, index: int, name: str | None, what: str) -> ConversionError:
    given = arg_given(node, index, name, None)
    where = f"argument {index}" if name is None else name
    return ConversionError(f"{op_name(node)} takes {what} as {where}, not {given!r}")


def _or_required(default: object) -> object:
    return _REQUIRED if default is None else default


def arg_node(node: fx.Node, index: int) -> fx.Node:
    """Argument `index`, a tensor (the node that computes it)."""
    arg = node.args[index]
    if not isinstance(arg, fx.Node):
        raise _wrong(node, index, None, "a tensor")
    return arg


def arg_optional_node(node: fx.Node, index: int, name: str | None = None) -> fx.Node | None:
    """Argument `index`, a tensor or None (None unless given)."""
    arg = arg_given(node, index, name, None)
    if arg is not None and not isinstance(arg, fx.Node):
        raise _wrong(node, index, name, "a tensor or None")
    return arg


def arg_example(node: fx.Node, index: int) -> torch.Tensor:
    """The example of argument `index`, a tensor."""
    return arg_node(node, index).meta["val"]


def _items(
    node: fx.Node, index: int, name: str | None, default: object, what: str
) -> list[Argument]:
    arg = arg_given(node, index, name, default)
    if not isinstance(arg, (list, tuple)):
        raise _wrong(node, index, name, what)
    return list(arg)


def arg_list(node: fx.Node, index: int) -> list[Argument]:
    """Argument `index`, a list (of sizes, say, some of which the graph computes)."""
    return _items(node, index, None, _REQUIRED, "a list")


def arg_optional_nodes(node: fx.Node, index: int) -> list[fx.Node | None]:
    """Argument `index`, a list of tensors and Nones (the indices of `x[a, :, b]`)."""
    items = _items(node, index, None, _REQUIRED, "a list of tensors")
    nodes = [item for item in items if item is None or isinstance(item, fx.Node)]
    if len(nodes) != len(items):
        raise _wrong(node, index, None, "a list of tensors")
    return nodes


def arg_nodes(node: fx.Node, index: int) -> list[fx.Node]:
    """Argument `index`, a list of tensors."""
    items = arg_optional_nodes(node, index)
    nodes = [item for item in items if item is not None]
    if len(nodes) != len(items):
        raise _wrong(node, index, None, "a list of tensors")
    return nodes


def arg_int(node: fx.Node, index: int, name: str | None = None, default: int | None = None) -> int:
    """Argument `index`, an int (a dim, a size)."""
    arg = arg_given(node, index, name, _or_required(default))
    if not isinstance(arg, _INTS):
        raise _wrong(node, index, name, "an int")
    return int(arg)


def arg_optional_int(node: fx.Node, index: int, name: str | None = None) -> int | None:
    """Argument `index`, an int or None (None unless given)."""
    arg = arg_given(node, index, name, None)
    if arg is not None and not isinstance(arg, _INTS):
        raise _wrong(node, index, name, "an int or None")
    return None if arg is None else int(arg)


def arg_ints(
    node: fx.Node, index: int, name: str | None = None, default: Sequence[int] | None = None
) -> list[int]:
    """Argument `index`, a list of ints (dims, sizes)."""
    items = _items(node, index, name, _or_required(default), "a list of ints")
    ints = [int(item) for item in items if isinstance(item, _INTS)]
    if len(ints) != len(items):
        raise _wrong(node, index, name, "a list of ints")
    return ints


def arg_float(
    node: fx.Node, index: int, name: str | None = None, default: float | None = None
) -> float:
    """Argument `index`, a number (an eps, a scale), as a float."""
    arg = arg_given(node, index, name, _or_required(default))
    if not isinstance(arg, _NUMBERS):
        raise _wrong(node, index, name, "a number")
    return float(arg)


def arg_optional_float(node: fx.Node, index: int, name: str | None = None) -> float | None:
    """Argument `index`, a number or None (None unless given), as a float."""
    arg = arg_given(node, index, name, None)
    if arg is not None and not isinstance(arg, _NUMBERS):
        raise _wrong(node, index, name, "a number or None")
    return None if arg is None else float(arg)


def arg_str(node: fx.Node, index: int, name: str | None = None, default: str | None = None) -> str:
    """Argument `index`, a string (a mode)."""
    arg = arg_given(node, index, name, _or_required(default))
    if not isinstance(arg, str):
        raise _wrong(node, index, name, "a string")
    return arg


def kwarg_number(node: fx.Node, name: str, default: int | float) -> int | float:
    """Keyword argument `name`, a number (a scale) as given, else `default`."""
    arg = node.kwargs.get(name, default)
    if not isinstance(arg, (int, float)):
        raise ConversionError(f"{op_name(node)} takes a number as {name}, not {arg!r}")
    return arg
