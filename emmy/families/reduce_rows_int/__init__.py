"""Reductions of integer and boolean rows with exact integer results (sum, prod, max, min,
any, all, argmax, argmin) over the middle dim of [rows, cols, inner], of graph.reduce sites over i8, i32
and i64 (`reduce_rows` builds them)."""

from __future__ import annotations

from emmy.base import dtypes
from emmy.families.family import KernelFamily
from emmy.families.reduce_cols import REDUCE

INTEGERS = ("i64", "i32", "i8")


def reference(key: dict, inputs: list):
    reduced = REDUCE[str(key["op"])](inputs[0].long(), 1)
    return reduced.to(dtypes.torch_dtype(str(key["Y"])))


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    low, high = {"i8": (0, 2), "i32": (-(2**30), 2**30), "i64": (-(2**40), 2**40)}[dtype]
    if key["op"] in ("prod", "argmax", "argmin"):
        low, high = -3, 4  # small factors; few distinct values, so that ties occur
    if key["op"] in ("any", "all"):
        low, high = 0, 2  # mostly mixed rows; row 0 all set, row 1 none
    x = torch.randint(low, high, (key["rows"], key["cols"], key["inner"]), generator=generator)
    if key["op"] in ("any", "all") and key["rows"] > 1:
        x[0], x[1] = 1, 0
    return [x.to(dtypes.torch_dtype(dtype))]


def check_keys(dtype: str) -> list[dict]:
    wide = "i64"  # torch sums and multiplies integers into int64
    return [
        {"rows": r, "cols": c, "inner": i, "T": dtype, "Y": y, "op": op}
        for r, c, i, op, y in [
            (3, 1, 1, "sum", wide),
            (5, 97, 1, "max", dtype),
            (2, 1000, 1, "sum", wide),
            (4, 21, 1, "prod", wide),
            (3, 33, 1, "min", dtype),
            (4, 40, 1, "any", "i8"),
            (4, 9, 1, "all", "i8"),
            (2, 7, 13, "sum", wide),
            (1, 5, 40, "min", dtype),
            (3, 6, 3, "all", "i8"),
            (4, 300, 1, "argmax", "i64"),
            (3, 11, 4, "argmin", "i64"),
        ]
    ]


FAMILY = KernelFamily(
    "reduce_rows_int",
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    check_dtypes=INTEGERS,
)
