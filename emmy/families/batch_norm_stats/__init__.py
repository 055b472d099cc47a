"""A BatchNorm's per-channel statistics in training (graph.batch_norm_stats): the forward's
mean and biased variance, the backward's Σ dy and Σ dy · (x - mean), each channel's
elements read in place."""

from __future__ import annotations

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.BatchNormStatsOp)
    batch, channels, spatial = shape_of(op.input)
    key = {"batch": batch, "channels": channels, "spatial": spatial, "T": dtype_of(op.input)}
    if op.grad is None or op.mean is None:
        return Site("batch_norm_stats", key, [op.input])
    return Site("batch_norm_stats", key | {"kind": "backward"}, [op.input, op.grad, op.mean])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    x = inputs[0].double()
    if key.get("kind", "forward") == "forward":
        variance, mean = torch.var_mean(x, dim=(0, 2), correction=0)
        return torch.stack([mean, variance])
    grad, centre = inputs[1].double(), inputs[2].double()
    dot = (grad * (x - centre.view(1, -1, 1))).sum((0, 2))
    return torch.stack([grad.sum((0, 2)), dot])


#: (batch, channels, spatial): one image, odd sizes, a channel of one element a run
#: (BatchNorm1d's), more elements than a block has threads, a mean far from zero
CHECK_SHAPES = [(1, 3, 7), (2, 5, 33), (8, 6, 1), (3, 4, 700)]


def check_keys(dtype: str) -> list[dict]:
    keys = []
    for (batch, channels, spatial), kind in zip(
        CHECK_SHAPES * 2, ["forward"] * 4 + ["backward"] * 4, strict=True
    ):
        key = {"batch": batch, "channels": channels, "spatial": spatial, "T": dtype}
        keys.append(key if kind == "forward" else key | {"kind": "backward"})
    return keys


def check_inputs(key: dict, dtype: str, generator) -> list:
    """An input of mean 3 beside its spread of 1 (a sum of squares would cancel); for the
    backward a gradient and the input's f32 channel means."""
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    shape = (int(key["batch"]), int(key["channels"]), int(key["spatial"]))
    x = randn(shape, dtype, generator, 1.0, 3.0)
    if key.get("kind", "forward") == "forward":
        return [x]
    centre = x.double().mean((0, 2)).float()
    return [x, randn(shape, dtype, generator), centre]


def depth_atol(key: dict) -> float:
    """f32 sums over each channel's batch · spatial elements."""
    return 4e-6 * int(key["batch"]) * int(key["spatial"])


FAMILY = KernelFamily(
    "batch_norm_stats",
    lowers=OpSites((graph.BatchNormStatsOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=depth_atol,
)
