"""An embedding's weight gradient: the gradient's rows summed into the table's rows by id."""

from __future__ import annotations

from xdsl.ir import Operation

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families.embedding import embedding_key
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.EmbeddingBackwardOp)
    key = embedding_key(op.ids, op.result)
    if op.scale_by_frequency is not None:
        key["scale"] = "freq"
    return Site("embedding_backward", key, [op.ids, op.grad])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    ids, grad = inputs
    ids = ids.long().reshape(-1)
    rows = grad.double().reshape(ids.numel(), -1)
    kept = (ids >= 0) & (ids < int(key["vocab"]))
    table = torch.zeros(int(key["vocab"]), rows.shape[1], dtype=torch.float64)
    table.index_add_(0, ids[kept], rows[kept])
    if key.get("scale", "no") == "freq":
        counts = torch.bincount(ids[kept], minlength=int(key["vocab"])).clamp(min=1)
        table /= counts.view(-1, 1)
    return table


def check_keys(dtype: str) -> list[dict]:
    """Ids repeated (more tokens than rows) and spread thin (a table wider than the
    tokens), row counts off every block size, dims off every vector width, one wide
    enough for a block of 512 threads; scaled by the ids' frequency."""
    return [
        {"tokens": tokens, "vocab": vocab, "dim": dim, "T": dtype, "I": index}
        for tokens, vocab, dim, index in [
            (1, 3, 1, "i64"),
            (40, 7, 24, "i32"),
            (33, 200, 64, "i64"),
            (96, 50, 130, "i64"),
            (20, 70, 520, "i32"),
        ]
    ] + [
        # scale_grad_by_freq: each row over its tokens' count
        {"tokens": 40, "vocab": 7, "dim": 24, "T": dtype, "I": "i64", "scale": "freq"},
        {"tokens": 33, "vocab": 200, "dim": 66, "T": dtype, "I": "i32", "scale": "freq"},
    ]


def check_inputs(key: dict, dtype: str, generator) -> list:
    """Ids over the table, one in five outside it (-1, as a padding row's tokens come),
    and the gradient's rows."""
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    tokens = key["tokens"]
    ids = torch.randint(0, key["vocab"], (tokens,), generator=generator)
    padding = torch.rand(tokens, generator=generator) < 0.2
    ids = torch.where(padding, -1, ids).to(dtypes.torch_dtype(key["I"]))
    return [ids, randn((tokens, key["dim"]), dtype, generator)]


FAMILY = KernelFamily(
    "embedding_backward",
    lowers=OpSites((graph.EmbeddingBackwardOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
)
