"""LayerNorm over the last dim (weight and bias), with a fused prologue and epilogue."""

from __future__ import annotations

from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.family import Fuses, KernelFamily, OpSites
from emmy.families.rows import ROW_SHAPES, norm_atol, norm_check_inputs, norm_keys, row_site_of


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    from emmy.families.tensors import fused_rows

    eps = float(key["eps"])

    def normalise(x, weight, bias):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)

    def statistics(x):
        variance, mean = torch.var_mean(x, -1, correction=0)
        return mean, torch.rsqrt(variance + eps)

    return fused_rows(key, inputs, 2, normalise, statistics)


def check_keys(dtype: str) -> list[dict]:
    """The norms' keys, and a training forward's, which writes each row's statistics."""
    training = [
        {"rows": rows, "cols": cols, "T": dtype, "eps": "1e-05", "stats": "yes"}
        for rows, cols in ROW_SHAPES[1::2]
    ]
    return norm_keys(dtype, {"eps": "1e-05"}) + training


def grid() -> list[tuple[str, str]]:
    def layer_norm(x: str, cols: int, dtype: str) -> str:
        weight, bias = key_grid.randn((cols,), dtype), key_grid.randn((cols,), dtype)
        return f"{key_grid.F}.layer_norm({x}, ({cols},), {weight}, {bias})"

    return key_grid.row_keys(layer_norm)


FAMILY = KernelFamily(
    "layer_norm",
    lowers=OpSites((graph.LayerNormOp,), row_site_of("layer_norm")),
    fuses=Fuses.PROLOGUE_AND_EPILOGUE,
    reference=reference,
    check_keys=check_keys,
    check_inputs=norm_check_inputs(2),
    extra_atol=norm_atol,
    grid=grid,
)
