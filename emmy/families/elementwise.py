"""A chain of elementwise ops as one kernel, its chain written into the key (`fn`), each
input read as full, row-broadcast, column-broadcast or scalar."""

from __future__ import annotations

import math

from xdsl.ir import Operation

from emmy.dialects import graph
from emmy.families.chains import collect_group, dtype_of, required_broadcast_kinds, shape_of
from emmy.families.family import Family, FamilyKind, Fusion, Site

CHAIN = "((gelu((in0 * in1)) + silu((in2 - in3))) / (2.0 + exp(tanh(in0)))) - relu(gelu_tanh(in1))"


def site(root: Operation, fusion: Fusion) -> Site:
    """The chain that ends at `root`."""
    group = collect_group(root)
    out_shape = shape_of(root.results[0])
    dtype = dtype_of(root.results[0])
    key: dict[str, int | str] = {
        "n": max(1, math.prod(out_shape)),
        "cols": out_shape[-1] if out_shape else 1,
        "T": dtype,
        "inputs": required_broadcast_kinds(group.inputs, out_shape),
        "fn": group.text,
    }
    input_dtypes = [dtype_of(value) for value in group.inputs]
    if any(d != dtype for d in input_dtypes):
        key["dtypes"] = "/".join(input_dtypes)
    return Site("elementwise", key, group.inputs)


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    from emmy.families.tensors import evaluate_chain

    return evaluate_chain(str(key["fn"]), {f"in{i}": t.double() for i, t in enumerate(inputs)})


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn

    rows, cols = key["n"] // key["cols"], key["cols"]
    return [
        randn((rows, cols), dtype, generator),
        randn((cols,), dtype, generator),
        randn((rows, 1), dtype, generator),
        randn((1,), dtype, generator),
    ]


FAMILY = Family(
    "elementwise",
    FamilyKind.KERNEL,
    ops=(graph.ElementwiseOp,),
    site=site,
    reference=reference,
    check_keys=lambda dtype: [
        {"n": r * c, "cols": c, "T": dtype, "inputs": "full/row/col/scalar", "fn": CHAIN}
        for r, c in [(1, 1), (7, 13), (3, 64), (5, 120)]
    ],
    check_inputs=check_inputs,
)
