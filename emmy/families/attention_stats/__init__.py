"""Attention's backward as FlashAttention-2 computes it (graph.attention_backward): each
query's statistics (this family: its scores' log-sum-exp and rowsum(dO ∘ O)), then the
query gradient (attention_dq) and the key and value gradients (attention_dkv), each
recomputing the probabilities from q, k and the statistics. The sites of all three are
built here; their keys are the attention's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.dialects.graph import AttentionGradient
from emmy.families import attention
from emmy.families.family import Fusion, KernelFamily, OpSites, Site

if TYPE_CHECKING:
    import torch


#: each gradient kernel's inputs by name, in the order of its parameters (the mask, where
#: there is one, last): attention_dq's, and attention_dkv's of each part
GRADIENT_INPUTS = {
    "dq": ("q", "k", "v", "grad", "stats"),
    "dk": ("q", "k", "v", "grad", "stats"),
    "dv": ("q", "k", "grad", "stats"),
}
#: the part of each gradient of graph.attention_backward
PARTS = {
    AttentionGradient.QUERY: "dq",
    AttentionGradient.KEY: "dk",
    AttentionGradient.VALUE: "dv",
}


def gradient_inputs(key: dict) -> tuple[str, ...]:
    """The inputs of the gradient kernel at `key` (attention_dq's has no `part`)."""
    return GRADIENT_INPUTS[str(key.get("part", "dq"))]


def site(op: Operation, fusion: Fusion) -> Site:
    """The stats, query or key/value family's site of a part of the backward, its inputs in
    the order of that kernel's parameters."""
    assert isinstance(op, graph.AttentionBackwardOp)
    scale, causal = float(op.scale.value.data), op.causal is not None
    key = attention.problem_of(op.q, op.k, op.mask, scale, causal)
    mask = [op.mask] if op.mask is not None else []
    if op.gradient.data == AttentionGradient.STATS:
        return Site("attention_stats", key, [op.q, op.k, op.aux, op.grad, *mask])
    part = PARTS[op.gradient.data]
    values = {"q": op.q, "k": op.k, "v": op.v, "grad": op.grad, "stats": op.aux}
    inputs = [values[name] for name in GRADIENT_INPUTS[part]] + mask
    tensor_cores = "_tc" if attention.on_tensor_cores(op.q) else ""
    if part == "dq":
        return Site(f"attention_dq{tensor_cores}", key, inputs)
    return Site(f"attention_dkv{tensor_cores}", key | {"part": part}, inputs)


def reference(key: dict, inputs: list):
    """[bh, q_len, 2] of inputs q, k, o, dO[, mask]: the log-sum-exp of the scores (-inf
    where every key is masked) and rowsum(dO ∘ O)."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    q, k, out, grad, *mask = inputs
    lse = torch.logsumexp(attention.scores(key, q, k, mask), dim=-1)
    return torch.stack([lse, row_terms(grad, out)], dim=-1)


def row_terms(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """rowsum(dO ∘ O) in float64."""
    return (grad.double() * out.double()).sum(dim=-1)


def probabilities(key: dict, q: torch.Tensor, k: torch.Tensor, stats: torch.Tensor, mask: list):
    """P = exp(scores − lse) in float64, [bh, q_len, kv_len], from the log-sum-exps the
    stats give (what the kernels read, so a bench's random stats are judged as they are
    used); 0 where a score is masked."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    scores = attention.scores(key, q, k, mask)
    p = torch.exp(scores - stats[..., :1].double())
    return p.masked_fill(scores.isneginf(), 0.0)


def score_gradients(
    key: dict, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor,
    stats: torch.Tensor, mask: list,
) -> torch.Tensor:  # fmt: skip
    """dS = P ∘ (dO vᵀ − rowsum(dO ∘ O)) in float64, [bh, q_len, kv_len], P and the row
    terms from the stats."""
    p = probabilities(key, q, k, stats, mask)
    grad_p = grad.double() @ attention.heads_of_queries(key, v.double()).transpose(-2, -1)
    return p * (grad_p - stats[..., 1:].double())


def with_their_stats(key: dict, inputs: list) -> list:
    """attention_dq's or attention_dkv's inputs with the stats of their q, k and dO (a
    bench's random stats break the kernels' contract: a probability over 1), the output
    that of their v (none for the value gradient, whose kernel reads no row term)."""
    # torch stays off the compile path: only benches derive inputs
    import torch

    names = gradient_inputs(key)
    named, mask = dict(zip(names, inputs, strict=False)), inputs[len(names) :]
    q, k, grad = named["q"], named["k"], named["grad"]
    out = (
        attention.reference(key, [q, k, named["v"], *mask])
        if "v" in named
        else torch.zeros_like(grad)
    )
    named["stats"] = reference(key, [q, k, out, grad, *mask]).to(named["stats"].dtype)
    return [named[name] for name in names] + mask


def length_atol(key: dict) -> float:
    """f32 accumulation over the keys, and over the queries of every head of a group."""
    return 2e-6 * summed_terms(key)


def rounded_atol(key: dict) -> float:
    """length_atol, and P and dS rounded to T before their products (on tensor cores, as
    FlashAttention-2 rounds them): a rounding error per term, summed at random."""
    # torch stays off the compile path: only benches and checks judge outputs
    import torch

    from emmy.base import dtypes

    unit = torch.finfo(dtypes.torch_dtype(str(key["T"]))).eps / 2
    return length_atol(key) + unit * summed_terms(key) ** 0.5


def summed_terms(key: dict) -> int:
    """The terms a gradient element sums at most: the keys, and the queries of every head
    of a group."""
    group = int(key["bh"]) // int(key["kv_bh"])
    return int(key["kv_len"]) + group * int(key["q_len"])


#: attention's check shapes that cover the backward's cases once each (one query and key;
#: causal; grouped-query with d = 128; causal with a padding mask; a mask per query; a
#: mask per head, causal, with fewer queries than keys)
CHECK_SHAPES = [attention.CHECK_SHAPES[i] for i in (0, 1, 3, 5, 6, 8)]


def check_keys(dtype: str) -> list[dict]:
    return attention.check_keys_of(dtype, CHECK_SHAPES)


def backward_inputs(key: dict, dtype: str, generator: torch.Generator) -> dict:
    """Random q, k, v, dO and mask of an attention's key, with its output and stats, by
    name."""
    # torch stays off the compile path: only checks build inputs
    from emmy.base import dtypes
    from emmy.families.tensors import randn

    q, k, v, *mask = attention.check_inputs(key, dtype, generator)
    grad = randn(tuple(q.shape), dtype, generator)
    out = attention.reference(key, [q, k, v, *mask]).to(dtypes.torch_dtype(dtype))
    stats = reference(key, [q, k, out, grad, *mask]).float()
    return {"q": q, "k": k, "v": v, "grad": grad, "mask": mask, "out": out, "stats": stats}


def check_inputs(key: dict, dtype: str, generator: torch.Generator) -> list:
    named = backward_inputs(key, dtype, generator)
    return [named["q"], named["k"], named["out"], named["grad"], *named["mask"]]


def gradient_check_inputs(key: dict, dtype: str, generator: torch.Generator) -> list:
    """A gradient kernel's check inputs (attention_dq's, attention_dkv's)."""
    named = backward_inputs(key, dtype, generator)
    return [named[name] for name in gradient_inputs(key)] + named["mask"]


FAMILY = KernelFamily(
    "attention_stats",
    lowers=OpSites((graph.AttentionBackwardOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=attention.length_atol,
)
