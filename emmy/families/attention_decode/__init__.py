"""Attention of the newest tokens over a static KV cache at a runtime length (a decode step,
emmy::cached_attention): one kernel per cache size, whatever the length. With `splits` > 1
its blocks read chunks of the cache and write parts (split-KV, the second option of an
`attention_decode_path`; attention_decode_combine adds the parts up)."""

from __future__ import annotations

import math

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site

#: the key's names the kernel's shapes read, in the order of the problem key
KEY = ("batch", "heads", "kv_heads", "new", "max_len", "dim", "T")


def decode_key(op: graph.CachedAttentionOp) -> dict:
    """The key: the cache's size, never the length (a value on the device)."""
    batch, heads, new, dim = shape_of(op.q)
    kv_heads, max_len = shape_of(op.k_cache)[1:3]
    values = (batch, heads, kv_heads, new, max_len, dim, dtype_of(op.q))
    return dict(zip(KEY, values, strict=True))


def site(op: graph.CachedAttentionOp, fusion: Fusion) -> Site:
    return Site("attention_decode", decode_key(op), list(op.operands))


def reference(key: dict, inputs: list):
    """The output, or with `splits` > 1 each chunk's normalised output and log-sum-exp."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    q, k, v = (t.double() for t in inputs[:3])
    max_len, new, splits = int(key["max_len"]), int(key["new"]), int(key.get("splits", 1))
    end = min(int(inputs[3].reshape(-1)[0]), max_len)
    # positions from `end` on may hold anything: they weigh nothing and are never read
    k, v = k.clone(), v.clone()
    k[:, :, end:], v[:, :, end:] = 0.0, 0.0
    group = int(key["heads"]) // int(key["kv_heads"])
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(int(key["dim"]))
    positions = torch.arange(max_len)
    own = end - new + torch.arange(new)
    hidden = (positions[None, :] > own[:, None]) | (positions[None, :] >= end)
    chunk = math.ceil(max_len / splits)
    parts, lses = [], []
    for s in range(splits):
        outside = (positions < s * chunk) | (positions >= (s + 1) * chunk)
        masked = scores.masked_fill(hidden | outside[None, :], -math.inf)
        lse = torch.logsumexp(masked, dim=-1)
        weights = torch.exp(masked - lse[..., None]).nan_to_num(0.0)
        parts.append(weights @ v)
        lses.append(lse)
    if splits == 1:
        return parts[0]
    return torch.stack(parts), torch.stack(lses)


def length_atol(key: dict) -> float:
    """f32 accumulation over the cache."""
    return 2e-6 * int(key["max_len"])


def length_range(key: dict) -> dict[int, tuple[int, int]]:
    """Input 3 is the cache's length: at least `new` (this step's tokens), at most max_len."""
    return {3: (int(key["new"]), int(key["max_len"]))}


# (batch, heads, kv_heads, new, max_len, dim, splits)
CHECK_SHAPES = [
    (1, 1, 1, 1, 1, 4, 1),
    (2, 4, 2, 1, 37, 32, 1),
    (1, 6, 2, 4, 20, 16, 1),
    (2, 2, 1, 3, 50, 8, 3),
]


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    cache = (key["batch"], key["kv_heads"], key["max_len"], key["dim"])
    lo, hi = length_range(key)[3]
    length = torch.randint(lo, hi + 1, (1,), generator=generator, dtype=torch.int64)
    return [
        randn((key["batch"], key["heads"], key["new"], key["dim"]), dtype, generator),
        randn(cache, dtype, generator),
        randn(cache, dtype, generator),
        length,
    ]


FAMILY = KernelFamily(
    "attention_decode",
    lowers=OpSites((graph.CachedAttentionOp,), site),
    reference=reference,
    check_keys=lambda dtype: [
        {**dict(zip(KEY, (*shape[:6], dtype), strict=True)), "splits": shape[6]}
        for shape in CHECK_SHAPES
    ],
    check_inputs=check_inputs,
    extra_atol=length_atol,
    input_ranges=length_range,
    # the storage types' reads and writes are the other families' too: f16 adds nothing
    check_dtypes=("f32", "bf16"),
)
