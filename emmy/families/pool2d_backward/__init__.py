"""Pooling's input gradient (graph.pool_backward): each element sums the output gradients
of the windows that hold it, by max pooling's indices or over average pooling's counts."""

from __future__ import annotations

import itertools
import math
from typing import Any

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site
from emmy.families.pool2d import WINDOW_KEYS, pool_key, window_taps


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.PoolBackwardOp)
    *batch, oh, ow = shape_of(op.grad)
    h, w = shape_of(op.result)[-2:]
    divisor = op.divisor.value.data if op.divisor is not None else 0
    kind, count_pad = op.kind.data.value, op.count_pad is not None
    plane, out, dtype = (h, w), (oh, ow), dtype_of(op.grad)
    fixed = None if op.adaptive is not None else op.fixed()
    key = backward_key(math.prod(batch), plane, out, dtype, kind, fixed, count_pad, divisor)
    inputs = [op.grad] if op.indices is None else [op.grad, op.indices]
    return Site("pool2d_backward", key, inputs)


def backward_key(*pooling: Any) -> dict[str, int | str]:
    """The key of the gradient of the pooling whose key pool2d.pool_key gives of
    `pooling`: that key, less the output's storage type."""
    key = pool_key(*pooling)
    del key["Y"]
    return key


def _geometry(key: dict) -> dict[str, tuple[int, int]]:
    defaults = {"k": 1, "s": 1, "p": 0, "d": 1}
    return {
        field: (int(key.get(f"{p}h", defaults[p])), int(key.get(f"{p}w", defaults[p])))
        for p, field in WINDOW_KEYS.items()
    }


def reference(key: dict, inputs: list):
    """Per tap of the window: for max, dy where the output's index is the element that tap
    reads (an index that is no tap of its window adds nothing); for avg, dy over the
    output's count (pool2d's); added at that element."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    rows, h, w, oh, ow = (int(key[name]) for name in ("rows", "h", "w", "oh", "ow"))
    dy = inputs[0].double().reshape(rows, oh, ow)
    if key.get("adaptive") == "yes":
        return _adaptive_reference(key, dy, inputs[1:])
    g = _geometry(key)
    if key.get("kind", "max") == "avg":
        dy = dy / _counts(key, g)
    dx = torch.zeros(rows, h * w, dtype=torch.float64)
    oy, ox = torch.arange(oh).view(oh, 1), torch.arange(ow).view(1, ow)
    for i in range(g["window"][0]):
        for j in range(g["window"][1]):
            iy = oy * g["stride"][0] - g["padding"][0] + i * g["dilation"][0]
            ix = ox * g["stride"][1] - g["padding"][1] + j * g["dilation"][1]
            tap = iy * w + ix
            kept = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            if key.get("kind", "max") == "max":
                kept = kept & (inputs[1].long().reshape(rows, oh, ow) == tap)
            where = torch.where(kept, tap, 0).expand(rows, oh, ow).reshape(rows, -1)
            dx.scatter_add_(1, where, torch.where(kept, dy, 0.0).reshape(rows, -1))
    return dx.reshape(rows, h, w)


def _adaptive_reference(key: dict, dy, indices: list):
    """Per output, its window's elements (pool2d's taps): for max, dy at the output's index
    where the window holds it; for avg, dy over the window's size at each."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    rows, h, w, oh, ow = (int(key[name]) for name in ("rows", "h", "w", "oh", "ow"))
    dx = torch.zeros(rows, h, w, dtype=torch.float64)
    for oy, ox in itertools.product(range(oh), range(ow)):
        (ys, count_y), (xs, count_x) = window_taps(key, 0, oy), window_taps(key, 1, ox)
        if key["kind"] == "avg":
            dx[:, ys[0] : ys[-1] + 1, xs[0] : xs[-1] + 1] += (
                dy[:, oy, ox] / (count_y * count_x)
            ).view(rows, 1, 1)
            continue
        index = indices[0].long().reshape(rows, oh, ow)[:, oy, ox]
        held = torch.isin(index // w, torch.tensor(ys)) & torch.isin(index % w, torch.tensor(xs))
        dx.view(rows, -1).scatter_add_(
            1,
            torch.where(held, index, 0).view(rows, 1),
            torch.where(held, dy[:, oy, ox], 0.0).view(rows, 1),
        )
    return dx


def _counts(key: dict, g: dict):
    """Each output's count, [oh, ow]: pool2d's divisor of an average."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    if int(key.get("divisor", 0)):
        return torch.tensor(float(key["divisor"]), dtype=torch.float64)
    padded = key.get("pads", "yes") == "yes"
    sides = []
    for axis, d in (("h", 0), ("w", 1)):
        size, out = int(key[axis]), int(key[f"o{axis}"])
        k, s, p = g["window"][d], g["stride"][d], g["padding"][d]
        start = torch.arange(out) * s - p
        if padded:
            sides.append(torch.clamp(start + k, max=size + p) - start)
        else:
            sides.append(torch.clamp(start + k, max=size) - torch.clamp(start, min=0))
    return (sides[0].view(-1, 1) * sides[1].view(1, -1)).double()


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


#: average pooling's: (rows, h, w, window, stride, padding, ceil_mode, count_pad, divisor)
AVG_SHAPES = [
    (3, 8, 10, (2, 2), (2, 2), (0, 0), False, True, 0),
    (2, 9, 11, (3, 3), (2, 2), (1, 1), False, True, 0),
    (2, 9, 11, (3, 3), (2, 2), (1, 1), True, False, 0),
    (4, 7, 9, (3, 2), (1, 2), (1, 1), False, True, 5),
]


#: adaptive pooling's: (rows, h, w, oh, ow, kind): windows that overlap, outputs more than
#: the plane's elements (windows that share them), torchvision's 7×7
ADAPTIVE_SHAPES = [
    (3, 9, 11, 4, 3, "max"),
    (2, 5, 4, 7, 9, "max"),
    (2, 9, 11, 4, 3, "avg"),
    (3, 4, 6, 7, 4, "avg"),
    (1, 10, 10, 7, 7, "avg"),
]


def check_keys(dtype: str) -> list[dict]:
    adaptive = [
        backward_key(rows, (h, w), (oh, ow), dtype, kind)
        for rows, h, w, oh, ow, kind in ADAPTIVE_SHAPES
    ]
    return _fixed_check_keys(dtype) + adaptive


def _fixed_check_keys(dtype: str) -> list[dict]:
    shapes = [(*shape, "max", True, 0) for shape in CHECK_SHAPES] + [
        (rows, h, w, window, stride, pad, (1, 1), ceil, "avg", pads, divisor)
        for rows, h, w, window, stride, pad, ceil, pads, divisor in AVG_SHAPES
    ]
    keys = []
    for rows, h, w, window, stride, pad, dil, ceil, kind, pads, divisor in shapes:
        oh = _out(h, window[0], stride[0], pad[0], dil[0], ceil)
        ow = _out(w, window[1], stride[1], pad[1], dil[1], ceil)
        fixed = {"window": window, "stride": stride, "padding": pad, "dilation": dil}
        keys.append(backward_key(rows, (h, w), (oh, ow), dtype, kind, fixed, pads, divisor))
    return keys


def check_inputs(key: dict, dtype: str, generator) -> list:
    """dy, and for max pooling the indices torch's max pooling gives of random planes (ties
    broken as torch breaks them), one in seven replaced by an element no tap of its window
    reads."""
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    rows, oh, ow = int(key["rows"]), int(key["oh"]), int(key["ow"])
    grad = randn((rows, oh, ow), dtype, generator)
    if key["kind"] == "avg":
        return [grad]
    h, w = int(key["h"]), int(key["w"])
    x = torch.randn(rows, h, w, generator=generator)
    if key.get("adaptive") == "yes":
        _, indices = torch.nn.functional.adaptive_max_pool2d(x, (oh, ow), return_indices=True)
        stray = torch.rand(indices.shape, generator=generator) < 1 / 7
        return [grad, torch.where(stray, h * w - 1 - indices, indices)]
    g = _geometry(key)
    floor = [
        _out(size, g["window"][d], g["stride"][d], g["padding"][d], g["dilation"][d], False)
        for d, size in enumerate((h, w))
    ]
    _, indices = torch.nn.functional.max_pool2d(
        x, g["window"], g["stride"], g["padding"], g["dilation"], floor != [oh, ow],
        return_indices=True,
    )  # fmt: skip
    stray = torch.rand(indices.shape, generator=generator) < 1 / 7
    return [grad, torch.where(stray, h * w - 1 - indices, indices)]


def input_ranges(key: dict) -> dict[int, tuple[int, int]]:
    """Max pooling's indices lie in the plane."""
    if key.get("kind", "max") == "avg":
        return {}
    return {1: (0, int(key["h"]) * int(key["w"]) - 1)}


FAMILY = KernelFamily(
    "pool2d_backward",
    lowers=OpSites((graph.PoolBackwardOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    input_ranges=input_ranges,
)
