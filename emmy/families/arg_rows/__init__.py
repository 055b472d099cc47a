"""The index of each row's first maximum or minimum (argmax, argmin), of graph.reduce
sites over floats (`reduce_rows` builds them)."""

from __future__ import annotations

import math

from emmy.families.family import KernelFamily


def reference(key: dict, inputs: list):
    x = inputs[0].double()
    return x.argmax(-1) if key["op"] == "argmax" else x.argmin(-1)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    # few distinct values, so that ties (the first one wins) and NaN (the extreme) occur
    x = randn((key["rows"], key["cols"]), "f32", generator, 2.0).round()
    if key["cols"] > 3:
        x[0, 3] = math.nan
    return [x.to(randn((1,), dtype, generator).dtype)]


FAMILY = KernelFamily(
    "arg_rows",
    reference=reference,
    check_keys=lambda dtype: [
        {"rows": r, "cols": c, "T": dtype, "op": op}
        for r, c, op in [(3, 1, "argmax"), (5, 97, "argmin"), (2, 1000, "argmax"), (4, 7, "argmin")]
    ],
    check_inputs=check_inputs,
)
