"""Inclusive prefix sums (graph.cumsum) over the middle dim of [rows, cols, inner]: floats
accumulated in f32, integers and booleans in i64."""

from __future__ import annotations

import math

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def site(op: graph.CumsumOp, fusion: Fusion) -> Site:
    shape = shape_of(op.input)
    dim = op.scanned_dim
    dtype = dtype_of(op.input)
    key = {
        "rows": math.prod(shape[:dim]),
        "cols": shape[dim],
        "inner": math.prod(shape[dim + 1 :]),
        "T": dtype,
        "Y": dtype_of(op.result),
        "acc": "f32" if dtypes.is_float(dtype) else "i64",
    }
    return Site("cumsum", key, [op.input])


def reference(key: dict, inputs: list):
    x = inputs[0]
    if key["acc"] == "i64":
        return x.long().cumsum(1)
    return x.double().cumsum(1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    shape = (key["rows"], key["cols"], key["inner"])
    if dtypes.is_float(dtype):
        return [randn(shape, dtype, generator)]
    if dtype == "i8":  # a mask: 0 or 1
        x = torch.randint(0, 2, shape, generator=generator)
    else:  # far from overflowing a running sum
        high = min(2**40, 2 ** (8 * dtypes.lookup(dtype).bytes - 2))
        x = torch.randint(-high, high, shape, generator=generator)
    return [x.to(dtypes.torch_dtype(dtype))]


def check_keys(dtype: str) -> list[dict]:
    acc = "f32" if dtypes.is_float(dtype) else "i64"
    out = dtype if acc == "f32" else "i64"
    return [
        {"rows": r, "cols": c, "inner": i, "T": dtype, "Y": out, "acc": acc}
        for r, c, i in [(3, 1, 1), (2, 16, 1), (5, 97, 1), (2, 1000, 1), (2, 9, 5), (1, 6, 33)]
    ]


FAMILY = KernelFamily(
    "cumsum",
    lowers=OpSites((graph.CumsumOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    check_dtypes=(*dtypes.FLOAT_NAMES, "i64", "i32", "i8"),
    # f32 accumulation of a running sum: its error grows with the row
    extra_atol=lambda key: 4e-6 * math.sqrt(int(key["cols"])) if key["acc"] == "f32" else 0.0,
)
