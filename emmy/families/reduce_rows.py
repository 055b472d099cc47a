"""The sum, mean or max of each row (the last dim)."""

from __future__ import annotations

import math

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Family, FamilyKind, Fusion, Site


def site(op: graph.ReduceOp, fusion: Fusion) -> Site:
    shape = shape_of(op.input)
    key = {"rows": math.prod(shape[:-1]), "cols": shape[-1], "T": dtype_of(op.input)}
    return Site("reduce_rows", {**key, "op": op.kind.data}, list(op.operands))


def reference(key: dict, inputs: list):
    x = inputs[0].double()
    ops = {"sum": lambda: x.sum(-1), "mean": lambda: x.mean(-1), "max": lambda: x.amax(-1)}
    return ops[str(key["op"])]()


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    return [randn((key["rows"], key["cols"]), dtype, generator)]


FAMILY = Family(
    "reduce_rows",
    FamilyKind.KERNEL,
    ops=(graph.ReduceOp,),
    site=site,
    reference=reference,
    check_keys=lambda dtype: [
        {"rows": r, "cols": c, "T": dtype, "op": op}
        for (r, c), op in zip(
            [(3, 1), (5, 97), (2, 1000), (4, 64)], ["sum", "mean", "max", "sum"], strict=True
        )
    ],
    check_inputs=check_inputs,
    # f32 accumulation: a sum whose terms cancel keeps their absolute error
    extra_atol=lambda key: 4e-6 * math.sqrt(int(key["cols"])),
)
