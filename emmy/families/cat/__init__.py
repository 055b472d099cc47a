"""Concatenation of 2 to 4 inputs along one dim (the frontend concatenates more in
steps): `graph.cat`'s sites."""

from __future__ import annotations

import math

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site

#: the inputs one kernel takes
PARTS = 4


def site(op: graph.CatOp, fusion: Fusion) -> Site:
    dim = op.dim.value.data
    shape = shape_of(op.result)
    widths = [shape_of(value)[dim] for value in op.inputs]
    if not 2 <= len(widths) <= PARTS:
        raise EmmyError(f"a cat of {len(widths)} inputs: one kernel takes 2 to {PARTS}")
    key: dict[str, int | str] = {
        "outer": math.prod(shape[:dim]),
        "total": shape[dim],
        "inner": math.prod(shape[dim + 1 :]),
        "T": dtype_of(op.result),
        "parts": len(widths),
    }
    key |= {f"w{k}": w for k, w in enumerate(widths)}
    return Site("cat", key, list(op.inputs))


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    outer, inner = int(key["outer"]), int(key["inner"])
    parts = [x.reshape(outer, -1, inner) for x in inputs]
    parts = [x.double() if x.is_floating_point() else x for x in parts]
    return torch.cat(parts, dim=1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randint, randn

    random = randn if dtypes.is_float(dtype) else randint
    shapes = [(key["outer"], key[f"w{k}"], key["inner"]) for k in range(int(key["parts"]))]
    return [random(shape, dtype, generator) for shape in shapes]


def _key(outer: int, inner: int, widths: list[int], dtype: str) -> dict:
    return {
        "outer": outer,
        "total": sum(widths),
        "inner": inner,
        "T": dtype,
        "parts": len(widths),
        **{f"w{k}": w for k, w in enumerate(widths)},
    }


FAMILY = KernelFamily(
    "cat",
    lowers=OpSites((graph.CatOp,), site),
    reference=reference,
    # ragged widths, a last-dim cat (inner 1) and one of 16-element rows (vectors of 8)
    check_keys=lambda dtype: [
        _key(3, 1, [5, 2], dtype),
        _key(2, 16, [3, 1, 4], dtype),
        _key(5, 6, [2, 7, 1, 3], dtype),
        _key(1, 8, [9, 4, 6, 2], dtype),
    ],
    check_inputs=check_inputs,
    # a kernel moves elements by their bytes: 4 (f32), 2 (bf16, as f16) and 8 (i64)
    check_dtypes=("f32", "bf16", "i64"),
)
