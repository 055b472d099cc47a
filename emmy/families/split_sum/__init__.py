"""The sum of a split-K matmul's f32 parts, then the matmul's epilogue. Its sites come from
offer-paths (the split-K option of a `matmul_path`)."""

from __future__ import annotations

import itertools

from emmy.families import key_grid
from emmy.families.family import KernelFamily
from emmy.families.matmul import EPILOGUES


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    from emmy.families.tensors import with_epilogue

    n = int(key["n"])
    total = inputs[0].double().reshape(int(key["split"]), -1, n).sum(dim=0)
    return with_epilogue(key, total, inputs[1:]).expand(total.shape).reshape(-1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn, random_epilogue_inputs

    as_matmul = {**key, "m": key["size"] // key["n"], "batch": 1}
    return [
        randn((key["split"], key["size"]), "f32", generator),
        *random_epilogue_inputs(as_matmul, dtype, generator),
    ]


def grid() -> list[tuple[str, str]]:
    """Split-K products, pinned: the k-slices (matmul, matmul_tc with a `split`) and their
    sum; then decode-like ones with the epilogues a model puts on them (split_sum's epilogue
    and extra inputs vary), the matmuls seeing the [n, k] weights of a linear."""
    randn, f = key_grid.randn, key_grid.F
    keys = []
    for (m, n, k, split), dtype in itertools.product(
        [(16, 64, 512, 2), (16, 64, 1024, 4), (32, 128, 1024, 2), (8, 96, 2048, 8),
         (64, 64, 2048, 4), (16, 256, 512, 2), (48, 80, 1536, 4), (1, 192, 1024, 4),
         (4, 128, 1024, 2), (24, 64, 768, 2), (32, 32, 2048, 8), (2, 320, 512, 2),
         (40, 96, 1024, 4), (8, 64, 4096, 8)],
        key_grid.DTYPES,
    ):  # fmt: skip
        product = f"{randn((m, k), dtype)} @ {randn((k, n), dtype)}"
        keys.append((product, f"matmul=split{split}"))
    for (m, n, k, split, epilogue), dtype in itertools.product(
        [(1, 256, 1024, 4, "bias"), (2, 128, 2048, 8, "gelu"), (4, 384, 512, 2, "none"),
         (8, 160, 1024, 4, "bias"), (12, 96, 1536, 4, "silu"), (16, 128, 2048, 8, "residual"),
         (20, 48, 1024, 2, "gelu"), (24, 256, 768, 2, "bias"), (32, 80, 4096, 8, "none"),
         (6, 512, 1024, 4, "silu"), (64, 32, 1024, 2, "residual"), (3, 640, 512, 2, "bias"),
         (10, 200, 1024, 4, "gelu"), (28, 112, 1536, 4, "none"), (1, 1024, 2048, 8, "bias"),
         (48, 48, 2048, 8, "silu"), (8, 320, 768, 2, "residual"), (16, 176, 1024, 4, "gelu"),
         (5, 72, 3072, 8, "bias"), (40, 128, 512, 2, "none"), (2, 768, 1024, 4, "silu"),
         (56, 64, 1536, 4, "bias"), (14, 240, 2048, 8, "residual"), (36, 96, 1024, 2, "gelu")],
        key_grid.DTYPES,
    ):  # fmt: skip
        x, weight, bias = randn((m, k), dtype), randn((n, k), dtype), randn((n,), dtype)
        linear = f"{f}.linear({x}, {weight}, {bias})"
        product = {
            "none": f"{f}.linear({x}, {weight})",
            "bias": linear,
            "gelu": f"{f}.gelu({linear})",
            "silu": f"{f}.silu({linear})",
            "residual": f"{linear} + {randn((m, n), dtype)}",
        }[epilogue]
        keys.append((product, f"matmul=split{split}"))
    return keys


FAMILY = KernelFamily(
    "split_sum",
    reference=reference,
    check_keys=lambda dtype: [
        {"split": split, "size": rows * n, "n": n, "T": dtype, "epilogue": e, "inputs": kinds}
        for (split, rows, n), (e, kinds) in zip(
            [(2, 1, 1), (3, 37, 50), (8, 4, 128), (4, 3, 20)], EPILOGUES, strict=True
        )
    ],
    check_inputs=check_inputs,
    grid=grid,
    grid_group="split_k",
)
