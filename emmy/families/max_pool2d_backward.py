"""Max pooling's input gradient (graph.max_pool_backward): each element sums the output
gradients of the windows that kept it, by the pooling's indices."""

from __future__ import annotations

import math

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Family, FamilyKind, Fusion, Site

#: a fixed window's fields in the key, by the name graph ops give them
FIELDS = {"k": "window", "s": "stride", "p": "padding", "d": "dilation"}


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.MaxPoolBackwardOp)
    *batch, oh, ow = shape_of(op.grad)
    h, w = shape_of(op.result)[-2:]
    key: dict[str, int | str] = {"rows": math.prod(batch), "h": h, "w": w, "oh": oh, "ow": ow}
    key |= {"T": dtype_of(op.grad), "I": "i64"}
    fixed = op.fixed()
    for prefix, field in FIELDS.items():
        key |= {f"{prefix}h": fixed[field][0], f"{prefix}w": fixed[field][1]}
    return Site("max_pool2d_backward", key, [op.grad, op.indices])


def _geometry(key: dict) -> dict[str, tuple[int, int]]:
    defaults = {"k": 1, "s": 1, "p": 0, "d": 1}
    return {
        field: (int(key.get(f"{p}h", defaults[p])), int(key.get(f"{p}w", defaults[p])))
        for p, field in FIELDS.items()
    }


def reference(key: dict, inputs: list):
    """Per tap of the window: dy where the output's index is the element that tap reads,
    added at that element (an index that is no tap of its window adds nothing)."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    rows, h, w, oh, ow = (int(key[name]) for name in ("rows", "h", "w", "oh", "ow"))
    dy = inputs[0].double().reshape(rows, oh, ow)
    indices = inputs[1].long().reshape(rows, oh, ow)
    g = _geometry(key)
    dx = torch.zeros(rows, h * w, dtype=torch.float64)
    oy, ox = torch.arange(oh).view(oh, 1), torch.arange(ow).view(1, ow)
    for i in range(g["window"][0]):
        for j in range(g["window"][1]):
            iy = oy * g["stride"][0] - g["padding"][0] + i * g["dilation"][0]
            ix = ox * g["stride"][1] - g["padding"][1] + j * g["dilation"][1]
            tap = iy * w + ix
            kept = (indices == tap) & (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            where = torch.where(kept, tap, 0).reshape(rows, -1)
            dx.scatter_add_(1, where, torch.where(kept, dy, 0.0).reshape(rows, -1))
    return dx.reshape(rows, h, w)


#: (rows, h, w, window, stride, padding, dilation, ceil_mode): torch's default stride (the
#: window), overlapping windows, padding, dilation, ceil_mode's ragged last window, 1-D
CHECK_SHAPES = [
    (3, 8, 10, (2, 2), (2, 2), (0, 0), (1, 1), False),
    (2, 9, 11, (3, 3), (2, 2), (1, 1), (1, 1), False),
    (2, 13, 12, (3, 2), (1, 2), (1, 0), (2, 1), False),
    (4, 7, 9, (2, 3), (2, 2), (0, 1), (1, 1), True),
    (5, 1, 17, (1, 3), (1, 2), (0, 1), (1, 1), False),
]


def _out(size: int, window: int, stride: int, pad: int, dilation: int, ceil: bool) -> int:
    span = size + 2 * pad - dilation * (window - 1) - 1
    out = (-(-span // stride) if ceil else span // stride) + 1
    # torch's rule: the last window starts inside the plane or its left padding
    return out - 1 if ceil and (out - 1) * stride >= size + pad else out


def check_keys(dtype: str) -> list[dict]:
    keys = []
    for rows, h, w, window, stride, pad, dil, ceil in CHECK_SHAPES:
        oh = _out(h, window[0], stride[0], pad[0], dil[0], ceil)
        ow = _out(w, window[1], stride[1], pad[1], dil[1], ceil)
        key: dict = {"rows": rows, "h": h, "w": w, "oh": oh, "ow": ow, "T": dtype, "I": "i64"}
        for (prefix, _), pair in zip(FIELDS.items(), (window, stride, pad, dil), strict=True):
            key |= {f"{prefix}h": pair[0], f"{prefix}w": pair[1]}
        keys.append(key)
    return keys


def check_inputs(key: dict, dtype: str, generator) -> list:
    """dy, and the indices torch's max pooling gives of random planes (ties broken as
    torch breaks them), one in seven replaced by an element no tap of its window reads."""
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    g = _geometry(key)
    x = torch.randn(int(key["rows"]), int(key["h"]), int(key["w"]), generator=generator)
    ceil = _out(int(key["h"]), g["window"][0], g["stride"][0], g["padding"][0], g["dilation"][0], False) != int(key["oh"]) or _out(int(key["w"]), g["window"][1], g["stride"][1], g["padding"][1], g["dilation"][1], False) != int(key["ow"])  # fmt: skip
    _, indices = torch.nn.functional.max_pool2d(
        x, g["window"], g["stride"], g["padding"], g["dilation"], ceil, return_indices=True
    )
    stray = torch.rand(indices.shape, generator=generator) < 1 / 7
    indices = torch.where(stray, int(key["h"]) * int(key["w"]) - 1 - indices, indices)
    return [randn(tuple(indices.shape), dtype, generator), indices]


def input_ranges(key: dict) -> dict[int, tuple[int, int]]:
    """The indices lie in the plane."""
    return {1: (0, int(key["h"]) * int(key["w"]) - 1)}


FAMILY = Family(
    "max_pool2d_backward",
    FamilyKind.KERNEL,
    ops=(graph.MaxPoolBackwardOp,),
    site=site,
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    input_ranges=input_ranges,
)
