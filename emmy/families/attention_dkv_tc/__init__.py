"""Attention's key or value gradient on tensor cores (FlashAttention-2's scheme, f16/bf16),
from the queries' statistics. Its sites are built by attention_stats's (it picks this
family where attention picks attention_tc)."""

from __future__ import annotations

from emmy.base import dtypes
from emmy.families import attention_dkv, attention_stats
from emmy.families.attention import check_keys_of
from emmy.families.attention_tc import TC_SHAPES
from emmy.families.family import KernelFamily


def check_keys(dtype: str) -> list[dict]:
    """The tensor-core attention's check keys, each gradient at every other one."""
    return attention_dkv.each_part(check_keys_of(dtype, TC_SHAPES[dtype]), again=2)


FAMILY = KernelFamily(
    "attention_dkv_tc",
    reference=attention_dkv.reference,
    check_keys=check_keys,
    check_inputs=attention_stats.gradient_check_inputs,
    check_dtypes=dtypes.HALF_NAMES,
    extra_atol=attention_stats.rounded_atol,
    derive_inputs=attention_stats.with_their_stats,
)
