"""A gather of table rows by token id (ids clamped into the table)."""

from __future__ import annotations

import itertools
import math

from xdsl.ir import SSAValue

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def embedding_key(ids: SSAValue, table: SSAValue) -> dict[str, int | str]:
    """The key of an embedding, or of its gradient, over ids and a table [vocab, dim]."""
    vocab, dim = shape_of(table)
    return {
        "tokens": math.prod(shape_of(ids)),
        "vocab": vocab,
        "dim": dim,
        "T": dtype_of(table),
        "I": dtype_of(ids),
    }


def site(op: graph.EmbeddingOp, fusion: Fusion) -> Site:
    return Site("embedding", embedding_key(op.ids, op.table), [op.ids, op.table])


def reference(key: dict, inputs: list):
    ids, table = inputs
    return table.double()[ids.long().clamp(0, int(key["vocab"]) - 1)]


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    ids = torch.randint(0, key["vocab"], (key["tokens"],), generator=generator)
    return [
        ids.to(dtypes.torch_dtype(key["I"])),
        randn((key["vocab"], key["dim"]), dtype, generator),
    ]


def grid() -> list[tuple[str, str]]:
    keys = []
    for (tokens, vocab, dim), dtype in itertools.product(
        [(8, 100, 64), (64, 1000, 256), (200, 512, 96), (1, 5000, 768), (512, 300, 128),
         (33, 2000, 40), (128, 4096, 512), (16, 64, 1024), (1024, 256, 32), (300, 777, 200),
         (48, 50257, 768), (2048, 128, 16)],
        key_grid.DTYPES,
    ):  # fmt: skip
        ids = f"torch.randint(0, {vocab}, ({tokens},))"
        table = key_grid.randn((vocab, dim), dtype)
        keys.append((f"{key_grid.F}.embedding({ids}, {table})", ""))
    return keys


FAMILY = KernelFamily(
    "embedding",
    lowers=OpSites((graph.EmbeddingOp,), site),
    reference=reference,
    check_keys=lambda dtype: [
        {"tokens": t, "vocab": v, "dim": dm, "T": dtype, "I": i}
        for t, v, dm, i in [(1, 3, 1, "i64"), (13, 50, 24, "i32"), (9, 200, 64, "i64")]
    ],
    check_inputs=check_inputs,
    grid=grid,
)
