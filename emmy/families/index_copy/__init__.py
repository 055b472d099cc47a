"""Rows replaced at runtime positions (`graph.index_copy`: a static KV cache's update):
the key has the shapes only, the positions being an input."""

from __future__ import annotations

import math

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site, WritesOver


def index_copy_key(outer: int, rows: int, inner: int, m: int, dtype: str, index: str) -> dict:
    return {"outer": outer, "rows": rows, "inner": inner, "m": m, "T": dtype, "I": index}


def site(op: graph.IndexCopyOp, fusion: Fusion) -> Site:
    shape, dim = shape_of(op.input), op.dim.value.data
    key = index_copy_key(
        math.prod(shape[:dim]),
        shape[dim],
        math.prod(shape[dim + 1 :]),
        math.prod(shape_of(op.index)),
        dtype_of(op.input),
        dtype_of(op.index),
    )
    return Site("index_copy", key, [op.input, op.index, op.source])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    x, index, source = inputs
    outer, rows, inner = int(key["outer"]), int(key["rows"]), int(key["inner"])
    x = x.reshape(outer, rows, inner)
    source = source.reshape(outer, -1, inner)
    if x.is_floating_point():
        x, source = x.double(), source.double()
    return x.index_copy(1, index.reshape(-1).long(), source)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randint, randn

    outer, rows, inner, m = (int(key[k]) for k in ("outer", "rows", "inner", "m"))
    random = randn if dtypes.is_float(dtype) else randint
    # distinct positions: torch leaves a repeated one undefined
    index = torch.randperm(rows, generator=generator)[:m].to(dtypes.torch_dtype(key["I"]))
    return [
        random((outer, rows, inner), dtype, generator),
        index,
        random((outer, m, inner), dtype, generator),
    ]


FAMILY = KernelFamily(
    "index_copy",
    lowers=OpSites((graph.IndexCopyOp,), site),
    reference=reference,
    # a decode step's one row, a prefill's several (i32 positions), ragged inner sizes
    check_keys=lambda dtype: [
        index_copy_key(4, 9, 16, 1, dtype, "i64"),
        index_copy_key(2, 11, 3, 5, dtype, "i32"),
        index_copy_key(1, 7, 8, 7, dtype, "i64"),
    ],
    check_inputs=check_inputs,
    # a kernel moves elements by their bytes: 4 (f32), 2 (bf16, as f16) and 8 (i64)
    check_dtypes=("f32", "bf16", "i64"),
    # each element is read and written at one place by one thread: a KV cache updated in
    # place is written over
    writes_over=WritesOver.INPUT,
)
