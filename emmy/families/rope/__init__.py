"""Rotary position embedding of x [batch, seq, heads, dim] by cos and sin [seq, dim / 2]."""

from __future__ import annotations

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def site(op: graph.RopeOp, fusion: Fusion) -> Site:
    batch, seq, heads, dim = shape_of(op.x)
    key = {"tokens": batch * seq, "seq": seq, "heads": heads, "dim": dim, "half": dim // 2}
    return Site("rope", {**key, "T": dtype_of(op.x)}, list(op.operands))


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    x, cos, sin = (t.double() for t in inputs)
    half = int(key["half"])
    first, second = x[..., :half], x[..., half:]
    batch = int(key["tokens"]) // int(key["seq"])
    cos, sin = cos.repeat(batch, 1)[:, None, :], sin.repeat(batch, 1)[:, None, :]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    return [
        randn((key["tokens"], key["heads"], key["dim"]), dtype, generator),
        randn((key["seq"], key["half"]), dtype, generator),
        randn((key["seq"], key["half"]), dtype, generator),
    ]


FAMILY = KernelFamily(
    "rope",
    lowers=OpSites((graph.RopeOp,), site),
    reference=reference,
    check_keys=lambda dtype: [
        {"tokens": t, "seq": s, "heads": h, "dim": 2 * half, "half": half, "T": dtype}
        for t, s, h, half in [(1, 1, 1, 1), (10, 5, 3, 12), (9, 9, 2, 64)]
    ],
    check_inputs=check_inputs,
)
