"""Attention's query gradient, FlashAttention-2's way, from the queries' statistics
(attention_stats builds its sites)."""

from __future__ import annotations

from emmy.families import attention, attention_stats
from emmy.families.family import KernelFamily


def reference(key: dict, inputs: list):
    """dQ = scale · dS k of inputs q, k, v, dO, stats[, mask]."""
    q, k, v, grad, stats, *mask = inputs
    grad_scores = attention_stats.score_gradients(key, q, k, v, grad, stats, mask)
    return grad_scores @ attention.heads_of_queries(key, k.double()) * float(key["scale"])


FAMILY = KernelFamily(
    "attention_dq",
    reference=reference,
    check_keys=attention_stats.check_keys,
    check_inputs=attention_stats.gradient_check_inputs,
    extra_atol=attention_stats.length_atol,
    derive_inputs=attention_stats.with_their_stats,
)
