"""Fused attention on tensor cores (FlashAttention-2 style, f16/bf16). Its sites are built
by attention's (`attention.attention_key` picks it)."""

from __future__ import annotations

import math

from emmy.base import dtypes
from emmy.families.attention import (
    check_inputs,
    check_keys_of,
    grid_of,
    length_atol,
    reference,
)
from emmy.families.family import KernelFamily

# (bh, kv_bh, q_len, kv_len, d, causal, scale, mask batch or 0, mask per query too), as
# attention's, split between the dtypes (every option still runs in each, and the emulator's
# compile of the variants stays short): more rows than one block of queries, grouped-query
# heads, kv_len a multiple of no tile, fewer queries than keys under a causal mask, head
# dims 16 to 128, padding masks, masks per query (one query of which sees no key: see
# `tc_inputs`) and a mask per head
TC_SHAPES = {
    "bf16": [
        (2, 1, 70, 70, 16, "yes", "0.25", 0, False),
        (2, 2, 5, 100, 32, "yes", "0.17677669", 2, True),
        (2, 1, 7, 45, 96, "yes", "0.10206207", 1, False),
        (4, 1, 33, 33, 128, "yes", "0.08838835", 0, False),
    ],
    "f16": [
        (6, 2, 13, 20, 64, "no", "0.125", 2, False),
        (2, 2, 3, 70, 128, "no", "0.08838835", 2, True),
        (4, 4, 9, 9, 64, "yes", "0.125", 2, False),
        (4, 2, 6, 9, 16, "yes", "0.25", 4, True),
    ],
}


def tc_inputs(key: dict, dtype: str, generator) -> list:
    """attention's inputs, with every key of one query hidden by a mask per query: that
    query reads nothing (0)."""
    inputs = check_inputs(key, dtype, generator)
    if key.get("mask_rows", 1) > 1:
        inputs[3][0, -1, :] = -math.inf
    return inputs


FAMILY = KernelFamily(
    "attention_tc",
    reference=reference,
    check_keys=lambda dtype: check_keys_of(dtype, TC_SHAPES[dtype]),
    check_inputs=tc_inputs,
    check_dtypes=dtypes.HALF_NAMES,
    extra_atol=length_atol,
    grid=lambda: grid_of("bf16", ", is_causal=True"),
)
