"""The vendor library's attention (torch's scaled_dot_product_attention: FlashAttention-2,
cuDNN or the memory-efficient kernel on a GPU, torch's CPU kernel on the emulator), a host
call with no kernel; offer-paths offers it as the `sdpa` path. Its key is the
attention's, and it is checked against the same reference."""

from __future__ import annotations

from collections.abc import Mapping

from emmy.base.device_records import BufferArg, VendorAttention
from emmy.base.problem_key import ProblemKey
from emmy.dsl.keys import problem_key
from emmy.dsl.library import declaration
from emmy.families import attention
from emmy.families.family import HostCallFamily


def host_key(key: dict) -> ProblemKey:
    """The key text of the attention kernels' declaration (attention.emmy): one key for the
    fused kernel, the unfused path and the library."""
    return problem_key(declaration("attention"), key)


def reference(key: dict, inputs: list):
    """The attention's reference over the host call's [groups, heads, len, d] views."""
    q, k, v, *mask = inputs
    flat = [t.reshape(-1, *t.shape[-2:]) for t in (q, k, v)]
    if mask:
        flat.append(mask[0].reshape(int(key["batch"]), -1, int(key["kv_len"])))
    return attention.reference(key, flat).reshape(q.shape)


def host_call(key: Mapping[str, int | str], args: tuple[BufferArg, ...]) -> VendorAttention:
    """SDPA at an attention's key on buffers q, k, v, [mask], o."""
    q, *rest = sdpa_shapes(key)
    causal, scale = key["causal"] == "yes", float(key["scale"])
    return VendorAttention(args, (q, *rest, q), str(key["T"]), causal, scale)


def sdpa_shapes(key: Mapping[str, int | str]) -> list[tuple[int, ...]]:
    """q, k, v and [mask] at an attention's key, viewed as SDPA takes them: [groups, heads,
    len, d], the groups those of the mask (its batch; one group for a mask per head), so
    that the mask broadcasts over the heads of its group without a copy."""
    bh, kv_bh, q_len, kv_len, d = (int(key[n]) for n in ("bh", "kv_bh", "q_len", "kv_len", "d"))
    masked = key.get("masked", "no") == "yes"
    mask_groups = int(key.get("batch", 1))
    groups = mask_groups if masked and mask_groups != bh else 1
    shapes = [
        (groups, bh // groups, q_len, d),
        (groups, kv_bh // groups, kv_len, d),
        (groups, kv_bh // groups, kv_len, d),
    ]
    if masked:
        heads_of_mask = bh // groups if mask_groups == bh else 1
        shapes.append((groups, heads_of_mask, int(key.get("mask_rows", 1)), kv_len))
    return shapes


FAMILY = HostCallFamily(
    attention.VENDOR_FAMILY,
    reference=reference,
    extra_atol=attention.length_atol,
    host_key=host_key,
    host_call=host_call,
    runs_by="torch's scaled_dot_product_attention (FlashAttention-2, cuDNN or efficient on a "
    "GPU, torch's CPU kernel on emu)",
)
