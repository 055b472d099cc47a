"""Batched matmul with a fused epilogue on tensor cores (mma.sync, ldmatrix, cp.async):
f16/bf16, B stored [k, n]. Its sites are built by matmul's (`matmul.matmul_key` picks it)."""

from __future__ import annotations

from emmy import dtypes
from emmy.families.family import Family, FamilyKind
from emmy.families.matmul import EPILOGUES, check_key, depth_atol
from emmy.families.matmul import reference as matmul_reference


def check_keys(dtype: str) -> list[dict]:
    return [
        check_key(dtype, z, zb, m, n, k, None, e, kinds)
        for (z, zb, m, n, k), (e, kinds) in zip(
            [(1, 1, 16, 8, 16), (2, 2, 37, 48, 40), (1, 1, 128, 136, 96), (3, 1, 70, 24, 200)],
            EPILOGUES,
            strict=True,
        )
    ] + [
        check_key(dtype, 2, 1, 37, 48, 40, None, split=8),
        check_key(dtype, 1, 1, 70, 24, 136, None, split=3),
    ]


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn, random_epilogue_inputs

    return [
        randn((key["batch"], key["m"], key["k"]), dtype, generator),
        randn((key["b_batch"], key["k"], key["n"]), dtype, generator),
        *random_epilogue_inputs(key, dtype, generator),
    ]


FAMILY = Family(
    "matmul_tc",
    FamilyKind.KERNEL,
    reference=matmul_reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    check_dtypes=dtypes.HALF_NAMES,
    extra_atol=depth_atol,
)
