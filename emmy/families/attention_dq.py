"""Attention's query gradient, FlashAttention-2's way, from the queries' statistics
(attention_stats builds its sites)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from emmy.families import attention, attention_stats
from emmy.families.family import Family, FamilyKind

if TYPE_CHECKING:
    import torch


def reference(key: dict, inputs: list):
    """dQ = scale · dS k of inputs q, k, v, dO, stats[, mask]."""
    q, k, v, grad, stats, *mask = inputs
    grad_scores = attention_stats.score_gradients(key, q, k, v, grad, stats, mask)
    return grad_scores @ attention.heads_of_queries(key, k.double()) * float(key["scale"])


def check_inputs(key: dict, dtype: str, generator: torch.Generator) -> list:
    named = attention_stats.backward_inputs(key, dtype, generator)
    return [named[name] for name in ("q", "k", "v", "grad", "stats")] + named["mask"]


FAMILY = Family(
    "attention_dq",
    FamilyKind.KERNEL,
    reference=reference,
    check_keys=attention_stats.check_keys,
    check_inputs=check_inputs,
    extra_atol=attention_stats.length_atol,
    derive_inputs=attention_stats.with_their_stats,
)
