"""A gather copy: each output element reads one input element at an address mapped from
its position, through strides (negative for a flip, 0 for a broadcast) and up to two index
tensors read with their own strides; optionally keeping one triangle of each matrix.
index_select, gather, advanced indexing, flip, roll (`graph.gather`) and triu/tril
(`graph.triangle`) are its sites."""

from __future__ import annotations

import math
from collections.abc import Sequence

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site

#: the output dims a key has, once the dims that read as one merge
DIMS = 4
#: the index tensors a key has
INDICES = 2


def collapse(shape: list[int], strides: list[list[int]]) -> list[tuple[int, list[int]]]:
    """(size, a stride per stride list) per dim, dims of size 1 dropped and each dim merged
    into the one before it where every stride list reads the pair as one dim."""
    dims: list[tuple[int, list[int]]] = []
    for d, size in enumerate(shape):
        if size == 1:
            continue
        here = [s[d] for s in strides]
        if dims and all(p == h * size for p, h in zip(dims[-1][1], here, strict=True)):
            dims[-1] = (dims[-1][0] * size, here)
        else:
            dims.append((size, here))
    return dims or [(1, [0] * len(strides))]


def _ints(attr) -> list[int]:
    return [a.value.data for a in attr.data]


def gather_key(
    size: int,
    shape: list[int],
    strides: list[int],
    offset: int,
    dtype: str,
    indices: Sequence[tuple[str, int, list[int], int, int]] = (),
) -> dict[str, int | str]:
    """The key of a gather of `shape` from `size` elements; `indices` are, per index
    tensor, its dtype, its element count, its strides per output dim, the size of the dim
    it picks in and that dim's stride."""
    if len(indices) > INDICES:
        raise EmmyError(
            f"a gather by {len(indices)} index tensors: at most {INDICES} are supported"
        )
    dims = collapse(shape, [strides, *(index[2] for index in indices)])
    if len(dims) > DIMS:
        raise EmmyError(
            f"a gather of {len(dims)} dims that do not merge: at most {DIMS} are supported"
        )
    dims = [(1, [0] * (1 + len(indices)))] * (DIMS - len(dims)) + dims
    key: dict[str, int | str] = {"size": max(1, size)}
    key |= {f"d{k}": n for k, (n, _) in enumerate(dims)}
    key |= {f"s{k}": s[0] for k, (_, s) in enumerate(dims)}
    key |= {"offset": offset, "T": dtype}
    if indices:
        key["indices"] = len(indices)
    for t, (index_dtype, count, _, picks, step) in enumerate(indices):
        key |= {"IJ"[t]: index_dtype, f"m{t}": max(1, count), f"n{t}": picks, f"r{t}": step}
        key |= {f"q{t}{k}": s[1 + t] for k, (_, s) in enumerate(dims)}
    return key


def gather_site(op: graph.GatherOp, fusion: Fusion) -> Site:
    indices = [
        (dtype_of(value), math.prod(shape_of(value)), _ints(strides), picks, step)
        for value, strides, picks, step in zip(
            op.indices,
            op.index_strides.data,
            _ints(op.index_sizes),
            _ints(op.index_steps),
            strict=True,
        )
    ]
    shape = list(shape_of(op.result))
    size = math.prod(shape_of(op.input))
    key = gather_key(
        size, shape, _ints(op.strides), op.offset.value.data, dtype_of(op.input), indices
    )
    return Site("gather", key, [op.input, *op.indices])


def triangle_site(op: graph.TriangleOp, fusion: Fusion) -> Site:
    *batch, rows, cols = shape_of(op.input)
    key = {
        "size": max(1, math.prod(batch) * rows * cols),
        **{"d0": 1, "d1": math.prod(batch), "d2": rows, "d3": cols},
        **{"s0": 0, "s1": rows * cols, "s2": cols, "s3": 1},
        "offset": 0,
        "T": dtype_of(op.input),
        "tri": op.part.data.value,
        "diag": op.diagonal.value.data,
    }
    return Site("gather", key, [op.input])


def site(op: graph.GatherOp | graph.TriangleOp, fusion: Fusion) -> Site:
    if isinstance(op, graph.TriangleOp):
        return triangle_site(op, fusion)
    return gather_site(op, fusion)


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    x = inputs[0].reshape(-1)
    if x.is_floating_point():
        x = x.double()
    shape = [int(key[f"d{k}"]) for k in range(DIMS)]
    grid = torch.meshgrid(*(torch.arange(n) for n in shape), indexing="ij")
    at = int(key["offset"]) + sum(o * int(key[f"s{k}"]) for k, o in enumerate(grid))
    for t in range(int(key.get("indices", 0))):
        index = inputs[1 + t].reshape(-1).long()
        picks = int(key[f"n{t}"])
        k = index[sum(o * int(key.get(f"q{t}{d}", 0)) for d, o in enumerate(grid))]
        at = at + (torch.where(k < 0, k + picks, k).clamp(0, picks - 1) * int(key[f"r{t}"]))
    y = x[at]
    tri, diag = str(key.get("tri", "none")), int(key.get("diag", 0))
    if tri != "none":
        from_diagonal = grid[3] - grid[2]
        keep = from_diagonal >= diag if tri == "upper" else from_diagonal <= diag
        y = torch.where(keep, y, torch.zeros((), dtype=y.dtype))
    return y


def _contiguous(shape: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step if n > 1 else 0)
        step *= n
    return strides


def check_keys(dtype: str) -> list[dict]:
    # index_select of rows 3 of a [9, 3, 16] tensor by 5 ids (negative ones count from the end)
    keys = [
        gather_key(9 * 3 * 16, [9, 5, 16], [48, 0, 1], 0, dtype, [("i64", 5, [0, 1, 0], 3, 16)])
    ]
    # torch.gather along dim 1 of a [6, 10] tensor by a [6, 7] index of i32
    keys.append(gather_key(60, [6, 7], [10, 0], 0, dtype, [("i32", 42, [7, 1], 10, 1)]))
    # x[a, b] of a [4, 5, 8] tensor, a [3, 1] and b [1, 6] broadcasting to [3, 6]
    keys.append(
        gather_key(
            160,
            [3, 6, 8],
            [0, 0, 1],
            0,
            dtype,
            [("i64", 3, [1, 0, 0], 4, 40), ("i64", 6, [0, 1, 0], 5, 8)],
        )
    )
    # flips: of both dims of [7, 12], and of the first of [5, 3, 8] (vectors along the last)
    keys.append(gather_key(84, [7, 12], [-12, -1], 83, dtype))
    keys.append(gather_key(120, [5, 3, 8], [-24, 8, 1], 96, dtype))
    if dtypes.is_float(dtype):
        # triu/tril of [2, 5, 9] and [7, 4] with diagonals on and off the main one
        for part, diagonal, shape in [
            ("upper", 1, (2, 5, 9)),
            ("lower", -1, (7, 4)),
            ("upper", 0, (4, 8)),
        ]:
            key = gather_key(math.prod(shape), list(shape), _contiguous(shape), 0, dtype)
            *batch, rows, cols = shape
            key |= {"d0": 1, "d1": math.prod(batch), "d2": rows, "d3": cols}
            key |= {"s0": 0, "s1": rows * cols, "s2": cols, "s3": 1, "tri": part, "diag": diagonal}
            keys.append(key)
    return keys


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randint, randn

    size = (int(key["size"]),)
    x = randn(size, dtype, generator) if dtypes.is_float(dtype) else randint(size, dtype, generator)
    inputs = [x]
    for t in range(int(key.get("indices", 0))):
        picks = int(key[f"n{t}"])
        index = torch.randint(-picks, picks, (int(key[f"m{t}"]),), generator=generator)
        inputs.append(index.to(dtypes.torch_dtype(str(key["IJ"[t]]))))
    return inputs


FAMILY = KernelFamily(
    "gather",
    lowers=OpSites((graph.GatherOp, graph.TriangleOp), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    # a kernel moves elements by their bytes: 4 (f32), 2 (bf16, as f16) and 8 (i64)
    check_dtypes=("f32", "bf16", "i64"),
)
