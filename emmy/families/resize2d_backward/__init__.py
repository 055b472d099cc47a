"""The input gradient of an upsampling of the last two dims (graph.resize_backward): each
input element summed from the outputs that read it, as one gather."""

from __future__ import annotations

from emmy.dialects import graph
from emmy.families import resize2d
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def site(op: graph.ResizeBackwardOp, fusion: Fusion) -> Site:
    return Site("resize2d_backward", resize2d.key_of(op), [op.input])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    shape = (int(key["rows"]), int(key["h"]), int(key["w"]))
    x = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    (dx,) = torch.autograd.grad(resize2d.reference(key, [x]), x, inputs[0].double())
    return dx


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    return [randn((int(key["rows"]), int(key["oh"]), int(key["ow"])), dtype, generator)]


FAMILY = KernelFamily(
    "resize2d_backward",
    lowers=OpSites((graph.ResizeBackwardOp,), site),
    reference=reference,
    check_keys=resize2d.check_keys,
    check_inputs=check_inputs,
)
