"""Upsampling of the last two dims (graph.resize): nearest and bilinear (align_corners
either way), with torch's scales as the key's `sy` and `sx`."""

from __future__ import annotations

import math

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def resize_key(
    rows: int,
    plane: tuple[int, int],
    out: tuple[int, int],
    dtype: str,
    mode: str,
    scales: tuple[float, float] | None = None,
    align_corners: bool = False,
) -> dict[str, int | str]:
    """The key of a resize of `rows` planes of `plane` to `out`: `scales` the caller's
    source steps (input over output where None; (h - 1) / (oh - 1) with align_corners)."""
    (h, w), (oh, ow) = plane, out
    if align_corners:
        scales = ((h - 1) / (oh - 1) if oh > 1 else 0.0, (w - 1) / (ow - 1) if ow > 1 else 0.0)
    elif scales is None:
        scales = (h / oh, w / ow)
    key: dict[str, int | str] = {"rows": rows, "h": h, "w": w}
    key |= {"oh": oh, "ow": ow, "T": dtype, "mode": mode}
    if align_corners:
        key["corners"] = "yes"
    return key | {"sy": repr(float(scales[0])), "sx": repr(float(scales[1]))}


def key_of(op: graph.ResizeBase) -> dict[str, int | str]:
    """The key of a graph.resize, or of its gradient (whose input is the upsampling's
    output, its result the upsampling's input)."""
    forward = isinstance(op, graph.ResizeOp)
    source, resized = (op.input, op.result) if forward else (op.result, op.input)
    *batch, h, w = shape_of(source)
    oh, ow = shape_of(resized)[-2:]
    # graph.resize has two scales (its verifier)
    sy, sx = (s.value.data for s in op.scales.data)
    return resize_key(
        math.prod(batch),
        (h, w),
        (oh, ow),
        dtype_of(op.input),
        op.mode.data.value,
        (sy, sx),
        op.align_corners is not None,
    )


def site(op: graph.ResizeOp, fusion: Fusion) -> Site:
    return Site("resize2d", key_of(op), [op.input])


def _sources(key: dict, axis: str):
    """The source positions of the outputs along `axis` (h or w), as f32 computes them."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    scale = torch.tensor(float(key[f"s{'y' if axis == 'h' else 'x'}"]), dtype=torch.float32)
    at = torch.arange(int(key[f"o{axis}"]), dtype=torch.float32)
    if key["mode"] == "nearest" or key.get("corners") == "yes":
        return at * scale
    return ((at + 0.5) * scale - 0.5).clamp(min=0)


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    x = inputs[0].double()
    h, w = int(key["h"]), int(key["w"])
    fy, fx = _sources(key, "h"), _sources(key, "w")
    y0, x0 = fy.long().clamp(max=h - 1), fx.long().clamp(max=w - 1)
    if key["mode"] == "nearest":
        return x[:, y0][:, :, x0]
    y1, x1 = (y0 + 1).clamp(max=h - 1), (x0 + 1).clamp(max=w - 1)
    ly, lx = (fy - y0).double()[:, None], (fx - x0).double()[None, :]
    top = (1 - lx) * x[:, y0][:, :, x0] + lx * x[:, y0][:, :, x1]
    bottom = (1 - lx) * x[:, y1][:, :, x0] + lx * x[:, y1][:, :, x1]
    return (1 - ly) * top + ly * bottom


def check_keys(dtype: str) -> list[dict]:
    return [
        # scale factor 2, and sizes that are no multiple of the input's
        resize_key(6, (5, 7), (10, 14), dtype, "nearest", (0.5, 0.5)),
        resize_key(6, (5, 7), (8, 9), dtype, "nearest"),
        resize_key(2, (9, 11), (4, 5), dtype, "nearest"),
        resize_key(6, (5, 7), (10, 14), dtype, "bilinear", (0.5, 0.5)),
        resize_key(6, (5, 7), (8, 9), dtype, "bilinear"),
        resize_key(6, (5, 7), (8, 9), dtype, "bilinear", align_corners=True),
        resize_key(3, (1, 6), (3, 1), dtype, "bilinear", align_corners=True),
        resize_key(3, (9, 11), (4, 6), dtype, "bilinear"),
    ]


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    return [randn((int(key["rows"]), int(key["h"]), int(key["w"])), dtype, generator)]


FAMILY = KernelFamily(
    "resize2d",
    lowers=OpSites((graph.ResizeOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
)
