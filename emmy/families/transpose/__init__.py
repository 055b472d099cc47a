"""The transpose of a [rows, cols] matrix of any storage type. No graph op lowers to it
today: strided copies are `permute`'s; its sites come from `.emmy` users and benches."""

from __future__ import annotations

from emmy.base import dtypes
from emmy.families.family import FLOATS, KernelFamily


def reference(key: dict, inputs: list):
    x = inputs[0]
    return (x.double() if x.is_floating_point() else x).transpose(-2, -1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randint, randn

    random = randn if dtypes.is_float(dtype) else randint
    return [random((key["rows"], key["cols"]), dtype, generator)]


FAMILY = KernelFamily(
    "transpose",
    reference=reference,
    check_keys=lambda dtype: [
        {"rows": r, "cols": c, "T": dtype} for r, c in [(1, 1), (37, 70), (64, 16), (3, 130)]
    ],
    check_inputs=check_inputs,
    check_dtypes=(*FLOATS, "i64", "i8"),
)
