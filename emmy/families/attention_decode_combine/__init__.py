"""The second kernel of split-KV decode attention: the chunks' parts, weighted by their
log-sum-exps, added up. Its sites come from offer-paths (the split options of an
`attention_decode_path`)."""

from __future__ import annotations

import math

from emmy.families.family import KernelFamily


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    part, lse = inputs[0].double(), inputs[1].double()
    top = lse.max(dim=0).values.nan_to_num(neginf=0.0)
    weights = torch.exp(lse - top)
    total = weights.sum(dim=0)
    out = (weights[..., None] * part).sum(dim=0) / total[..., None]
    return out.masked_fill((total == 0)[..., None], 0.0)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    splits, rows = key["splits"], key["rows"]
    lse = randn((splits, rows), "f32", generator, scale=3.0)
    # chunks past the length saw nothing: the last chunk of every row, every chunk of row 0
    lse[-1] = -math.inf
    lse[:, 0] = -math.inf
    return [randn((splits, rows, key["dim"]), "f32", generator), lse]


FAMILY = KernelFamily(
    "attention_decode_combine",
    reference=reference,
    check_keys=lambda dtype: [
        {"splits": s, "rows": r, "dim": d, "T": dtype} for s, r, d in [(2, 1, 4), (5, 9, 40)]
    ],
    check_inputs=check_inputs,
    check_dtypes=("f32", "bf16"),
)
