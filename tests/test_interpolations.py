"""Upsamplings found in dynamo's graphs (emmy.frontend.interpolations): the forms
`F.interpolate` takes, and those emmy::upsample2d does not compute, which stay as they are."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from emmy.frontend.interpolations import recognise_interpolations


def _found(upsample, x: torch.Tensor) -> int:
    """How many upsamplings are found in dynamo's graph of `upsample` on x; the rewritten
    graph gives eager's result and gradient."""
    counts: list[int] = []

    def backend(graph_module: torch.fx.GraphModule, example_inputs: list) -> object:
        counts.append(recognise_interpolations(graph_module))
        return graph_module.forward

    torch._dynamo.reset()
    x = x.requires_grad_()
    got = torch.compile(upsample, backend=backend)(x)
    (got_gradient,) = torch.autograd.grad(got.square().sum(), x)
    want = upsample(x)
    (want_gradient,) = torch.autograd.grad(want.square().sum(), x)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_gradient, want_gradient)
    return sum(counts)


@pytest.mark.parametrize(
    "arguments",
    [
        {"scale_factor": 2, "mode": "nearest"},
        {"size": (7, 9), "mode": "nearest"},
        {"scale_factor": (1.5, 2.5), "mode": "bilinear"},
        {"size": (8, 8), "mode": "bilinear", "align_corners": True},
        {"scale_factor": 1.7, "mode": "bilinear", "recompute_scale_factor": True},
    ],
    ids=["nearest-factor", "nearest-size", "bilinear-factors", "corners", "recomputed"],
)
def test_the_forms_of_interpolate_are_one_op(arguments: dict) -> None:
    assert _found(functools.partial(F.interpolate, **arguments), torch.randn(2, 3, 5, 6)) == 1


@pytest.mark.parametrize(
    ("arguments", "shape"),
    [
        ({"scale_factor": 2, "mode": "nearest"}, (2, 3, 5)),
        ({"scale_factor": 2, "mode": "trilinear"}, (1, 2, 3, 4, 5)),
        ({"scale_factor": 2, "mode": "bicubic"}, (2, 3, 5, 6)),
        ({"scale_factor": 2, "mode": "bilinear", "antialias": True}, (2, 3, 5, 6)),
    ],
    ids=["1d", "3d", "bicubic", "antialias"],
)
def test_what_the_op_does_not_compute_stays_as_it_is(arguments: dict, shape: tuple) -> None:
    assert _found(functools.partial(F.interpolate, **arguments), torch.randn(shape)) == 0
