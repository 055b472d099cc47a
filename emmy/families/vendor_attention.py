"""The vendor library's attention (torch's scaled_dot_product_attention: FlashAttention-2,
cuDNN or the memory-efficient kernel on a GPU, torch's CPU kernel on the emulator), a host
call with no kernel; attention-paths offers it as the `sdpa` path. Its key is the
attention's, and it is checked against the same reference."""

from __future__ import annotations

from emmy.dsl.library import canonical_key, family
from emmy.families import attention
from emmy.families.family import Family, FamilyKind


def host_key(key: dict) -> str:
    """The key text of the attention kernels' declaration (attention.emmy): one key for the
    fused kernel, the unfused path and the library."""
    return canonical_key(family("attention"), key)


def reference(key: dict, inputs: list):
    """The attention's reference over the host call's [groups, heads, len, d] views."""
    q, k, v, *mask = inputs
    flat = [t.reshape(-1, *t.shape[-2:]) for t in (q, k, v)]
    if mask:
        flat.append(mask[0].reshape(int(key["batch"]), -1, int(key["kv_len"])))
    return attention.reference(key, flat).reshape(q.shape)


FAMILY = Family(
    attention.VENDOR_FAMILY,
    FamilyKind.HOST_CALL,
    reference=reference,
    extra_atol=attention.length_atol,
    host_key=host_key,
    runs_by="torch's scaled_dot_product_attention (FlashAttention-2, cuDNN or efficient on a "
    "GPU, torch's CPU kernel on emu)",
)
