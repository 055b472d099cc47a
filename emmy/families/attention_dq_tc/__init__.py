"""Attention's query gradient on tensor cores (FlashAttention-2's scheme, f16/bf16), from
the queries' statistics. Its sites are built by attention_stats's (it picks this family
where attention picks attention_tc)."""

from __future__ import annotations

from emmy.base import dtypes
from emmy.families import attention_dq, attention_stats
from emmy.families.attention import check_keys_of
from emmy.families.attention_tc import TC_SHAPES
from emmy.families.family import KernelFamily

FAMILY = KernelFamily(
    "attention_dq_tc",
    reference=attention_dq.reference,
    check_keys=lambda dtype: check_keys_of(dtype, TC_SHAPES[dtype]),
    check_inputs=attention_stats.gradient_check_inputs,
    check_dtypes=dtypes.HALF_NAMES,
    extra_atol=attention_stats.rounded_atol,
    derive_inputs=attention_stats.with_their_stats,
)
