"""Reductions of each row (the last dim) of floats: sum, mean, max, min, prod, logsumexp,
var and std.
graph.reduce's other kinds go to the sibling families its table names: an index (argmax,
argmin: `arg_rows`), integer or boolean rows (`reduce_rows_int`), and floats over a dim
not the last (`reduce_cols`)."""

from __future__ import annotations

import math

from emmy.base import dtypes
from emmy.base.errors import EmmyError
from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site
from emmy.families.reduce_cols import KINDS as COLUMN_KINDS
from emmy.families.reduce_cols import REDUCE, reduction_inputs
from emmy.families.reduce_cols import atol as depth_atol

#: the family of each kind whose input is a float (integer inputs: `reduce_rows_int`)
FLOAT_FAMILIES = {
    **dict.fromkeys(
        ("sum", "mean", "max", "min", "prod", "logsumexp", "var", "std"), "reduce_rows"
    ),
    **dict.fromkeys(("argmax", "argmin"), "arg_rows"),
}


def site(op: graph.ReduceOp, fusion: Fusion) -> Site:
    shape = shape_of(op.input)
    dim = op.reduced_dim
    # the families that read the reduced dim in place see [rows, cols, inner]
    middle: dict[str, int | str] = {
        "rows": math.prod(shape[:dim]),
        "cols": shape[dim],
        "inner": math.prod(shape[dim + 1 :]),
        "T": dtype_of(op.input),
        "op": op.kind.data.value,
    }
    if not dtypes.is_float(dtype_of(op.input)):
        key = {**middle, "Y": dtype_of(op.result)}
        return Site("reduce_rows_int", key, list(op.operands))
    if dim != len(shape) - 1:
        if op.kind.data not in COLUMN_KINDS:
            raise EmmyError(
                f"graph.reduce {op.kind.data} of floats over dim {dim} of {list(shape)}: "
                "its row kernel reads the last dim (move it last first)"
            )
        return Site("reduce_cols", middle, list(op.operands))
    key = {"rows": math.prod(shape[:-1]), "cols": shape[-1], "T": dtype_of(op.input)}
    key["op"] = op.kind.data.value
    if op.correction is not None:
        key["correction"] = op.correction.value.data
    return Site(FLOAT_FAMILIES[op.kind.data], key, list(op.operands))


def reference(key: dict, inputs: list):
    x, op = inputs[0].double(), str(key["op"])
    if op in ("var", "std"):
        return getattr(x, op)(-1, correction=int(key.get("correction", 0)))
    return REDUCE[op](x, -1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    return reduction_inputs((key["rows"], key["cols"]), key["op"], dtype, generator)


FAMILY = KernelFamily(
    "reduce_rows",
    lowers=OpSites((graph.ReduceOp,), site),
    reference=reference,
    check_keys=lambda dtype: (
        [
            {"rows": r, "cols": c, "T": dtype, "op": op}
            for (r, c), op in zip(
                [(3, 1), (5, 97), (2, 1000), (4, 64), (3, 33), (2, 100), (4, 130)],
                ["sum", "mean", "max", "sum", "min", "prod", "logsumexp"],
                strict=True,
            )
        ]
        + [
            {"rows": 3, "cols": 50, "T": dtype, "op": "var", "correction": 1},
            {"rows": 2, "cols": 300, "T": dtype, "op": "std", "correction": 0},
            {"rows": 4, "cols": 9, "T": dtype, "op": "std", "correction": 1},
        ]
    ),
    check_inputs=check_inputs,
    extra_atol=depth_atol,
    grid=lambda: key_grid.row_keys(lambda x, cols, dtype: f"{x}.sum(-1)"),
)
