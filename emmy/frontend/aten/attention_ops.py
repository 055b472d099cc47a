"""Attention: scaled_dot_product_attention (and torch's CPU flash form of it) with its
masks, and the ops of emmy's own that a model's attention is rewritten to: rope, and
cached_attention (a decode step over a KV cache)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.frontend.aten.arguments import arg_example
from emmy.frontend.aten.common import ATEN, _storage_name, _value
from emmy.frontend.function_builder import FunctionBuilder, View
from emmy.frontend.op_registry import Refusal, op_name


@ATEN.handles("emmy.rope.default")
def _rope(self: FunctionBuilder, node: fx.Node) -> View:
    x, cos, sin = (self.operand(a) for a in node.args[:3])
    return self.result(self.insert(graph.RopeOp(x, cos, sin)), node.meta["val"])


def _cached_attention_refusal(node: fx.Node) -> str | None:
    """What attention_decode does not cover: a q and caches of different or non-float
    dtypes, a length not one int64, shapes that do not fit, a head dim that no `lanes`
    option divides."""
    q, k, v, length = (arg_example(node, index) for index in range(4))
    if not q.dtype == k.dtype == v.dtype or not dtypes.is_float(_storage_name(q.dtype)):
        return f"cached_attention of q {q.dtype} and caches {k.dtype}, {v.dtype}"
    if length.dtype != torch.int64 or length.numel() != 1:
        return (
            f"cached_attention's length must be one int64, not {length.dtype} {list(length.shape)}"
        )
    ranks = q.dim() == k.dim() == 4 and k.shape == v.shape
    if not ranks or not _cache_fits(tuple(q.shape), tuple(k.shape)):
        return f"cached_attention of q {list(q.shape)} over caches {list(k.shape)}, {list(v.shape)}"
    dim = q.shape[-1]
    if dim % 4 or dim > 1024:
        return f"cached_attention of head dim {dim} (a multiple of 4 up to 1024 is supported)"
    return None


def _cache_fits(q: tuple[int, ...], cache: tuple[int, ...]) -> bool:
    """q [batch, heads, new, dim] over caches [batch, kv_heads, max_len, dim]: heads a
    multiple of kv_heads, no more new tokens than the cache holds."""
    (batch, heads, new, dim), (cache_batch, kv_heads, max_len, cache_dim) = q, cache
    same = batch == cache_batch and dim == cache_dim
    return same and kv_heads > 0 and heads % kv_heads == 0 and new <= max_len


@ATEN.handles("emmy.cached_attention.default", accepts=_cached_attention_refusal)
def _cached_attention(self: FunctionBuilder, node: fx.Node) -> View:
    q, k_cache, v_cache, length = (self.operand(a) for a in node.args[:4])
    op = graph.CachedAttentionOp(q, k_cache, v_cache, length)
    return self.result(self.insert(op), node.meta["val"])


def _sdpa_arguments(node: fx.Node) -> dict:
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    return dict(zip(names, node.args, strict=False)) | dict(node.kwargs)


#: torch's attentions below autograd, by the names of their positional arguments: the
#: CPU's flash attention, and the GPU's (flash, memory-efficient, cuDNN). Their results
#: past the output (the log-sum-exp, RNG state, sequence bounds) are read by their
#: backward ops alone, which the backend decomposes recomputing the probabilities
#: (emmy.frontend.decompositions), so no graph emmy compiles reads them.
FUSED_ATTENTIONS = {
    "aten._scaled_dot_product_flash_attention_for_cpu.default": (
        "query", "key", "value", "dropout_p", "is_causal", "attn_mask",
    ),
    "aten._scaled_dot_product_flash_attention.default": (
        "query", "key", "value", "dropout_p", "is_causal",
    ),
    "aten._scaled_dot_product_efficient_attention.default": (
        "query", "key", "value", "attn_mask", "compute_log_sumexp", "dropout_p", "is_causal",
    ),
    "aten._scaled_dot_product_cudnn_attention.default": (
        "query", "key", "value", "attn_mask", "compute_log_sumexp", "dropout_p", "is_causal",
    ),
}  # fmt: skip


def _fused_arguments(node: fx.Node) -> dict:
    names = FUSED_ATTENTIONS[op_name(node)]
    return dict(zip(names, node.args, strict=False)) | dict(node.kwargs)


def _without_dropout(arguments: Callable[[fx.Node], dict]) -> Refusal:
    """Refuses attention with dropout, its arguments bound by `arguments`."""

    def refusal(node: fx.Node) -> str | None:
        if not arguments(node).get("dropout_p", 0.0):
            return None
        return "scaled_dot_product_attention with dropout is not supported"

    return refusal


@ATEN.handles(
    "aten.scaled_dot_product_attention.default", accepts=_without_dropout(_sdpa_arguments)
)
def _attention(self: FunctionBuilder, node: fx.Node) -> View:
    return _sdpa(self, node, _sdpa_arguments(node))


@ATEN.handles(*FUSED_ATTENTIONS, accepts=_without_dropout(_fused_arguments))
def _fused_attention(self: FunctionBuilder, node: fx.Node) -> list:
    """The output of an attention below autograd (what SDPA becomes on the CPU and on a
    GPU), its other results None. It takes k/v of fewer heads than q as grouped-query
    attention (what SDPA with enable_gqa=True becomes)."""
    rest = [None] * (len(node.meta["val"]) - 1)
    return [_sdpa(self, node, {"enable_gqa": True, **_fused_arguments(node)}), *rest]


_BACKWARD_ARGS = ("grad_out", "query", "key", "value", "out", "attn_mask", "scale", "is_causal")


def _attention_backward_refusal(node: fx.Node) -> str | None:
    """What attention_stats, attention_dq and attention_dkv do not cover: a head dim that no
    `lanes` option divides into at most 16 per thread."""
    dim = arg_example(node, 1).shape[-1]
    if dim % 4 or dim > 512:
        return f"attention backward of head dim {dim} (a multiple of 4 up to 512 is supported)"
    return None


@ATEN.handles("emmy.attention_backward.default", accepts=_attention_backward_refusal)
def _attention_backward(self: FunctionBuilder, node: fx.Node) -> list[View]:
    """The gradients of q, k and v (emmy.frontend.decompositions): offer-paths makes
    them a choice between FlashAttention-2's kernels and the vendor library's backward."""
    bound: dict = dict(zip(_BACKWARD_ARGS, node.args, strict=False)) | dict(node.kwargs)
    q, k, v, out, grad = (
        self.operand(bound[n]) for n in ("query", "key", "value", "out", "grad_out")
    )
    batch, heads, q_len, _ = q.type.get_shape()
    mask = None
    if bound.get("attn_mask") is not None:
        kv_len = k.type.get_shape()[2]
        dtype = q.type.element_type
        mask = _attention_mask(self, bound["attn_mask"], dtype, batch, heads, q_len, kv_len)
    scale, causal = float(bound["scale"]), bool(bound["is_causal"])
    op = graph.AttentionGradientsOp((q, k, v), grad, out, scale, causal, mask)
    self.insert(op)
    gradients = (op.grad_q, op.grad_k, op.grad_v)
    return [self.result(g, meta) for g, meta in zip(gradients, node.meta["val"], strict=True)]


def _additive_mask(self: FunctionBuilder, view: View, dtype: Attribute) -> View:
    """A boolean mask's additive form in `dtype` (0 where true, -inf where false), viewed as
    the mask was."""
    shape = list(view.base.type.get_shape())
    bias = self.insert(graph.MaskBiasOp(view.base, TensorType(dtype, shape)))
    torch_dtype = dtypes.torch_dtype(dtypes.dtype_name(dtype))
    meta = torch.empty(shape, dtype=torch_dtype, device="meta").as_strided(
        view.meta.shape, view.meta.stride(), view.meta.storage_offset()
    )
    return View(bias, meta)


def _attention_mask(
    self: FunctionBuilder,
    arg: fx.Node,
    dtype: Attribute,
    batch: int,
    heads: int,
    q_len: int,
    kv_len: int,
) -> SSAValue[TensorType]:
    """An attn_mask [batch or 1, heads or 1, q_len or 1, kv_len], additive in q's `dtype` or
    boolean (true: the key is read), which becomes additive first: read as [groups,
    kv_len] or [groups, q_len, kv_len], where the groups are the batch (a mask the same for
    every head) or the batch's heads (a mask per head); a padding mask is [batch, 1, 1,
    kv_len], and Hugging Face models build padding and causal masks as [batch, 1, q_len,
    kv_len]."""
    view = self.view_of(arg)
    if view.meta.dtype == torch.bool:
        view = _additive_mask(self, view, dtype)
    meta = view.meta
    shape = (1,) * (4 - meta.dim()) + tuple(meta.shape)
    fits = meta.dim() <= 4 and shape[0] in (1, batch) and shape[1] in (1, heads)
    if not fits or shape[2] not in (1, q_len) or shape[3] != kv_len:
        raise self.error(
            f"attn_mask of shape {list(meta.shape)}: it must broadcast to [{batch}, {heads}, "
            f"{q_len}, {kv_len}] from [batch or 1, heads or 1, q_len or 1, kv_len]"
        )
    per_head, rows = shape[1] > 1, shape[2]
    expanded = meta.reshape(shape).expand(batch, shape[1], rows, kv_len)
    value = self.contiguous(View(view.base, expanded if per_head else expanded[:, 0]))
    groups = batch * heads if per_head else batch
    out = [groups, *([rows] if rows > 1 else []), kv_len]
    if list(value.type.get_shape()) == out:
        return value
    return self.insert(graph.ReshapeOp(value, TensorType(value.type.element_type, out)))


def _sdpa(self: FunctionBuilder, node: fx.Node, bound: dict) -> View:
    q, k, v = (self.operand(bound[n]) for n in ("query", "key", "value"))
    heads, kv_heads = q.type.get_shape()[1], k.type.get_shape()[1]
    if kv_heads != heads and not bound.get("enable_gqa", False):
        raise self.error("k/v with fewer heads than q need enable_gqa=True")
    scale = bound.get("scale")
    if scale is None:
        scale = q.type.get_shape()[-1] ** -0.5
    mask = None
    if bound.get("attn_mask") is not None:
        batch, kv_len = k.type.get_shape()[0], k.type.get_shape()[2]
        q_len = q.type.get_shape()[2]
        dtype = q.type.element_type
        mask = _attention_mask(self, bound["attn_mask"], dtype, batch, heads, q_len, kv_len)
    out = _value(node)
    causal = bool(bound.get("is_causal", False))
    op = graph.AttentionOp(q, k, v, float(scale), causal, mask)
    return self.result(self.insert(op), out)
