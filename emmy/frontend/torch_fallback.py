"""What the frontend does with an op emmy has no kernel for: run it through torch
(`fallback.call`), or compute it once at compile time where it reads constants only; and
the account of both (`Coverage`): how many ops and what share of the FLOPs ran in emmy's
kernels, and which ops fell back and why.

FLOPs are counted as torch's own flop counter counts them (`torch.utils.flop_counter`:
matmuls, convolutions, attention), by formulas for the ops it has none for (einsum, grouped
matmuls, the composite ops torch.export keeps whole, reductions by the elements they read),
none for an op that computes nothing (a view, a copy, a gather), and one per output element
for every other op (elementwise), each such op recorded (`Coverage.per_element`); an op
computed at compile time runs no FLOP.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import fx
from torch.fx.node import map_arg
from torch.utils.flop_counter import flop_registry
from xdsl.dialects.builtin import (
    ArrayAttr,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute

from emmy.base.errors import EmmyError
from emmy.dialects import fallback, graph

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
    """Whether the op's result views an argument's elements (a reshape, a transpose, a
    slice): no op computes it, and a view of a weight is read in place. The op's schema
    says so (a result aliasing an argument it does not write); torch.export's example
    values do not mark their views, so they are asked only of an op without a schema."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return any(
            result.alias_info is not None and not result.alias_info.is_write
            for result in target._schema.returns
        )
    return any(t._is_view() for t in tensor_outputs(node.meta.get("val")))


def foldable(node: fx.Node) -> bool:
    """Whether computing `node` once at compile time gives what every call would, its
    arguments known: no random draw, a result small enough (the converter reads a view of
    a weight in place rather than folding it)."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded in node.target.tags:
        return False
    outputs = tensor_outputs(node.meta.get("val"))
    size = sum(t.numel() * t.element_size() for t in outputs)
    return bool(outputs) and size <= FOLD_LIMIT_BYTES


def _contraction(args: tuple, out: torch.Tensor) -> int:
    """2 · out · k for a product whose first operand holds k on its last dim (a linear, a
    matmul; a grouped matmul whose rows each meet one group's matrix)."""
    return 2 * out.numel() * args[0].shape[-1]


def _grouped_mm(args: tuple, out: torch.Tensor) -> int:
    """aten._grouped_mm: 2 · out · k, each row of the output one group's product; two 2-D
    operands split k into groups ([m, k] · [k, n] → [groups, m, n]): 2 · m · k · n."""
    first, second = args[0], args[1]
    if first.dim() == 2 and second.dim() == 2:
        return 2 * first.shape[0] * first.shape[1] * second.shape[1]
    return _contraction(args, out)


def _vector_product(args: tuple, out: torch.Tensor) -> int:
    """mv, dot: 2 · the first operand's elements (one multiply-add each)."""
    return 2 * args[0].numel()


def _added_vector_product(args: tuple, out: torch.Tensor) -> int:
    """addmv (input, matrix, vector): the matrix's multiply-adds."""
    return 2 * args[1].numel()


def _added_batch_product(args: tuple, out: torch.Tensor) -> int:
    """addbmm (input, [b, m, k], [b, k, n]) → [m, n]: 2 · b · m · k · n."""
    return 2 * args[1].numel() * args[2].shape[-1]


def _convolution(args: tuple, out: torch.Tensor) -> int:
    """2 · out · (in channels per group · kernel size): the weight's elements per filter."""
    weight = args[1]
    return 2 * out.numel() * (weight.numel() // weight.shape[0])


def _transposed_convolution(args: tuple, out: torch.Tensor) -> int:
    """2 · input · (out channels per group · kernel size): each input element is scattered
    through one filter (the weight is [in, out / groups, *kernel])."""
    source, weight = args[0], args[1]
    return 2 * source.numel() * (weight.numel() // weight.shape[0])


def _convolution_weight_gradient(args: tuple, out: torch.Tensor) -> int:
    """2 · dy · (in channels per group · kernel size): each output element's gradient
    meets one filter's worth of input elements, as the forward's count."""
    return 2 * args[0].numel() * (out.numel() // out.shape[0])


def _attention(args: tuple, out: torch.Tensor) -> int:
    """q·kᵀ and p·v: 2 · batch · heads · q_len · kv_len · (d + d_v)."""
    query, key, value = args[0], args[1], args[2]
    rows = query.numel() // query.shape[-1]  # batch · heads · q_len
    return 2 * rows * key.shape[-2] * (query.shape[-1] + value.shape[-1])


def _attention_backward(args: tuple, out: torch.Tensor) -> int:
    """The scores recomputed, dO·vᵀ, Pᵀ·dO, dS·k and dSᵀ·q, as torch's flop counter counts
    SDPA's backward: 2 · batch · heads · q_len · kv_len · (3 d + 2 d_v)."""
    query, key, value = args[1], args[2], args[3]
    rows = query.numel() // query.shape[-1]  # batch · heads · q_len
    return 2 * rows * key.shape[-2] * (3 * query.shape[-1] + 2 * value.shape[-1])


def _einsum_sizes(subscripts: str, shape: torch.Size) -> tuple[dict[str, int], torch.Size]:
    """One einsum operand's index sizes by letter, and the dims its `...` stands for."""
    if "..." not in subscripts:
        return dict(zip(subscripts, shape, strict=True)), torch.Size()
    before, after = subscripts.split("...")
    end = len(shape) - len(after)
    sizes = {**dict(zip(before, shape, strict=False)), **dict(zip(after, shape[end:], strict=True))}
    return sizes, shape[len(before) : end]


def _einsum(args: tuple, out: torch.Tensor) -> int:
    """The equation's product over every index it names (the broadcast `...` dims
    included): 2 · that per product of two or more operands (a multiply and an add per
    term and operand after the first), that alone for one operand (a sum, a transpose)."""
    equation, operands = args[0], list(args[1])
    inputs = equation.replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    ellipsis: list[torch.Size] = []
    for subscripts, operand in zip(inputs, operands, strict=True):
        named, dims = _einsum_sizes(subscripts, operand.shape)
        ellipsis.append(dims)
        for letter, size in named.items():  # a dim of 1 broadcasts
            sizes[letter] = max(sizes.get(letter, 1), size)
    terms = math.prod(sizes.values()) * math.prod(torch.broadcast_shapes(*ellipsis))
    return terms if len(operands) == 1 else 2 * (len(operands) - 1) * terms


def _encoder_layer(args: tuple, out: torch.Tensor) -> int:
    """aten._transformer_encoder_layer_fwd (nn.TransformerEncoderLayer's fast path, one op):
    each token through its four weight matrices (qkv, out projection, the feed-forward's
    two), and attention's two products over the sequence."""
    source = args[0]
    weights = (args[3], args[5], args[14], args[16])
    tokens = source.numel() // source.shape[-1]
    attention = 4 * tokens * source.shape[-2] * source.shape[-1]
    return 2 * tokens * sum(w.numel() for w in weights) + attention


def _reads_input(args: tuple, out: torch.Tensor) -> int:
    """One per element of the first operand: a reduction or a normalisation reads each
    once (its output can be one element per row)."""
    return args[0].numel()


#: FLOPs of ops torch's flop counter has no formula for: those above ATen's matmuls that
#: torch.export keeps whole (counted as the matmuls they become), the ATen matmuls it
#: misses, transformers' grouped matmul op, and reductions and pooling (per element read)
_FORMULAS: dict[str, Callable[[tuple, torch.Tensor], int]] = {
    "aten.linear": _contraction,
    "aten.matmul": _contraction,
    "aten._grouped_mm": _grouped_mm,
    "transformers.grouped_mm_fallback": _contraction,
    "aten.mv": _vector_product,
    "aten.dot": _vector_product,
    "aten.vdot": _vector_product,
    "aten.addmv": _added_vector_product,
    "aten.addbmm": _added_batch_product,
    "aten.einsum": _einsum,
    "aten.conv1d": _convolution,
    "aten.conv2d": _convolution,
    "aten.conv3d": _convolution,
    "aten.conv_transpose1d": _transposed_convolution,
    "aten.conv_transpose2d": _transposed_convolution,
    "aten.conv_transpose3d": _transposed_convolution,
    "aten.scaled_dot_product_attention": _attention,
    "aten._scaled_dot_product_flash_attention_for_cpu": _attention,
    "aten._scaled_dot_product_attention_math": _attention,
    "aten._transformer_encoder_layer_fwd": _encoder_layer,
    **{
        f"aten.{name}": _reads_input
        for name in (
            "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "var",
            "std", "var_mean", "norm", "linalg_vector_norm", "logsumexp", "softmax",
            "_softmax", "log_softmax", "_log_softmax", "cumsum", "cumprod", "layer_norm",
            "native_layer_norm", "group_norm", "native_group_norm", "rms_norm", "_fused_rms_norm",
            "batch_norm", "_native_batch_norm_legit_no_training", "max_pool1d", "max_pool2d",
            "max_pool3d", "max_pool2d_with_indices", "avg_pool1d", "avg_pool2d", "avg_pool3d",
            "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
            "_adaptive_avg_pool2d", "adaptive_max_pool2d", "_softmax_backward_data",
            "_log_softmax_backward_data",
        )
    },
    "emmy.layer_norm_backward": _reads_input,
    "emmy.rms_norm": _reads_input,
    "emmy.rms_norm_backward": _reads_input,
    "emmy.upsample2d_backward": _reads_input,
    "emmy.embedding_backward": _reads_input,
    "emmy.attention_backward": _attention_backward,
    "emmy.max_pool2d_backward": _reads_input,
    "emmy.avg_pool2d_backward": _reads_input,
    "emmy.conv2d_weight_gradient": _convolution_weight_gradient,
    "emmy.batch_norm_stats": _reads_input,
    "emmy.batch_norm_backward_sums": _reads_input,
}  # fmt: skip


#: ops that move or make data and compute nothing (no FLOP), besides the views: copies,
#: joins, gathers by index, new tensors, dropout (emmy compiles inference: the identity)
_MOVES_DATA = frozenset(
    f"aten.{name}"
    for name in (
        "_unsafe_view", "_to_copy", "clone", "copy", "contiguous", "cat", "stack", "index",
        "index_select", "gather", "embedding", "repeat", "constant_pad_nd", "slice_scatter",
        "select_scatter", "empty", "empty_like", "empty_strided", "new_empty", "zeros",
        "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
        "new_full", "arange", "scalar_tensor", "lift_fresh_copy", "_assert_tensor_metadata",
        "_unsafe_index", "dropout", "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    )
)  # fmt: skip


def _computes_nothing(node: fx.Node) -> bool:
    """Whether the op runs no arithmetic: a view (its result aliases an argument), an op
    that moves or makes data, an op with no tensor result (an assertion)."""
    schema = getattr(node.target, "_schema", None)
    if schema is not None and any(r.alias_info is not None for r in schema.returns):
        return True
    packet = getattr(node.target, "overloadpacket", None)
    return str(packet) in _MOVES_DATA or not tensor_outputs(node.meta.get("val"))


def _work(node: fx.Node) -> tuple[int, bool]:
    """The op's FLOPs by its formula, and whether it had none (then one per output
    element)."""
    if _computes_nothing(node):
        return 0, False
    value = node.meta.get("val")
    packet = getattr(node.target, "overloadpacket", None)
    args, kwargs = map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    counter = flop_registry.get(packet)
    formula = _FORMULAS.get(str(packet))
    try:
        if counter is not None:
            return int(counter(*args, **kwargs, out_val=value)), False
        outputs = tensor_outputs(value)
        if formula is not None and outputs:
            return int(formula(args, outputs[0])), False
    except Exception:  # noqa: BLE001 - a formula that cannot read these args: count elements
        pass
    return sum(math.prod(t.shape) for t in tensor_outputs(value)), True


def elementwise(op: str) -> bool:
    """Whether the op named `op` ("aten.add.Tensor") is pointwise by torch's tags: one FLOP
    per output element is its count, where for any other op it is a formula missing."""
    namespace, _, rest = op.partition(".")
    packet_name, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace, None), packet_name, None)
    target = getattr(packet, overload or "default", None)
    return torch.Tag.pointwise in getattr(target, "tags", ())


def flops(node: fx.Node) -> int:
    """The op's FLOPs: torch's flop counter's formula (matmuls, convolutions, attention),
    else emmy's (_FORMULAS: einsum, grouped matmuls, reductions), else one per output
    element."""
    return _work(node)[0]


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
    #: the ops counted one FLOP per output element (no formula), one name per op
    per_element: list[str] = field(default_factory=list)

    def count(self, node: fx.Node, where: str) -> None:
        """Counts an op that runs `where`: "native", "folded" or "fallback"."""
        self.ops += 1
        if where == "folded":  # computed once, at compile time: no FLOP runs
            self.folded += 1
            return
        work, per_element = _work(node)
        if per_element:
            self.per_element.append(str(node.target))
        self.flops += work
        if where == "native":
            self.native += 1
            self.native_flops += work

    def to_attr(self) -> graph.CoverageAttr:
        per_element = Counter(self.per_element)
        return graph.CoverageAttr(
            self.ops, self.native, self.folded, self.flops, self.native_flops, per_element
        )
