"""A copy of a strided view (any view of up to 4 dims once dims that read as one merge):
permutes, slices and broadcasts a kernel cannot read in place. It moves elements without
converting them, so it takes every storage type: floats, index tensors and masks."""

from __future__ import annotations

import math

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import FLOATS, Fusion, KernelFamily, OpSites, Site


def collapse_dims(shape: list[int], strides: list[int]) -> list[tuple[int, int]]:
    """(size, stride) per dim with dims of size 1 dropped and each dim merged into the one
    before it where the pair reads as one dim."""
    dims: list[tuple[int, int]] = []
    for size, stride in zip(shape, strides, strict=True):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    return dims or [(1, 0)]


def site(op: graph.AsStridedOp, fusion: Fusion) -> Site:
    shape = shape_of(op.result)
    strides = [s.value.data for s in op.strides.data]
    dims = collapse_dims(list(shape), strides)
    if len(dims) > 4:
        raise EmmyError(
            f"a strided copy of {len(dims)} dims that do not merge: at most 4 are supported"
        )
    dims = [(1, 0)] * (4 - len(dims)) + dims
    key: dict[str, int | str] = {"size": max(1, math.prod(shape_of(op.input)))}
    key |= {f"d{i}": size for i, (size, _) in enumerate(dims)}
    key |= {f"s{i}": stride for i, (_, stride) in enumerate(dims)}
    key |= {"offset": op.offset.value.data, "T": dtype_of(op.input)}
    return Site("permute", key, list(op.operands))


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    dims = [int(key[f"d{i}"]) for i in range(4)]
    strides = [int(key[f"s{i}"]) for i in range(4)]
    flat = inputs[0].reshape(-1)
    if flat.is_floating_point():
        flat = flat.double()
    return torch.as_strided(flat, dims, strides, int(key["offset"])).contiguous()


def _view(dims: tuple[int, ...], strides: tuple[int, ...]) -> dict:
    """A view's sizes and strides as the key's: 4 dims, leading sizes 1."""
    dims, strides = (1,) * (4 - len(dims)) + dims, (0,) * (4 - len(strides)) + strides
    return {
        **{f"d{i}": d for i, d in enumerate(dims)},
        **{f"s{i}": s for i, s in enumerate(strides)},
    }


# (storage size, view sizes, view strides, storage offset)
CHECK_VIEWS = [
    # [b, s, h, d] -> [b, h, s, d] with d = 6: vectors of 1 and 2
    (2 * 7 * 3 * 6, (2, 3, 7, 6), (126, 6, 18, 1), 0),
    # the same with d = 8: vectors of up to 8
    (2 * 5 * 3 * 8, (2, 3, 5, 8), (120, 8, 24, 1), 0),
    # [37, 19] -> [19, 37]
    (37 * 19, (19, 37), (1, 19), 0),
    # x[:, 10:20] of a [4, 30] tensor
    (4 * 30, (4, 10), (30, 1), 10),
    # [5, 1, 12] expanded to [5, 3, 12], and [4, 1] expanded to [4, 7]
    (5 * 12, (5, 3, 12), (12, 0, 1), 0),
    (4, (4, 7), (1, 0), 0),
]


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randint, randn

    if dtypes.is_float(dtype):
        return [randn((key["size"],), dtype, generator)]
    return [randint((key["size"],), dtype, generator)]


FAMILY = KernelFamily(
    "permute",
    lowers=OpSites((graph.AsStridedOp,), site),
    reference=reference,
    check_keys=lambda dtype: [
        {"size": size, **_view(d, s), "offset": offset, "T": dtype}
        for size, d, s, offset in CHECK_VIEWS
    ],
    check_inputs=check_inputs,
    # i32 moves as f32 does (4 bytes); i64 and i8 check the other element sizes
    check_dtypes=(*FLOATS, "i64", "i8"),
    grid=lambda: key_grid.row_keys(lambda x, cols, dtype: f"{x}.t().contiguous()"),
)
