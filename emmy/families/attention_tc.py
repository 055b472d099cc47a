"""Fused attention on tensor cores (FlashAttention-2 style, f16/bf16). Its sites are built
by attention's (`attention.attention_key` picks it)."""

from __future__ import annotations

from emmy import dtypes
from emmy.families.attention import (
    CHECK_SHAPES,
    check_inputs,
    check_keys_of,
    length_atol,
    reference,
)
from emmy.families.family import Family, FamilyKind

# more rows than one block of queries, a causal block that stops early, fewer queries
# than keys under a causal mask and a mask per query
TC_SHAPES = [
    (2, 1, 70, 70, 16, "yes", "0.25", 0, False),
    (2, 2, 5, 100, 32, "yes", "0.17677669", 2, True),
]

FAMILY = Family(
    "attention_tc",
    FamilyKind.KERNEL,
    reference=reference,
    check_keys=lambda dtype: check_keys_of(
        dtype, [shape for shape in CHECK_SHAPES if shape[4] % 16 == 0] + TC_SHAPES
    ),
    check_inputs=check_inputs,
    check_dtypes=dtypes.HALF_NAMES,
    extra_atol=length_atol,
)
