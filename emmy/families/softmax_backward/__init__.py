"""The gradient of a softmax or a log-softmax over the last dim, from its output."""

from __future__ import annotations

from xdsl.ir import Operation

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families.family import Fusion, KernelFamily, OpSites, Site
from emmy.families.rows import ROW_SHAPES, norm_atol, row_key


def site(op: Operation, fusion: Fusion) -> Site:
    assert isinstance(op, graph.SoftmaxBackwardOp)
    key = {**row_key(op.output), "log": "yes" if op.log is not None else "no"}
    return Site("softmax_backward", key, [op.grad, op.output])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    grad, output = (t.double() for t in inputs)
    if key.get("log", "no") == "yes":
        return torch.ops.aten._log_softmax_backward_data(grad, output, -1, torch.float64)
    return torch.ops.aten._softmax_backward_data(grad, output, -1, torch.float64)


def check_keys(dtype: str) -> list[dict]:
    return [
        {"rows": rows, "cols": cols, "T": dtype, "log": log}
        for rows, cols in ROW_SHAPES
        for log in ("no", "yes")
    ]


def check_inputs(key: dict, dtype: str, generator) -> list:
    """The output's gradient, and the output itself: a (log-)softmax of scores wide enough
    that some probabilities are near 1 and others near 0."""
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.families.tensors import randn

    shape = (key["rows"], key["cols"])
    scores = randn(shape, "f32", generator, 3.0).double()
    normalise = torch.log_softmax if key.get("log", "no") == "yes" else torch.softmax
    output = normalise(scores, -1).to(dtypes.torch_dtype(dtype))
    return [randn(shape, dtype, generator), output]


FAMILY = KernelFamily(
    "softmax_backward",
    lowers=OpSites((graph.SoftmaxBackwardOp,), site),
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=norm_atol,
)
