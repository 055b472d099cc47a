"""The additive form of a boolean mask: 0 where it is true, -inf where it is false."""

from __future__ import annotations

import itertools
import math

from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def site(op: graph.MaskBiasOp, fusion: Fusion) -> Site:
    key = {"n": max(1, math.prod(shape_of(op.input))), "T": dtype_of(op.result)}
    return Site("mask_bias", key, list(op.operands))


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    (mask,) = inputs
    return torch.zeros(mask.shape, dtype=torch.float64).masked_fill(mask == 0, -math.inf)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    return [torch.randint(0, 2, (key["n"],), generator=generator).to(torch.int8)]


def grid() -> list[tuple[str, str]]:
    """A boolean mask over (query, key) beside its attention, which makes it additive."""
    masks = itertools.product(
        [16, 40, 64, 100, 128, 200, 256, 333, 512, 1000], [(1, 1), (2, 4)], ["f32"]
    )
    wide = itertools.product([128, 300, 512, 1024, 2048], [(1, 16), (1, 64)], ["f32"])
    keys = []
    for length, (heads, queries), dtype in itertools.chain(masks, wide):
        q = key_grid.randn((1, heads, queries, 32), dtype)
        kv = ", ".join(key_grid.randn((1, heads, length, 32), dtype) for _ in range(2))
        mask = f"torch.ones(1, 1, {queries}, {length}, dtype=torch.bool)"
        sdpa = f"{key_grid.F}.scaled_dot_product_attention({q}, {kv}, attn_mask={mask})"
        keys.append((sdpa, ""))
    return keys


FAMILY = KernelFamily(
    "mask_bias",
    lowers=OpSites((graph.MaskBiasOp,), site),
    reference=reference,
    check_keys=lambda dtype: [{"n": n, "T": dtype} for n in (1, 37, 1000, 4099)],
    check_inputs=check_inputs,
    grid=grid,
)
