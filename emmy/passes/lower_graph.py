"""lower-graph: turns emmy.graph ops into sites of library kernels and calls to them.

A softmax over the last dim becomes a `softmax` site. A chain of elementwise ops whose
intermediate values have no other use becomes one `elementwise` site, its chain written
into the problem key (`fn`), each input read as full, row-broadcast, column-broadcast or
scalar. Every site is instantiated from the kernel library with its forks unresolved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from emmy.dialects import graph, kernel
from emmy.dialects.kernel import dtype_name
from emmy.dsl.library import family, instantiate
from emmy.errors import EmmyError

ELEMENTWISE = (graph.UnaryOp, graph.BinaryOp, graph.ConstantOp)
BINARY_SYMBOLS = {graph.AddOp: "+", graph.SubOp: "-", graph.MulOp: "*", graph.DivOp: "/"}
UNARY_FUNCTIONS = {
    graph.ExpOp: "exp",
    graph.TanhOp: "tanh",
    graph.SiluOp: "silu",
    graph.ReluOp: "relu",
}


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _strip_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def broadcast_kind(input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> str | None:
    """How an input of an elementwise site is read at a flat output index, if it can be."""
    if math.prod(input_shape) == 1:
        return "scalar"
    stripped = _strip_leading_ones(input_shape)
    if stripped == _strip_leading_ones(output_shape):
        return "full"
    if stripped == output_shape[-1:]:
        return "row"
    if input_shape[-1:] == (1,) and _strip_leading_ones(stripped[:-1]) == _strip_leading_ones(
        output_shape[:-1]
    ):
        return "col"
    return None


@dataclass
class ElementwiseGroup:
    root: Operation
    ops: list[Operation]
    inputs: list[SSAValue]
    text: str


def _is_elementwise(op: Operation | None) -> bool:
    return isinstance(op, ELEMENTWISE)


def collect_group(root: Operation) -> ElementwiseGroup:
    """The root and the producers it alone uses, with the chain as kernel-language text."""
    ops: list[Operation] = []
    inputs: list[SSAValue] = []

    def text(value: SSAValue) -> str:
        producer = value.owner
        if isinstance(producer, graph.ConstantOp):
            return repr(float(producer.value.value.data))
        inner = _is_elementwise(producer) and producer is not root and value.has_one_use()
        if producer is root or inner:
            ops.append(producer)
            return expression(producer)
        if value not in inputs:
            inputs.append(value)
        return f"in{inputs.index(value)}"

    def expression(op: Operation) -> str:
        if isinstance(op, graph.BinaryOp):
            lhs, rhs = text(op.lhs), text(op.rhs)
            return f"({lhs} {BINARY_SYMBOLS[type(op)]} {rhs})"
        operand = text(op.input)
        if isinstance(op, graph.NegOp):
            return f"(-{operand})"
        if isinstance(op, graph.GeluOp):
            tanh = op.approximate is not None and op.approximate.data == "tanh"
            return f"{'gelu_tanh' if tanh else 'gelu'}({operand})"
        return f"{UNARY_FUNCTIONS[type(op)]}({operand})"

    chain = text(root.results[0])
    return ElementwiseGroup(root, ops, inputs, chain)


@dataclass(frozen=True)
class LowerGraph(ModulePass):
    name = "lower-graph"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        counter = 0
        for function in [f for f in op.ops if isinstance(f, func.FuncOp)]:
            for graph_op in reversed(list(function.body.walk())):
                if graph_op.parent is None:
                    continue  # already folded into a group
                site = None
                name = None
                if isinstance(graph_op, graph.SoftmaxOp):
                    name = f"softmax_{counter}"
                    site, inputs = self.softmax(graph_op, name), [graph_op.input]
                    replaced = [graph_op]
                elif self.is_group_root(graph_op):
                    name = f"elementwise_{counter}"
                    group = collect_group(graph_op)
                    site, inputs = self.elementwise(group, name), group.inputs
                    replaced = group.ops
                if site is None:
                    continue
                counter += 1
                op.body.block.insert_op_before(site, function)
                call = kernel.CallOp(name, inputs, [graph_op.results[0].type])
                function.body.block.insert_op_before(call, graph_op)
                graph_op.results[0].replace_all_uses_with(call.outputs[0])
                for dead in replaced:
                    dead.detach()
                    dead.erase(safe_erase=False)
        for constant in [c for c in op.walk() if isinstance(c, graph.ConstantOp)]:
            if not constant.result.uses:
                constant.detach()
                constant.erase()
        for leftover in op.walk():
            if leftover.dialect_name() == "graph":
                raise EmmyError(f"lower-graph: no kernel family implements {leftover.name}")

    @staticmethod
    def is_group_root(op: Operation) -> bool:
        """An elementwise op whose value leaves the chain: not a constant (inlined) and not
        the single use of another elementwise op."""
        if not _is_elementwise(op) or isinstance(op, graph.ConstantOp):
            return False
        return not _is_elementwise(op.results[0].get_user_of_unique_use())

    @staticmethod
    def softmax(op: graph.SoftmaxOp, name: str):
        shape = _shape(op.input)
        dim = op.dim.value.data % len(shape)
        if dim != len(shape) - 1:
            raise EmmyError(
                f"softmax over dim {op.dim.value.data} of {list(shape)}: only the last dim is supported"
            )
        key = {
            "rows": math.prod(shape[:-1]),
            "cols": shape[-1],
            "T": dtype_name(op.input.type.element_type),
        }
        return instantiate(family("softmax"), key, name)

    @staticmethod
    def elementwise(group: ElementwiseGroup, name: str):
        out_shape = _shape(group.root.results[0])
        kinds = []
        for value in group.inputs:
            kind = broadcast_kind(_shape(value), out_shape)
            if kind is None:
                raise EmmyError(
                    f"elementwise input of shape {list(_shape(value))} broadcast to {list(out_shape)}: "
                    "only full, row, column and scalar broadcasts are supported"
                )
            kinds.append(kind)
        element = group.root.results[0].type.element_type
        key = {
            "n": max(1, math.prod(out_shape)),
            "cols": out_shape[-1] if out_shape else 1,
            "T": dtype_name(element),
            "inputs": "/".join(kinds),
            "fn": group.text,
        }
        return instantiate(family("elementwise"), key, name)
