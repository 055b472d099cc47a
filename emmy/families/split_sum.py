"""The sum of a split-K matmul's f32 parts, then the matmul's epilogue. Its sites come from
matmul-paths (the split-K option of a `matmul_path`)."""

from __future__ import annotations

from emmy.families.family import Family, FamilyKind
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


FAMILY = Family(
    "split_sum",
    FamilyKind.KERNEL,
    reference=reference,
    check_keys=lambda dtype: [
        {"split": split, "size": rows * n, "n": n, "T": dtype, "epilogue": e, "inputs": kinds}
        for (split, rows, n), (e, kinds) in zip(
            [(2, 1, 1), (3, 37, 50), (8, 4, 128), (4, 3, 20)], EPILOGUES, strict=True
        )
    ],
    check_inputs=check_inputs,
)
