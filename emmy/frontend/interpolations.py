"""Makes each 2-D nearest or bilinear `F.interpolate` (what `nn.Upsample` calls) of a
dynamo graph one `emmy::upsample2d` before AOTAutograd sees it. Below autograd torch
decomposes the upsamplings into gathers (`_unsafe_index`), whose gradient is an
accumulating scatter by index tensors the forward saves; as one op, the forward is the
`resize2d` kernel and the backward `emmy::upsample2d_backward`'s `resize2d_backward`,
which sums each input element's gradient from the outputs that read it."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from torch import fx

# the op's registration: the graph calls emmy::upsample2d
from emmy.frontend import ops  # noqa: F401

_INTERPOLATE = inspect.signature(torch.nn.functional.interpolate)


def recognise_interpolations(graph_module: fx.GraphModule) -> int:
    """Makes each 2-D nearest or bilinear upsampling of dynamo's graph one
    `emmy::upsample2d` node; how many."""
    found = 0
    for node in graph_module.graph.nodes:
        arguments = _upsampling(node)
        if arguments is None:
            continue
        node.target, node.args, node.kwargs = torch.ops.emmy.upsample2d.default, arguments, {}
        found += 1
    if found:
        graph_module.recompile()
    return found


def _upsampling(node: fx.Node) -> tuple | None:
    """emmy::upsample2d's arguments for an `F.interpolate` node it computes: a 4-D input of
    static sizes, mode nearest or bilinear, no antialiasing."""
    if node.op != "call_function" or node.target is not torch.nn.functional.interpolate:
        return None
    try:
        bound = _INTERPOLATE.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    given = bound.arguments
    x, out = given["input"], node.meta.get("example_value")
    example = x.meta.get("example_value") if isinstance(x, fx.Node) else None
    if not isinstance(example, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    sizes = [*example.shape, *out.shape]
    if example.dim() != 4 or out.dim() != 4 or not all(isinstance(n, int) for n in sizes):
        return None
    mode, align_corners = given["mode"], given["align_corners"]
    if given["antialias"] or mode not in ("nearest", "bilinear"):
        return None
    if mode == "nearest" and align_corners is not None:
        return None
    scales = _scales(given["scale_factor"], given["recompute_scale_factor"])
    if scales is None:
        return None
    return x, list(out.shape[-2:]), mode, bool(align_corners), *scales


def _scales(factor: object, recompute: object) -> tuple[float | None, float | None] | None:
    """The scale factors torch's upsampling reads (None where the sizes decide them), or
    None where they are not numbers."""
    if factor is None or recompute:
        return None, None
    factors = list(factor) if isinstance(factor, Sequence) else [factor, factor]
    numbers = [float(f) for f in factors if isinstance(f, (int, float))]
    if len(factors) != 2 or len(numbers) != 2:
        return None
    return numbers[0], numbers[1]
