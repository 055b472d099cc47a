"""The input gradient of an RMSNorm over the last dim, and each row's rstd."""

from __future__ import annotations

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.families.family import Fusion, KernelFamily, OpSites, Site
from emmy.families.rows import ROW_SHAPES, norm_atol, row_key


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.RmsNormBackwardOp)
    key = row_key(op.x) | {"eps": repr(float(op.eps.value.data))}
    return Site("rms_norm_backward", key, [op.grad, op.x, op.weight])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    grad, x, weight = (t.double().requires_grad_(t is inputs[1]) for t in inputs)
    rstd = torch.rsqrt(x.square().mean(-1) + float(key["eps"]))
    y = x * rstd.unsqueeze(1) * weight
    (dx,) = torch.autograd.grad(y, x, grad)
    return dx, rstd.detach()


def check_keys(dtype: str) -> list[dict]:
    return [{"rows": r, "cols": c, "T": dtype, "eps": "1e-06"} for r, c in ROW_SHAPES]


def check_inputs(key: dict, dtype: str, generator) -> list:
    """The output's gradient, an input whose mean matters beside its spread, and a weight."""
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    rows, cols = key["rows"], key["cols"]
    x = randn((rows, cols), dtype, generator, 2.0, 0.5)
    grad, weight = randn((rows, cols), dtype, generator), randn((cols,), dtype, generator)
    return [grad, x, weight]


FAMILY = KernelFamily(
    "rms_norm_backward",
    lowers=OpSites((graph.RmsNormBackwardOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=norm_atol,
)
