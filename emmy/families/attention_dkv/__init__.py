"""Attention's key (`part = dk`) or value (`part = dv`) gradient, FlashAttention-2's way,
from the queries' statistics, summed over the heads of a group (attention_stats builds its
sites)."""

from __future__ import annotations

from emmy.families import attention_stats
from emmy.families.family import KernelFamily


def reference(key: dict, inputs: list):
    """dK = scale · dSᵀ q of inputs q, k, v, dO, stats[, mask], or dV = Pᵀ dO of q, k, dO,
    stats[, mask], each summed over the query heads that share a key/value head."""
    if key["part"] == "dk":
        q, k, v, grad, stats, *mask = inputs
        grad_scores = attention_stats.score_gradients(key, q, k, v, grad, stats, mask)
        per_head = grad_scores.transpose(-2, -1) @ q.double() * float(key["scale"])
    else:
        q, k, grad, stats, *mask = inputs
        p = attention_stats.probabilities(key, q, k, stats, mask)
        per_head = p.transpose(-2, -1) @ grad.double()
    group = int(key["bh"]) // int(key["kv_bh"])
    return per_head.reshape(int(key["kv_bh"]), group, *per_head.shape[1:]).sum(dim=1)


def check_keys(dtype: str) -> list[dict]:
    """The attention's check keys, each gradient at every other one."""
    return each_part(attention_stats.check_keys(dtype), again=3)


def each_part(keys: list[dict], again: int) -> list[dict]:
    """`keys`, each for dk and dv in turn, then the first `again` for the other part."""
    parts = ("dk", "dv")
    return [key | {"part": parts[n % 2]} for n, key in enumerate(keys)] + [
        key | {"part": parts[1 - n % 2]} for n, key in enumerate(keys[:again])
    ]


FAMILY = KernelFamily(
    "attention_dkv",
    reference=reference,
    check_keys=check_keys,
    check_inputs=attention_stats.gradient_check_inputs,
    extra_atol=attention_stats.length_atol,
    derive_inputs=attention_stats.with_their_stats,
)
