"""Pooling of the last two dims (graph.pool): max, its indices (argmax) and average over
fixed windows (kernel, stride, padding, dilation) or adaptive ones; 1-D pooling is 2-D
pooling of planes of height 1."""

from __future__ import annotations

import math

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site

#: a fixed window's fields in a key (kh, kw, sh, ...), by the names graph ops give them
WINDOW_KEYS = {"k": "window", "s": "stride", "p": "padding", "d": "dilation"}


def pool_key(
    rows: int,
    plane: tuple[int, int],
    out: tuple[int, int],
    dtype: str,
    kind: str,
    fixed: dict[str, tuple[int, int]] | None = None,
    count_pad: bool = True,
    divisor: int = 0,
) -> dict[str, int | str]:
    """The key of a pooling of `rows` planes of `plane` to `out`; `fixed` a fixed window's
    window, stride, padding and dilation (None: adaptive windows)."""
    key: dict[str, int | str] = {"rows": rows, "h": plane[0], "w": plane[1]}
    key |= {"oh": out[0], "ow": out[1], "T": dtype, "Y": "i64" if kind == "argmax" else dtype}
    key["kind"] = kind
    if fixed is None:
        return key | {"adaptive": "yes"}
    for prefix, field in WINDOW_KEYS.items():
        key |= {f"{prefix}h": fixed[field][0], f"{prefix}w": fixed[field][1]}
    if kind == "avg":
        key |= {"pads": "yes" if count_pad else "no", "divisor": divisor}
    return key


def site(op: graph.PoolOp, fusion: Fusion) -> Site:
    *batch, h, w = shape_of(op.input)
    oh, ow = shape_of(op.result)[-2:]
    fixed = None if op.adaptive is not None else op.fixed()
    divisor = op.divisor.value.data if op.divisor is not None else 0
    key = pool_key(
        math.prod(batch),
        (h, w),
        (oh, ow),
        dtype_of(op.input),
        op.kind.data.value,
        fixed,
        op.count_pad is not None,
        divisor,
    )
    return Site("pool2d", key, [op.input])


def window_taps(key: dict, d: int, o: int) -> tuple[list[int], int]:
    """The taps of output `o` along dim d (0: h, 1: w) inside the plane, and the taps an
    average counting the padding divides by."""
    axis = "hw"[d]
    size, out = int(key[axis]), int(key[f"o{axis}"])
    if key.get("adaptive") == "yes":
        start, end = o * size // out, -(-(o + 1) * size // out)
        return list(range(start, end)), end - start
    k, s = int(key.get(f"k{axis}", 1)), int(key.get(f"s{axis}", 1))
    p, dil = int(key.get(f"p{axis}", 0)), int(key.get(f"d{axis}", 1))
    start = o * s - p
    taps = [start + t * dil for t in range(k) if 0 <= start + t * dil < size]
    padded = min(start + k, size + p) - start
    return taps, padded


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    x = inputs[0].double()
    rows, w, oh, ow = (int(key[name]) for name in ("rows", "w", "oh", "ow"))
    kind, divisor = str(key["kind"]), int(key.get("divisor", 0))
    y = torch.zeros(rows, oh, ow, dtype=torch.int64 if kind == "argmax" else torch.float64)
    for oy in range(oh):
        ys, padded_y = window_taps(key, 0, oy)
        for ox in range(ow):
            xs, padded_x = window_taps(key, 1, ox)
            window = x[:, ys][:, :, xs].reshape(rows, -1)
            if kind == "avg":
                if divisor:
                    count = divisor
                elif key.get("pads", "yes") == "yes" or key.get("adaptive") == "yes":
                    count = padded_y * padded_x
                else:
                    count = len(ys) * len(xs)
                y[:, oy, ox] = window.sum(-1) / count
                continue
            # the last NaN, else the first maximum, as torch's max pooling picks
            nan = window.isnan()
            last_nan = len(ys) * len(xs) - 1 - nan.flip(-1).int().argmax(-1)
            at = torch.where(nan.any(-1), last_nan, window.argmax(-1))
            if kind == "max":
                y[:, oy, ox] = window.gather(-1, at[:, None])[:, 0]
            else:
                flat = torch.tensor([iy * w + ix for iy in ys for ix in xs])
                y[:, oy, ox] = flat[at]
    return y


def check_keys(dtype: str) -> list[dict]:
    def fixed(k, s, p, d=(1, 1)):
        return {"window": k, "stride": s, "padding": p, "dilation": d}

    keys = [
        # ResNet's stem pool, of odd sizes; with its indices
        pool_key(6, (9, 11), (5, 6), dtype, "max", fixed((3, 3), (2, 2), (1, 1))),
        pool_key(6, (9, 11), (5, 6), dtype, "argmax", fixed((3, 3), (2, 2), (1, 1))),
        # a dilated window, ceil_mode's extra output reaching past the padding
        pool_key(3, (10, 9), (4, 4), dtype, "argmax", fixed((2, 3), (3, 2), (1, 1), (2, 2))),
        pool_key(2, (9, 11), (4, 5), dtype, "max", fixed((2, 2), (2, 2), (0, 0))),
        # averages: padding counted or not, ceil_mode's clipped last window, a divisor
        pool_key(6, (9, 11), (5, 6), dtype, "avg", fixed((3, 3), (2, 2), (1, 1))),
        pool_key(6, (9, 11), (5, 6), dtype, "avg", fixed((3, 3), (2, 2), (1, 1)), False),
        pool_key(4, (7, 8), (4, 4), dtype, "avg", fixed((3, 2), (2, 2), (1, 0)), True),
        pool_key(4, (7, 8), (3, 4), dtype, "avg", fixed((3, 2), (2, 2), (0, 0)), True, 5),
        # 1-D pooling: planes of height 1
        pool_key(6, (1, 11), (1, 5), dtype, "avg", fixed((1, 3), (1, 2), (0, 0))),
        # adaptive: global (every classifier head), torchvision's 7x7 from 9x11, max
        pool_key(10, (9, 11), (1, 1), dtype, "avg"),
        pool_key(4, (9, 11), (7, 7), dtype, "avg"),
        pool_key(4, (9, 11), (4, 5), dtype, "max"),
        pool_key(4, (9, 11), (4, 5), dtype, "argmax"),
    ]
    return keys


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    shape = (int(key["rows"]), int(key["h"]), int(key["w"]))
    if key["kind"] == "avg":
        return [randn(shape, dtype, generator)]
    # few distinct values, so that ties (the first one wins) occur, and a NaN
    x = randn(shape, "f32", generator, 2.0).round()
    x[0, 0, 1] = math.nan
    return [x.to(randn((1,), dtype, generator).dtype)]


FAMILY = KernelFamily(
    "pool2d",
    lowers=OpSites((graph.PoolOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
)
