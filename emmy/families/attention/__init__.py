"""Fused attention softmax(q kᵀ · scale + mask) v (SIMT): causal, grouped-query, masks per
key, per query or per head. An attention's site is the tensor-core family's where that
applies (see `site`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from xdsl.ir import SSAValue

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site

if TYPE_CHECKING:
    import torch

#: the host call that runs an attention by the vendor library (torch's SDPA)
VENDOR_FAMILY = "vendor_attention"


def attention_key(op: graph.AttentionOp) -> tuple[str, dict]:
    """The tensor-core family for f16/bf16 heads of a multiple of 16 up to 256, the SIMT
    family otherwise, the vendor library's host call for a `library` attention, and the
    key (the same for all three)."""
    key = problem_of(op.q, op.k, op.mask, float(op.scale.value.data), op.causal is not None)
    if op.library is not None:
        return VENDOR_FAMILY, key
    return "attention_tc" if on_tensor_cores(op.q) else "attention", key


def on_tensor_cores(q: SSAValue) -> bool:
    """Whether an attention of q (and its backward) runs on tensor cores: f16/bf16 heads
    of a multiple of 16 up to 256."""
    d = shape_of(q)[3]
    return dtypes.is_half(dtype_of(q)) and d % 16 == 0 and d <= 256


def problem_of(
    q: SSAValue, k: SSAValue, mask: SSAValue | None, scale: float, causal: bool
) -> dict[str, int | str]:
    """The key of an attention of q [batch, heads, q_len, d] over k [batch, kv_heads,
    kv_len, d], and of its backward's kernels."""
    batch, heads, q_len, d = shape_of(q)
    _, kv_heads, kv_len, _ = shape_of(k)
    key: dict[str, int | str] = {
        "bh": batch * heads,
        "kv_bh": batch * kv_heads,
        "q_len": q_len,
        "kv_len": kv_len,
        "d": d,
        "T": dtype_of(q),
        "causal": "yes" if causal else "no",
        "scale": repr(scale),
    }
    if mask is not None:
        # the mask's groups of heads: per batch, or per (batch, head)
        key |= {"masked": "yes", "batch": shape_of(mask)[0]}
        if len(shape_of(mask)) == 3:
            key["mask_rows"] = q_len
    return key


def site(op: graph.AttentionOp, fusion: Fusion) -> Site:
    family_name, key = attention_key(op)
    return Site(family_name, key, list(op.operands))


def reference(key: dict, inputs: list):
    q, k, v, *mask = inputs
    return probabilities(key, q, k, mask) @ heads_of_queries(key, v.double())


def heads_of_queries(key: dict, kv: torch.Tensor) -> torch.Tensor:
    """k or v [kv_bh, ...] repeated for each head of q that reads it (grouped-query)."""
    return kv.repeat_interleave(int(key["bh"]) // int(key["kv_bh"]), dim=0)


def scores(key: dict, q: torch.Tensor, k: torch.Tensor, mask: list) -> torch.Tensor:
    """scale · q kᵀ [+ mask] [+ causal mask] in float64, [bh, q_len, kv_len]; `mask` the
    attention's mask, or none."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    scores = q.double() @ heads_of_queries(key, k.double()).transpose(-2, -1)
    scores = scores * float(key["scale"])
    if str(key.get("masked", "no")) == "yes":
        heads = int(key["bh"]) // int(key["batch"])
        rows = int(key.get("mask_rows", 1))
        additive = mask[0].double().reshape(int(key["batch"]), rows, -1)
        scores = scores + additive.repeat_interleave(heads, dim=0)
    if str(key["causal"]) == "yes":
        rows, cols = scores.shape[-2:]
        hidden = torch.ones(rows, cols, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(hidden, float("-inf"))
    return scores


def probabilities(key: dict, q: torch.Tensor, k: torch.Tensor, mask: list) -> torch.Tensor:
    """softmax(scores) in float64; a query whose every key is masked reads nothing (0, as
    torch's attention gives), where a plain softmax would give NaN."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    values = scores(key, q, k, mask)
    hidden_rows = values.isneginf().all(dim=-1, keepdim=True)
    return torch.softmax(values.masked_fill(hidden_rows, 0.0), dim=-1).masked_fill(hidden_rows, 0.0)


def length_atol(key: dict) -> float:
    """f32 accumulation over the keys."""
    return 2e-6 * int(key["kv_len"])


# (bh, kv_bh, q_len, kv_len, d, causal, scale, mask batch or 0, mask per query too)
CHECK_SHAPES = [
    (1, 1, 1, 1, 4, "no", "0.5", 0, False),
    (2, 2, 13, 13, 64, "yes", "0.125", 0, False),
    (6, 2, 7, 20, 32, "no", "0.17677669", 0, False),
    (4, 1, 33, 33, 128, "yes", "0.08838835", 0, False),
    (6, 2, 7, 20, 32, "no", "0.17677669", 2, False),
    (4, 4, 9, 9, 64, "yes", "0.125", 2, False),
    (6, 2, 7, 20, 32, "no", "0.17677669", 2, True),
    (4, 2, 11, 11, 64, "no", "0.125", 2, True),
    # a mask per head: its groups are the bh heads
    (4, 2, 6, 9, 32, "yes", "0.17677669", 4, True),
]


def check_keys_of(dtype: str, shapes: list[tuple]) -> list[dict]:
    return [
        {
            "bh": bh,
            "kv_bh": kv,
            "q_len": ql,
            "kv_len": kl,
            "d": d,
            "T": dtype,
            "causal": c,
            "scale": sc,
            **({"masked": "yes", "batch": batch} if batch else {}),
            **({"mask_rows": ql} if per_query else {}),
        }
        for bh, kv, ql, kl, d, c, sc, batch, per_query in shapes
    ]


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    return [
        randn((key["bh"], key["q_len"], key["d"]), dtype, generator),
        randn((key["kv_bh"], key["kv_len"], key["d"]), dtype, generator),
        randn((key["kv_bh"], key["kv_len"], key["d"]), dtype, generator),
        *([attention_mask(key, dtype, generator)] if "masked" in key else []),
    ]


def attention_mask(key: dict, dtype: str, generator):
    """A padding mask [batch, kv_len], or with `mask_rows` a mask per query [batch, q_len,
    kv_len]: the padding mask plus a causal one (what a Hugging Face model builds), each
    query seeing at least its first key."""
    # torch stays off the compile path: only checks build inputs
    import torch

    padding = padding_mask(key["batch"], key["kv_len"], dtype, generator)
    rows = key.get("mask_rows", 1)
    if rows == 1:
        return padding
    hidden = torch.ones(rows, key["kv_len"], dtype=torch.bool).triu(1)
    causal = torch.zeros(rows, key["kv_len"]).masked_fill(hidden, -math.inf)
    return (padding.double()[:, None, :] + causal).to(padding.dtype)


def padding_mask(batch: int, kv_len: int, dtype: str, generator):
    """An additive mask per (batch, key): small values where a key is read, -inf on the
    padding (a third of the keys of the first batch, all but the first of the last)."""
    # torch stays off the compile path: only checks build inputs
    import torch

    mask = torch.randn((batch, kv_len), generator=generator, dtype=torch.float64) * 0.5
    mask[0, kv_len - kv_len // 3 :] = -math.inf
    mask[-1, 1:] = -math.inf
    return mask.to(dtypes.torch_dtype(dtype))


#: the dataset grid's attentions, (heads, length, head dim): attention's in f32, attention_tc's
#: (causal) in bf16, which runs on tensor cores
GRID_SHAPES = (
    (2, 16, 32), (4, 64, 64), (8, 33, 64), (2, 128, 128), (1, 200, 64), (4, 40, 128),
    (2, 96, 64), (1, 64, 128), (3, 48, 32), (1, 256, 64), (2, 80, 64), (4, 24, 128),
    (1, 160, 128), (2, 200, 32), (8, 16, 64), (2, 48, 128), (2, 112, 64), (1, 96, 128),
    (4, 56, 32), (3, 72, 64), (1, 144, 64), (2, 64, 128), (6, 32, 64), (1, 112, 128),
    (2, 176, 32), (4, 88, 64), (1, 48, 128), (2, 136, 64),
)  # fmt: skip


def grid_of(dtype: str, flags: str = "") -> list[tuple[str, str]]:
    """The dataset grid's attentions in one storage type, SDPA called with `flags`."""
    keys = []
    for heads, length, dim in GRID_SHAPES:
        qkv = ", ".join(key_grid.randn((1, heads, length, dim), dtype) for _ in range(3))
        keys.append((f"{key_grid.F}.scaled_dot_product_attention({qkv}{flags})", ""))
    return keys


FAMILY = KernelFamily(
    "attention",
    lowers=OpSites((graph.AttentionOp,), site),
    reference=reference,
    check_keys=lambda dtype: check_keys_of(dtype, CHECK_SHAPES),
    check_inputs=check_inputs,
    extra_atol=length_atol,
    grid=lambda: grid_of("f32"),
)
