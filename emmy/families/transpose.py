"""The transpose of a [rows, cols] matrix. No graph op lowers to it today: strided copies
are `permute`'s; its sites come from `.emmy` users and benches."""

from __future__ import annotations

from emmy.families.family import Family, FamilyKind


def reference(key: dict, inputs: list):
    return inputs[0].double().transpose(-2, -1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    return [randn((key["rows"], key["cols"]), dtype, generator)]


FAMILY = Family(
    "transpose",
    FamilyKind.KERNEL,
    reference=reference,
    check_keys=lambda dtype: [
        {"rows": r, "cols": c, "T": dtype} for r, c in [(1, 1), (37, 70), (64, 16), (3, 130)]
    ],
    check_inputs=check_inputs,
)
