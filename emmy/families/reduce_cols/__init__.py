"""Reductions of floats over the middle dim of [rows, cols, inner], read in place: sum,
mean, max, min and prod over leading or middle dims (graph.reduce sites with a `dim` that
is not the last; `reduce_rows` builds them)."""

from __future__ import annotations

import math

from emmy.dialects import graph
from emmy.families.family import KernelFamily

#: the kinds this family folds (the others move their dim last for `reduce_rows`)
KINDS = frozenset(
    {graph.Reduction.SUM, graph.Reduction.MEAN, graph.Reduction.MAX, graph.Reduction.MIN,
     graph.Reduction.PROD}
)  # fmt: skip


#: each kind's torch reduction of x over a dim (the references of the reduction families)
REDUCE = {
    "sum": lambda x, dim: x.sum(dim),
    "mean": lambda x, dim: x.mean(dim),
    "max": lambda x, dim: x.amax(dim),
    "min": lambda x, dim: x.amin(dim),
    "prod": lambda x, dim: x.prod(dim),
    "logsumexp": lambda x, dim: x.logsumexp(dim),
    "argmax": lambda x, dim: x.argmax(dim),
    "argmin": lambda x, dim: x.argmin(dim),
    "any": lambda x, dim: (x != 0).any(dim),
    "all": lambda x, dim: (x != 0).all(dim),
}


def reference(key: dict, inputs: list):
    return REDUCE[str(key["op"])](inputs[0].double(), 1)


def reduction_inputs(shape: tuple[int, ...], op: str, dtype: str, generator) -> list:
    """A float reduction's check input of `shape` [rows, cols, ...], reduced over cols."""
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    if op == "prod":
        # factors near ±1, so that a long product neither vanishes nor overflows
        signs = randn(shape, "f32", generator).sign()
        near_one = randn(shape, "f32", generator, 0.05, 1.0)
        return [(signs * near_one).to(randn((1,), dtype, generator).dtype)]
    x = randn(shape, dtype, generator)
    if op in ("max", "min") and shape[1] > 3:
        x[(0, 3, *[0] * (len(shape) - 2))] = float("nan")  # max and min propagate NaN
    return [x]


def check_inputs(key: dict, dtype: str, generator) -> list:
    shape = (key["rows"], key["cols"], key["inner"])
    return reduction_inputs(shape, key["op"], dtype, generator)


def check_keys(dtype: str) -> list[dict]:
    """A bias's gradient (one row, many columns), a middle dim, columns fewer than a
    block's split, inner runs off every vector width and past a block of lanes."""
    return [
        {"rows": r, "cols": c, "inner": i, "T": dtype, "op": op}
        for r, c, i, op in [
            (1, 300, 64, "sum"),
            (3, 7, 24, "mean"),
            (2, 50, 130, "max"),
            (1, 2, 5, "min"),
            (2, 40, 16, "prod"),
            (1, 600, 1040, "sum"),
        ]
    ]


def atol(key: dict) -> float:
    # f32 accumulation: a sum whose terms cancel keeps their absolute error
    return 4e-6 * math.sqrt(int(key["cols"]))


FAMILY = KernelFamily(
    "reduce_cols",
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=atol,
)
