"""What the frontend does with an op emmy has no kernel for: run it through torch
(`fallback.call`), or compute it once at compile time where it reads constants only; and
the account of both (`Coverage`): how many ops and what share of the FLOPs ran in emmy's
kernels, and which ops fell back and why.

FLOPs are counted as torch's own flop counter counts them (`torch.utils.flop_counter`:
matmuls, convolutions, attention), and one per output element for every other op; an op
computed at compile time runs no FLOP.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.utils.flop_counter import flop_registry
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute

from emmy.dialects import fallback
from emmy.errors import EmmyError

#: a constant computed at compile time is kept when it is at most this large
FOLD_LIMIT_BYTES = 64 << 20

_ENUMS = {
    torch.dtype: "dtype",
    torch.layout: "layout",
    torch.memory_format: "memory_format",
    torch.device: "device",
}


def encode(arg: object, tensor: Callable[[fx.Node], Attribute]) -> Attribute:
    """An op argument as the attribute `fallback.call` keeps; `tensor(node)` encodes a
    node's value (a tensor view, a size)."""
    if isinstance(arg, fx.Node):
        return tensor(arg)
    if isinstance(arg, (list, tuple)):
        return ArrayAttr([encode(item, tensor) for item in arg])
    if arg is None:
        return fallback.NoneAttr()
    if isinstance(arg, bool):  # before int: a bool is an int to Python
        return IntegerAttr(int(arg), i1)
    if isinstance(arg, int):
        return IntegerAttr(arg, i64)
    if isinstance(arg, float):
        return FloatAttr(arg, f64)
    if isinstance(arg, str):
        return StringAttr(arg)
    kind = _ENUMS.get(type(arg))
    if kind is not None:
        return fallback.EnumAttr(kind, str(arg).removeprefix("torch."))
    raise EmmyError(f"an argument {arg!r} ({type(arg).__name__}) cannot be passed to torch")


def tensor_outputs(value: object) -> list[torch.Tensor]:
    """The tensors an op gives, in order (a fallback's results; None and sizes skipped)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensor_outputs(item)]
    return []


def returns_view(node: fx.Node) -> bool:
    """Whether the op's result views an argument's elements (a reshape, a transpose): no
    op computes it, and a view of a weight is read in place."""
    return any(t._is_view() for t in tensor_outputs(node.meta.get("val")))


def foldable(node: fx.Node) -> bool:
    """Whether computing `node` once at compile time gives what every call would: no
    random draw, no view of a weight (read in place instead), a result small enough."""
    if not isinstance(node.target, torch._ops.OpOverload) or returns_view(node):
        return False
    if torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    outputs = tensor_outputs(node.meta.get("val"))
    size = sum(t.numel() * t.element_size() for t in outputs)
    return bool(outputs) and size <= FOLD_LIMIT_BYTES


def _contraction(args: tuple, out: torch.Tensor) -> int:
    """2 · out · k for a product whose first operand holds k on its last dim."""
    return 2 * out.numel() * args[0].shape[-1]


def _convolution(args: tuple, out: torch.Tensor) -> int:
    """2 · out · (in channels per group · kernel size): the weight's elements per filter."""
    weight = args[1]
    return 2 * out.numel() * (weight.numel() // weight.shape[0])


def _attention(args: tuple, out: torch.Tensor) -> int:
    """q·kᵀ and p·v: 2 · 2 · batch · heads · q_len · kv_len · d."""
    query, key = args[0], args[1]
    return 4 * query.numel() * key.shape[-2]


#: FLOPs of ops above ATen's flop formulas (torch.export keeps them whole), counted as the
#: matmuls they become
_COMPOSITE_WORK = {
    "linear": _contraction,
    "matmul": _contraction,
    "conv1d": _convolution,
    "conv2d": _convolution,
    "conv3d": _convolution,
    "scaled_dot_product_attention": _attention,
}


def flops(node: fx.Node) -> int:
    """The op's FLOPs, as torch's flop counter counts them, else one per output element."""
    value = node.meta.get("val")
    packet = getattr(node.target, "overloadpacket", None)
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    formula = flop_registry.get(packet)
    composite = _COMPOSITE_WORK.get(getattr(packet, "__name__", ""))
    try:
        if formula is not None:
            return int(formula(*args, **kwargs, out_val=value))
        if composite is not None and isinstance(value, torch.Tensor):
            return int(composite(args, value))
    except Exception:  # noqa: BLE001 - a formula that cannot read these args: count elements
        pass
    return sum(math.prod(t.shape) for t in tensor_outputs(value))


@dataclass(frozen=True)
class Fallback:
    """One op that runs through torch: its name, why, and where the model calls it."""

    op: str
    reason: str
    source: str = ""


@dataclass
class Coverage:
    """The ops of one graph by where they run: emmy's kernels (`native`), torch
    (`fallbacks`) or nowhere, computed at compile time (`folded`); and their FLOPs."""

    ops: int = 0
    native: int = 0
    folded: int = 0
    flops: int = 0
    native_flops: int = 0
    fallbacks: list[Fallback] = field(default_factory=list)

    def count(self, node: fx.Node, where: str) -> None:
        """Counts an op that runs `where`: "native", "folded" or "fallback"."""
        self.ops += 1
        if where == "folded":  # computed once, at compile time: no FLOP runs
            self.folded += 1
            return
        work = flops(node)
        self.flops += work
        if where == "native":
            self.native += 1
            self.native_flops += work

    def to_attr(self) -> DictionaryAttr:
        counts = {
            "ops": self.ops,
            "native_ops": self.native,
            "folded_ops": self.folded,
            "flops": self.flops,
            "native_flops": self.native_flops,
        }
        return DictionaryAttr({name: IntegerAttr(value, i64) for name, value in counts.items()})
