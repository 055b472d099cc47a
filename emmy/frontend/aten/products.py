"""Matrix products: linear, matmul (of matrices, batches and vectors), einsum of two
operands, addmm, addmv and baddbmm, and a mixture of experts' grouped matmul."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import SSAValue

from emmy.base import dtypes
from emmy.base.errors import ConversionError, EmmyError
from emmy.dialects import graph
from emmy.frontend.aten.arguments import arg_example, arg_node, arg_nodes, kwarg_number
from emmy.frontend.aten.common import ATEN, _nonempty, _storage_name, _value
from emmy.frontend.function_builder import (
    INTEGER_DTYPES,
    Constant,
    FunctionBuilder,
    View,
    _numel,
    contiguous_meta,
)
from emmy.frontend.op_registry import op_name, op_overload


def _linear_refusal(node: fx.Node) -> str | None:
    x, w = arg_example(node, 0), arg_example(node, 1)
    if w.dim() != 2:
        return f"linear with a weight of shape {list(w.shape)} is not supported"
    return _operands_refusal(x, w)


@ATEN.handles("aten.linear.default", accepts=_linear_refusal)
def _linear(self: FunctionBuilder, node: fx.Node) -> View:
    """x · wᵀ (+ bias); a vector x is a matrix of one row."""
    x_arg, w_arg = node.args[0], arg_node(node, 1)
    bias = node.args[2] if len(node.args) > 2 else node.kwargs.get("bias")
    out = node.meta["val"]
    x = self.operand(x_arg)
    if len(x.type.get_shape()) == 1:
        x = self.insert(
            graph.ReshapeOp(x, TensorType(x.type.element_type, [1, *x.type.get_shape()]))
        )
    n = int(w_arg.meta["val"].shape[0])
    typ = TensorType(x.type.element_type, [*x.type.get_shape()[:-1], n])
    weight = self.values[w_arg]
    # a weight of its own is stored transposed, B [k, n]; a tied one (GPT-2's embedding as
    # its lm_head) is read in place as A · Bᵀ: a transposed copy would double it
    if isinstance(weight, Constant) and len(w_arg.users) == 1:
        w = self.constant_arg(f"{weight.name}.T", weight.tensor.t())
        product = graph.MatmulOp(x, w, typ, transpose_b=False)
    else:
        product = graph.MatmulOp(x, self.operand(w_arg), typ, transpose_b=True)
    value = self.insert(product)
    if bias is not None:
        value = self.insert(graph.elementwise("add", [value, self.operand(bias)], value.type))
    if value.type != self.type_of(out):
        value = self.insert(graph.ReshapeOp(value, self.type_of(out)))
    return self.result(value, out)


def _operands_refusal(*operands: torch.Tensor) -> str | None:
    for tensor in operands:
        if not tensor.dtype.is_floating_point:
            return f"a product of {tensor.dtype} tensors is not supported"
        if tensor.dim() == 0 or tensor.numel() == 0:
            return f"a product of a tensor of shape {list(tensor.shape)} is not supported"
    return None


def _matmul_refusal(node: fx.Node) -> str | None:
    return _operands_refusal(arg_example(node, 0), arg_example(node, 1))


@ATEN.handles(
    "aten.matmul.default",
    "aten.mm.default",
    "aten.bmm.default",
    "aten.mv.default",
    "aten.dot.default",
    accepts=_matmul_refusal,
)
def _matmul(self: FunctionBuilder, node: fx.Node) -> View:
    out = node.meta["val"]
    return self.result(_matmul_of(self, node.args[0], node.args[1], out), out)


def _matmul_of(
    self: FunctionBuilder, lhs_arg: object, rhs_arg: object, out: torch.Tensor
) -> SSAValue[TensorType]:
    """lhs · rhs as torch.matmul takes them: a vector lhs is a matrix of one row and a
    vector rhs one of one column, dropped from the result; the batch dims broadcast (a
    broadcast lhs is expanded by a copy, an rhs whose batch dims are all 1 is one matrix
    shared by the batch)."""
    lhs_view, rhs_view = self.view_of(lhs_arg), self.view_of(rhs_arg)
    a, b = lhs_view.meta, rhs_view.meta
    a = a.unsqueeze(0) if a.dim() == 1 else a
    b = b.unsqueeze(-1) if b.dim() == 1 else b
    batch = list(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    a = a.expand(*batch, *a.shape[-2:])
    if all(size == 1 for size in b.shape[:-2]):
        b = b.reshape(b.shape[-2:]) if b.dim() > 2 else b
    else:
        b = b.expand(*batch, *b.shape[-2:])
    # a transposed rhs (k.transpose(-2, -1)) is read in place as A · Bᵀ
    transposed = View(rhs_view.base, b.transpose(-2, -1))
    if transposed.meta.is_contiguous() and not b.is_contiguous():
        rhs, transpose_b = self.contiguous(transposed), True
    else:
        rhs, transpose_b = self.contiguous(View(rhs_view.base, b)), False
    # so is a transposed lhs (a weight's gradient, xᵀ · dy) as Aᵀ · B
    transposed_a = View(lhs_view.base, a.transpose(-2, -1))
    transpose_a = transposed_a.meta.is_contiguous() and not a.is_contiguous()
    lhs = self.contiguous(transposed_a if transpose_a else View(lhs_view.base, a))
    typ = TensorType(lhs.type.element_type, [*batch, a.shape[-2], b.shape[-1]])
    value = self.insert(graph.MatmulOp(lhs, rhs, typ, transpose_b, transpose_a))
    if value.type != self.type_of(out):
        value = self.insert(graph.ReshapeOp(value, self.type_of(out)))
    return value


def _einsum_labels(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """The labels of each operand of an einsum and of its output, one character a dim:
    '...' spelled out as labels of its own (right-aligned across operands, as torch
    broadcasts them), an implicit output as torch makes it (the ellipsis's dims, then the
    labels used once, in alphabetical order)."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ranks):
        raise EmmyError(f"einsum '{equation}' names {len(terms)} operands for {len(ranks)}")
    widest = max(
        rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks, strict=True)
    )
    # labels torch takes are ASCII letters: these are not
    ellipsis = "".join(chr(0x100 + i) for i in range(max(widest, 0)))
    spelled = []
    for term, rank in zip(terms, ranks, strict=True):
        width = rank - len(term.replace("...", ""))
        spelled.append(term.replace("...", ellipsis[len(ellipsis) - width :]))
    if arrow:
        return spelled, output.replace("...", ellipsis)
    used = "".join(spelled)
    once = sorted(label for label in set(used) if used.count(label) == 1 and label.isalpha())
    return spelled, ellipsis + "".join(once)


def _equation(node: fx.Node) -> str:
    """An einsum's equation, its first argument."""
    equation = node.args[0]
    if not isinstance(equation, str):
        raise ConversionError(f"einsum takes an equation as argument 0, not {equation!r}")
    return equation


def _einsum_refusal(node: fx.Node) -> str | None:
    operands = [arg.meta["val"] for arg in arg_nodes(node, 1)]
    if len(operands) not in (1, 2):
        return f"einsum of {len(operands)} operands is not supported"
    terms, output = _einsum_labels(_equation(node), [t.dim() for t in operands])
    if len(operands) == 1:
        if sorted(terms[0]) != sorted(output) or len(set(output)) != len(output):
            return f"einsum '{node.args[0]}' of one operand (a sum or a diagonal) is not supported"
        return None
    if (reason := _operands_refusal(*operands)) is not None:
        return reason
    if operands[0].dtype != operands[1].dtype:
        return f"einsum of {operands[0].dtype} and {operands[1].dtype} is not supported"
    sizes: dict[str, int] = {}
    for term, tensor in zip(terms, operands, strict=True):
        if len(set(term)) != len(term):
            return f"einsum '{node.args[0]}' with a diagonal (a label repeated) is not supported"
        for label, size in zip(term, tensor.shape, strict=True):
            if sizes.setdefault(label, size) != size:
                return f"einsum '{node.args[0]}' that broadcasts a dim is not supported"
    return None


@ATEN.handles("aten.einsum.default", accepts=_nonempty(_einsum_refusal))
def _einsum(self: FunctionBuilder, node: fx.Node) -> View:
    """An einsum of two operands as one batched matmul: each operand read (a copy where
    its dims are not in place) as [batch, free, contracted], the product [batch, m, n]
    viewed as the output's dims. A label only one operand has and the output lacks is
    summed as a contracted dim that the other operand reads broadcast. One operand whose
    output permutes its dims is a view."""
    views = [self.view_of(arg) for arg in arg_nodes(node, 1)]
    terms, output = _einsum_labels(_equation(node), [v.meta.dim() for v in views])
    if len(views) == 1:
        meta = views[0].meta.permute([terms[0].index(label) for label in output])
        return View(views[0].base, meta)
    sizes = {
        label: n
        for term, v in zip(terms, views, strict=True)
        for label, n in zip(term, v.meta.shape, strict=True)
    }
    batch = [label for label in output if label in terms[0] and label in terms[1]]
    free = [[label for label in output if label in term and label not in batch] for term in terms]
    contracted = [label for label in sizes if label not in output]

    def read(index: int, labels: list[str]) -> View:
        """Operand `index` with dims `labels`, broadcast along those it lacks."""
        view, term = views[index], terms[index]
        strides = [view.meta.stride(term.index(x)) if x in term else 0 for x in labels]
        shape = [sizes[x] for x in labels]
        return View(view.base, view.meta.as_strided(shape, strides, view.meta.storage_offset()))

    def matrices(index: int, rows: list[str], cols: list[str]) -> SSAValue[TensorType]:
        """Operand `index` as [batch, rows, cols], each group of labels one dim."""
        value = self.contiguous(read(index, batch + rows + cols))
        groups = [batch, rows, cols] if batch else [rows, cols]
        shape = [_numel([sizes[x] for x in group]) for group in groups]
        return self.insert(graph.ReshapeOp(value, TensorType(value.type.element_type, shape)))

    lhs = matrices(0, free[0], contracted)
    # an rhs whose dims are in place as [batch, n, k] is read so, as A · Bᵀ, uncopied
    transpose_b = read(1, batch + free[1] + contracted).meta.is_contiguous()
    if transpose_b:
        rhs = matrices(1, free[1], contracted)
    else:
        rhs = matrices(1, contracted, free[1])
    m, n = _numel([sizes[x] for x in free[0]]), _numel([sizes[x] for x in free[1]])
    shape = [*lhs.type.get_shape()[:-2], m, n]
    product = self.insert(
        graph.MatmulOp(lhs, rhs, TensorType(lhs.type.element_type, shape), transpose_b)
    )
    order = batch + free[0] + free[1]
    meta = contiguous_meta(product.type, node.meta["val"].dtype).reshape([sizes[x] for x in order])
    return View(product, meta.permute([order.index(label) for label in output]))


def _scaled_sum_refusal(node: fx.Node) -> str | None:
    """addmm, addmv, baddbmm: beta · self + alpha · (a · b), of float operands."""
    return _operands_refusal(*(arg_example(node, k) for k in range(3)))


@ATEN.handles(
    "aten.addmm.default",
    "aten.addmv.default",
    "aten.baddbmm.default",
    accepts=_scaled_sum_refusal,
)
def _addmm(self: FunctionBuilder, node: fx.Node) -> View:
    """beta · self + alpha · (a · b) (what F.linear of a 2-d input is below autograd); the
    scales are elementwise ops the product's epilogue takes, and beta = 0 ignores self (NaN
    included) as torch does."""
    bias, x_arg, w_arg = node.args[:3]
    beta, alpha = kwarg_number(node, "beta", 1), kwarg_number(node, "alpha", 1)
    out = node.meta["val"]
    product = _matmul_of(self, x_arg, w_arg, out)
    if alpha != 1:
        product = self.insert(
            graph.elementwise("mul", [product, self.scalar(alpha, product)], product.type)
        )
    if beta == 0:
        return self.result(product, out)
    addend = self.tensor_or_scalar(bias, product.type.element_type, product.type.get_shape())
    if beta != 1:
        addend = self.insert(
            graph.elementwise("mul", [addend, self.scalar(beta, addend)], addend.type)
        )
    return self.result(self.insert(graph.elementwise("add", [product, addend], product.type)), out)


def _grouped_operands(node: fx.Node) -> tuple[fx.Node, fx.Node, object, object, object]:
    """input, weight, offsets, bias, out_dtype of a grouped matmul: transformers'
    `grouped_mm_fallback(input, weight, offs)` or torch's `_grouped_mm(self, mat2, offs,
    bias, out_dtype)`."""
    schema = op_overload(node)._schema
    given = {arg.name: value for arg, value in zip(schema.arguments, node.args, strict=False)}
    given |= node.kwargs
    names = [arg.name for arg in schema.arguments]
    x, weight = given[names[0]], given[names[1]]
    if not isinstance(x, fx.Node) or not isinstance(weight, fx.Node):
        raise ConversionError(f"{op_name(node)} takes tensors as {names[0]} and {names[1]}")
    return x, weight, given.get("offs"), given.get("bias"), given.get("out_dtype")


def _grouped_mm_refusal(node: fx.Node) -> str | None:
    x, weight, offsets, bias, out_dtype = _grouped_operands(node)
    if not isinstance(offsets, fx.Node) or bias is not None:
        return f"{op_name(node)} without offsets or with a bias is not supported"
    a, w, offs = _value(x), _value(weight), _value(offsets)
    if a.dim() != 2 or w.dim() != 3:
        return f"{op_name(node)} of {list(a.shape)} by {list(w.shape)} (2-d by 3-d is supported)"
    if a.dtype != w.dtype or not dtypes.is_float(_storage_name(a.dtype)):
        return f"{op_name(node)} of {a.dtype} by {w.dtype} is not supported"
    if out_dtype not in (None, a.dtype):
        return f"{op_name(node)} to {out_dtype} is not supported"
    if offs.dim() != 1 or offs.dtype not in INTEGER_DTYPES or offs.shape[0] != w.shape[0]:
        return f"{op_name(node)} offsets must be one int32/int64 per group"
    if a.shape[0] == 0 or a.shape[1] != w.shape[1]:
        return f"{op_name(node)} of {list(a.shape)} by {list(w.shape)} does not contract"
    return None


@ATEN.handles(
    "aten._grouped_mm.default",
    "transformers.grouped_mm_fallback.default",
    accepts=_grouped_mm_refusal,
)
def _grouped_mm(self: FunctionBuilder, node: fx.Node) -> View:
    """Each group's rows of the input times its weight [groups, k, n], the groups' ends the
    offsets (a mixture of experts' tokens sorted by expert): one graph.grouped_matmul. A
    weight that is the transpose of one stored [groups, n, k] (a Hugging Face expert's
    `gate_up_proj`) is read in place."""
    x, weight, offsets, _, _ = _grouped_operands(node)
    out = _value(node)
    w = self.view_of(weight)
    stored = w.meta.transpose(-2, -1)
    transpose_b = stored.is_contiguous() and not w.meta.is_contiguous()
    rhs = self.contiguous(View(w.base, stored) if transpose_b else w)
    op = graph.GroupedMatmulOp(
        self.operand(x), rhs, self.operand(offsets), self.type_of(out), transpose_b
    )
    return self.result(self.insert(op), out)
