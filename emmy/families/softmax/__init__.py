"""softmax over the last dim, with a fused prologue and epilogue; `causal` masks the rows
of the unfused attention path."""

from __future__ import annotations

import math

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.family import Fuses, KernelFamily, OpSites
from emmy.families.rows import ROW_SHAPES, fused_keys, row_site_of


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    from emmy.families.tensors import fused_rows

    causal = int(key.get("causal", 0))

    def normalise(x: torch.Tensor) -> torch.Tensor:
        if causal:
            query = torch.arange(x.shape[0]).unsqueeze(1) % causal
            x = x.masked_fill(torch.arange(x.shape[1]) > query, -math.inf)
        return torch.softmax(x, dim=-1)

    return fused_rows(key, inputs, 0, normalise)


def check_keys(dtype: str) -> list[dict]:
    return (
        [{"rows": r, "cols": c, "T": dtype} for r, c in ROW_SHAPES]
        + fused_keys(dtype, {})
        # causal rows of the unfused attention path: 3 queries over 5 keys, 4 over 4
        + [
            {"rows": 6, "cols": 5, "T": dtype, "causal": 3, "fn": "(in0 * 0.5)"},
            {"rows": 8, "cols": 4, "T": dtype, "causal": 4},
        ]
    )


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import row_inputs

    if "fn" in key:
        return row_inputs(key, dtype, generator, 0)
    return [stress_input(key["rows"], key["cols"], dtype, generator)]


def stress_input(rows: int, cols: int, dtype: str, generator):
    """Inputs that stress a softmax: magnitudes whose exp overflows unless the row maximum
    is subtracted, -inf entries, and (with 3 rows or more) a row of -inf, NaN as in torch."""
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    x = randn((rows, cols), "f32", generator, 3.0).double()
    big = {"f32": 1e4, "f16": 3e4, "bf16": 1e4}[dtype]
    x[0, cols // 2] = big
    if cols > 3:
        x[-1, 1] = -big
        x[0, 2] = -math.inf
    if rows > 2:
        x[1, :] = -math.inf
    return x.to(dtypes.torch_dtype(dtype))


FAMILY = KernelFamily(
    "softmax",
    lowers=OpSites((graph.SoftmaxOp,), row_site_of("softmax")),
    fuses=Fuses.PROLOGUE_AND_EPILOGUE,
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    grid=lambda: key_grid.row_keys(lambda x, cols, dtype: f"torch.softmax({x}, -1)"),
)
