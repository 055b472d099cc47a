"""A chain of elementwise ops as one kernel, its chain written into the key (`fn`), each
input read as full, row-broadcast, column-broadcast, one per channel or scalar."""

from __future__ import annotations

import math

from xdsl.ir import Operation

from emmy.base.problem_key import InputKind, parse_input_kinds
from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.chains import (
    RUN_KINDS,
    collect_group,
    dtype_of,
    middle_run,
    required_broadcast_kinds,
    shape_of,
)
from emmy.families.family import Fusion, KernelFamily, OpSites, Site, WritesOver

CHAIN = "((gelu((in0 * in1)) + silu((in2 - in3))) / (2.0 + exp(tanh(in0)))) - relu(gelu_tanh(in1))"
#: a chain of channel inputs (a BatchNorm's scale and shift) beside full and row ones
CHANNEL_CHAIN = "(((in0 - in1) * in2) + in3) * in4"
#: chains of the pointwise table's ops, each a check key of its own: (storage type of the
#: output, of each input (full, row, col, scalar; "T" for the float type checked), chain)
TABLE_CHAINS = [
    (
        "T",
        "T/T/T/T",
        "addcdiv(lerp(softplus(in0, 1.0, 20.0), mish(in1), hardsigmoid(in2)), "
        "where(gt(in0, in1), elu(in0, 1.0, 1.0, 1.0), leaky_relu(in1, 0.2)), "
        "(abs(in3) + 1.0), 0.5)",
    ),
    (
        "T",
        "T/T/T/T",
        "((maximum(sqrt(abs(in0)), rsqrt((abs(in1) + 0.5))) + minimum(log(abs(in2)), "
        "log1p(abs(in3)))) + ((expm1(in0) * sin(in1)) - (cos(in2) * erf(in3)))) "
        "+ (pow(in0, 2.0) + (reciprocal((abs(in1) + 1.0)) + (sign(in2) + hardswish(in3))))",
    ),
    (
        "T",
        "T/T/T/T",
        "(((floor(in0) + ceil(in1)) + (round(in2) + trunc(in3))) + clamp(in0, -0.5, 0.5)) "
        "+ ((clamp_min(in1, 0.1) + clamp_max(in2, 0.1)) + addcmul(in0, in1, in3, 0.5))",
    ),
    (
        "i8",
        "T/T/T/T",
        "logical_or(logical_and(lt(in0, in1), ne(in2, in3)), logical_xor(ge(in0, 0.5), logical_not(isnan(in1))))",
    ),
    (
        "i64",
        "i64/i32/i8/T",
        "where(in2, ((in0 * 3) - to_i64(in1)), pow(bitwise_xor(in0, 5), 2)) "
        "+ (clamp(in0, -3, 4) + (to_i64(to_bf16(in3)) + to_i64(bitwise_and(in1, 6))))",
    ),
    (
        "T",
        "i64/i32/i8/T",
        "(to_f32(in0) / to_f32((abs(in1) + 1))) + where(eq(in2, gt(in0, 0)), to_f16(in3), 0.0)",
    ),
]


def _table_keys(dtype: str) -> list[dict]:
    """The table chains' keys, in the float `dtype`; those with integer or bool types only
    in f32 (they are the same in every float type)."""
    keys = []
    for out, ins, chain in TABLE_CHAINS:
        if (out != "T" or "i" in ins) and dtype != "f32":
            continue
        key = {"n": 5 * 24, "cols": 24, "T": out.replace("T", dtype)}
        key |= {"inputs": "full/row/col/scalar", "fn": chain}
        named = ins.replace("T", dtype)
        if set(named.split("/")) != {key["T"]}:
            key["dtypes"] = named
        keys.append(key)
    return keys


def site(root: Operation, fusion: Fusion) -> Site:
    """The chain that ends at `root`."""
    group = collect_group(root)
    out_shape = shape_of(root.results[0])
    dtype = dtype_of(root.results[0])
    inputs = required_broadcast_kinds(group.inputs, out_shape, middle=True)
    key: dict[str, int | str] = {
        "n": max(1, math.prod(out_shape)),
        "cols": out_shape[-1] if out_shape else 1,
        "T": dtype,
        "inputs": inputs,
        "fn": group.text,
    }
    if any(kind in RUN_KINDS for kind in parse_input_kinds(inputs)):
        key |= middle_run(out_shape)
    input_dtypes = [dtype_of(value) for value in group.inputs]
    if any(d != dtype for d in input_dtypes):
        key["dtypes"] = "/".join(input_dtypes)
    return Site("elementwise", key, group.inputs)


def reference(key: dict, inputs: list):
    """The chain over the inputs as their kinds broadcast them over [rows, cols] (a
    channel input gathered at each element's channel)."""
    # torch stays off the compile path: only benches and checks call references
    import torch

    from emmy.families.tensors import evaluate_chain, exact

    n, cols = int(key["n"]), int(key["cols"])
    inner, mid = int(key.get("inner", 1)), int(key.get("mid", 1))
    at = {
        InputKind.MIDDLE: torch.arange(n) // inner % mid,
        InputKind.BATCH: torch.arange(n) % (mid * inner),
    }
    kinds = parse_input_kinds(str(key["inputs"]))
    named = {
        f"in{i}": exact(t).reshape(-1)[at[kind]].reshape(n // cols, cols)
        if kind in at
        else exact(t)
        for i, (kind, t) in enumerate(zip(kinds, inputs, strict=True))
    }
    return evaluate_chain(str(key["fn"]), named)


def check_inputs(key: dict, dtype: str, generator) -> list:
    """Each input in the shape its kind reads."""
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import random_of

    rows, cols = key["n"] // key["cols"], key["cols"]
    inner, mid = int(key.get("inner", 1)), int(key.get("mid", 1))
    shapes = {"full": (rows, cols), "row": (cols,), "col": (rows, 1), "scalar": (1,),
              "mid": (mid,), "batch": (mid * inner,)}  # fmt: skip
    kinds = parse_input_kinds(str(key["inputs"]))
    named = str(key.get("dtypes") or "/".join([key["T"]] * len(kinds))).split("/")
    return [random_of(shapes[kind], d, generator) for kind, d in zip(kinds, named, strict=True)]


def grid() -> list[tuple[str, str]]:
    def gelu(x: str, cols: int, dtype: str) -> str:
        return f"{key_grid.F}.gelu({x} * 2.0 + {key_grid.randn((cols,), dtype)})"

    return key_grid.row_keys(gelu)


FAMILY = KernelFamily(
    "elementwise",
    lowers=OpSites((graph.ElementwiseOp,), site),
    reference=reference,
    check_keys=lambda dtype: [
        *[
            {"n": r * c, "cols": c, "T": dtype, "inputs": "full/row/col/scalar", "fn": CHAIN}
            for r, c in [(1, 1), (7, 13), (3, 64), (5, 120)]
        ],
        # a BatchNorm's per-channel affine, and a batch entry's factor (a position
        # embedding's), over [2, 3, 4, 5] and over [3, 5, 7]
        *[
            {
                "n": n,
                "cols": c,
                "T": dtype,
                "inputs": "full/mid/mid/row/batch",
                "fn": CHANNEL_CHAIN,
                "inner": inner,
                "mid": mid,
            }
            for n, c, inner, mid in [(120, 5, 20, 3), (105, 7, 7, 5)]
        ],  # fmt: skip
        *_table_keys(dtype),
    ],
    check_inputs=check_inputs,
    writes_over=WritesOver.SAME_SHAPE_INPUT,  # a counter's `add_`
    grid=grid,
)
