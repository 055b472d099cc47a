"""The input gradient of a LayerNorm over the last dim, from its saved statistics."""

from __future__ import annotations

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.families.family import Fusion, KernelFamily, OpSites, Site
from emmy.families.rows import ROW_SHAPES, norm_atol, row_key


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.LayerNormBackwardOp)
    inputs = [op.grad, op.x, op.mean, op.rstd, op.weight]
    return Site("layer_norm_backward", row_key(op.x), inputs)


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    grad, x, mean, rstd, weight = (t.double() for t in inputs)
    cols = int(key["cols"])
    statistics = mean.reshape(-1, 1), rstd.reshape(-1, 1)
    mask = [True, False, False]
    return torch.ops.aten.native_layer_norm_backward(
        grad, x, [cols], *statistics, weight, None, mask
    )[0]


def check_keys(dtype: str) -> list[dict]:
    return [{"rows": rows, "cols": cols, "T": dtype} for rows, cols in ROW_SHAPES]


def check_inputs(key: dict, dtype: str, generator) -> list:
    """The output's gradient, an input whose mean matters beside its spread, its statistics
    as the forward saved them (f32, eps 1e-5) and a weight."""
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    rows, cols = key["rows"], key["cols"]
    x = randn((rows, cols), dtype, generator, 2.0, 0.5)
    variance, mean = torch.var_mean(x.double(), -1, correction=0)
    rstd = torch.rsqrt(variance + 1e-5)
    grad, weight = randn((rows, cols), dtype, generator), randn((cols,), dtype, generator)
    return [grad, x, mean.float(), rstd.float(), weight]


FAMILY = KernelFamily(
    "layer_norm_backward",
    lowers=OpSites((graph.LayerNormBackwardOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=norm_atol,
)
