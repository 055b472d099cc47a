"""RMSNorm over the last dim (weight), with a fused prologue and epilogue."""

from __future__ import annotations

from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.family import Fuses, KernelFamily, OpSites
from emmy.families.rows import norm_atol, norm_check_inputs, norm_keys, row_site_of


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    from emmy.families.tensors import fused_rows

    def normalise(x, weight):
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + float(key["eps"])) * weight

    return fused_rows(key, inputs, 1, normalise)


def grid() -> list[tuple[str, str]]:
    def rms_norm(x: str, cols: int, dtype: str) -> str:
        return f"{key_grid.F}.rms_norm({x}, ({cols},), {key_grid.randn((cols,), dtype)}, 1e-6)"

    return key_grid.row_keys(rms_norm)


FAMILY = KernelFamily(
    "rms_norm",
    lowers=OpSites((graph.RmsNormOp,), row_site_of("rms_norm")),
    fuses=Fuses.PROLOGUE_AND_EPILOGUE,
    reference=reference,
    check_keys=lambda dtype: norm_keys(dtype, {"eps": "1e-06"}),
    check_inputs=norm_check_inputs(1),
    extra_atol=norm_atol,
    grid=grid,
)
