"""Complex arithmetic as real arithmetic on pairs, before conversion.

No emmy kernel computes a complex tensor, but the common pattern of a rotary embedding
(Meta's llama: `view_as_complex(x.reshape(..., d/2, 2)) * freqs_cis`, then `view_as_real`)
is real arithmetic: a complex tensor of shape S is read as the real tensor of shape S + [2]
that holds its pairs (what `view_as_real` gives), and

    (a + bi)(c + di) = (ac - bd) + (ad + bc)i

`real_pairs(graph)` rewrites each complex value it has a rule for into its real pair
tensor: views (view, reshape, slice, select, unsqueeze, permute, expand, ...) gain the
pair's trailing dim, `mul`, `add`, `sub`, `neg` and `polar` become real ops, and a
`view_as_real` reads the pairs in place. A complex value with no rule (a graph input, an
op no rule takes) is read through `view_as_real` of it: computed at compile time for a
constant, through torch otherwise. What still reads a complex value keeps it, and runs
through torch (it has a storage type, emmy.base.dtypes' c64).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import torch
from torch import fx
from torch.fx.node import Argument, map_arg

aten = torch.ops.aten

#: view ops whose arguments after the tensor are the pair's own: the same op on the pairs
#: with each dim made non-negative (the pairs add a trailing dim)
_SAME = {
    aten.clone.default,
    aten.alias.default,
    aten.lift_fresh_copy.default,
    aten.contiguous.default,
    aten.neg.default,
}


#: views whose argument after the tensor is its sizes: the same sizes of the pairs and 2
_RESHAPES = (
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.expand.default,
)
#: views whose argument after the tensor is a dim (0 unless given)
_DIM_FIRST = (aten.slice.Tensor, aten.select.int, aten.squeeze.dim)


def _is_ints(value: object) -> TypeGuard[Sequence[int]]:
    return isinstance(value, (list, tuple)) and all(isinstance(item, int) for item in value)


def _is_complex(node: object) -> TypeGuard[fx.Node]:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return isinstance(value, torch.Tensor) and value.dtype.is_complex


def _has_complex(fx_graph: fx.Graph) -> bool:
    return any(_is_complex(node) for node in fx_graph.nodes)


def _meta(value: Argument) -> Argument:
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


class _Rewrite:
    def __init__(self, fx_graph: fx.Graph) -> None:
        self.graph = fx_graph
        #: each complex node → the node of its real pairs
        self.pairs: dict[fx.Node, fx.Node] = {}
        self.origin: fx.Node | None = None
        self.emitted: set[fx.Node] = set()

    def emit(self, target: torch._ops.OpOverload, *args: Argument) -> fx.Node:
        """A new node before the one rewritten, its example computed on meta tensors."""
        node = self.graph.call_function(target, args)
        example = target(*map_arg(args, lambda n: _meta(n.meta["val"])))
        node.meta["val"] = example
        self.emitted.add(node)
        if self.origin is not None and "stack_trace" in self.origin.meta:
            node.meta["stack_trace"] = self.origin.meta["stack_trace"]
        return node

    def run(self) -> None:
        nodes = list(self.graph.nodes)
        last_placeholder = max(
            (i for i, n in enumerate(nodes) if n.op == "placeholder"), default=-1
        )
        for index, node in enumerate(nodes):
            self.origin = node
            if node.op == "call_function" and node.target is aten.view_as_real.default:
                source = node.args[0]
                if source in self.pairs:
                    node.replace_all_uses_with(self.pairs[source])
                    self.graph.erase_node(node)
                continue
            if not _is_complex(node):
                continue
            pairs = None
            if node.op == "call_function":
                with self.graph.inserting_before(node):
                    pairs = self.rule(node)
            if pairs is None:
                # read through view_as_real: after the last placeholder for an input
                after = nodes[last_placeholder] if index < last_placeholder else node
                with self.graph.inserting_after(after):
                    pairs = self.emit(aten.view_as_real.default, node)
            self.pairs[node] = pairs
        # what nothing reads now (the complex values rewritten, pairs no one took), last
        # first
        for node in reversed(list(self.graph.nodes)):
            rewritten = node in self.pairs or node in self.emitted
            if rewritten and not node.users and node.op == "call_function":
                self.graph.erase_node(node)

    def rule(self, node: fx.Node) -> fx.Node | None:
        """The node of `node`'s pairs, or None where no rule takes it."""
        target, args = node.target, node.args
        if not isinstance(target, torch._ops.OpOverload) or (node.kwargs and target not in _SAME):
            return None
        source = args[0] if args else None
        if target is aten.view_as_complex.default:
            return source if isinstance(source, fx.Node) else None
        if target is aten.polar.default:
            return self.polar(*args)
        if target in (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor):
            return self.arithmetic(node, target)
        if not isinstance(source, fx.Node) or source not in self.pairs:
            return None
        pairs, rank = self.pairs[source], source.meta["val"].dim()
        rest = list(args[1:])
        first = rest[0] if rest else 0  # the dim of slice, select and squeeze: 0 unless given
        second = rest[1] if len(rest) > 1 else None
        if target in _SAME:
            return self.emit(target, pairs)
        if target in _RESHAPES and isinstance(first, (list, tuple)):
            return self.emit(target, pairs, [*first, 2])
        if target in _DIM_FIRST and isinstance(first, int):
            return self.emit(target, pairs, first % rank, *rest[1:])
        if target is aten.squeeze.dims and _is_ints(first):
            return self.emit(target, pairs, [d % rank for d in first])
        if target is aten.unsqueeze.default and isinstance(first, int):
            return self.emit(target, pairs, first % (rank + 1))
        if target is aten.transpose.int and isinstance(first, int) and isinstance(second, int):
            return self.emit(target, pairs, first % rank, second % rank)
        if target is aten.permute.default and _is_ints(first):
            return self.emit(target, pairs, [d % rank for d in first] + [rank])
        return None

    def part(self, pairs: fx.Node, index: int) -> fx.Node:
        return self.emit(aten.select.int, pairs, -1, index)

    def join(self, real: fx.Node, imaginary: fx.Node) -> fx.Node:
        return self.emit(aten.stack.default, [real, imaginary], -1)

    def polar(self, magnitude: object, angle: object) -> fx.Node | None:
        if not isinstance(magnitude, fx.Node) or not isinstance(angle, fx.Node):
            return None
        real = self.emit(aten.mul.Tensor, magnitude, self.emit(aten.cos.default, angle))
        imaginary = self.emit(aten.mul.Tensor, magnitude, self.emit(aten.sin.default, angle))
        return self.join(real, imaginary)

    def arithmetic(self, node: fx.Node, target: torch._ops.OpOverload) -> fx.Node | None:
        """a * b, a + b, a - b (`target`) of two complex tensors, or of a complex tensor and
        a real number (by `mul`, a real tensor too)."""
        left, right = node.args[0], node.args[1]
        complex_args = [a for a in (left, right) if _is_complex(a)]
        if any(a not in self.pairs for a in complex_args):
            return None
        if _is_complex(left) and _is_complex(right):
            a, b = self.pairs[left], self.pairs[right]
            if target is not aten.mul.Tensor:
                return self.emit(target, a, b)
            ar, ai, br, bi = self.part(a, 0), self.part(a, 1), self.part(b, 0), self.part(b, 1)
            mul, sub, add = aten.mul.Tensor, aten.sub.Tensor, aten.add.Tensor
            real = self.emit(sub, self.emit(mul, ar, br), self.emit(mul, ai, bi))
            imaginary = self.emit(add, self.emit(mul, ar, bi), self.emit(mul, ai, br))
            return self.join(real, imaginary)
        if target is not aten.mul.Tensor:
            return None  # a real added to a complex moves its real part alone
        if _is_complex(left):
            pairs, other = self.pairs[left], right
        elif _is_complex(right):
            pairs, other = self.pairs[right], left
        else:
            return None  # a complex number times a real tensor
        if isinstance(other, fx.Node):
            value = other.meta.get("val")
            if not isinstance(value, torch.Tensor) or value.dtype.is_complex:
                return None
            return self.emit(aten.mul.Tensor, pairs, self.emit(aten.unsqueeze.default, other, -1))
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self.emit(aten.mul.Tensor, pairs, other)
        return None


def real_pairs(fx_graph: fx.Graph) -> fx.Graph:
    """`fx_graph` with its complex arithmetic on real pairs where a rule takes it: the
    graph itself where it has no complex value, else a rewritten copy."""
    if not _has_complex(fx_graph):
        return fx_graph
    copy = fx.Graph()
    copy.output(copy.graph_copy(fx_graph, {}))
    _Rewrite(copy).run()
    return copy
