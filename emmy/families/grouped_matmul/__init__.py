"""A mixture of experts' grouped matmul (`graph.grouped_matmul`, SIMT): each group's rows of
A times its own weight, the groups' row offsets read at run time; the weights stored
[groups, k, n] (layout kn) or [groups, n, k] (nk)."""

from __future__ import annotations

from emmy.dialects import graph
from emmy.families.chains import dtype_of, shape_of
from emmy.families.family import Fusion, KernelFamily, OpSites, Site


def grouped_matmul_key(
    rows: int, n: int, k: int, groups: int, layout: str, dtype: str, offsets: str
) -> dict:
    w_rows, w_cols = (k, n) if layout == "kn" else (n, k)
    return {
        "rows": rows,
        "n": n,
        "k": k,
        "groups": groups,
        "w_rows": w_rows,
        "w_cols": w_cols,
        "layout": layout,
        "T": dtype,
        "I": offsets,
    }


def site(op: graph.GroupedMatmulOp, fusion: Fusion) -> Site:
    (rows, k), (groups, *_) = shape_of(op.lhs), shape_of(op.rhs)
    n = shape_of(op.result)[1]
    layout = "nk" if op.transpose_b else "kn"
    key = grouped_matmul_key(rows, n, k, groups, layout, dtype_of(op.lhs), dtype_of(op.offsets))
    return Site("grouped_matmul", key, [op.lhs, op.rhs, op.offsets])


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    a, w, offsets = inputs
    a, w = a.double(), w.double()
    if str(key["layout"]) == "nk":
        w = w.transpose(-2, -1)
    out = torch.zeros(a.shape[0], w.shape[-1], dtype=torch.float64)
    begin = 0
    for group, end in enumerate(offsets.tolist()):
        out[begin:end] = a[begin:end] @ w[group]
        begin = end
    return out


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    import torch

    from emmy.base import dtypes
    from emmy.families.tensors import randn

    rows, groups = int(key["rows"]), int(key["groups"])
    # ragged groups, one of them empty where there are several, the last ending short of
    # the rows (a zero tail)
    counts = torch.randint(0, rows // groups + 2, (groups,), generator=generator)
    if groups > 1:
        counts[1] = 0
    ends = torch.cumsum(counts, 0).clamp(max=rows - 1 if groups > 1 else rows)
    return [
        randn((rows, key["k"]), dtype, generator),
        randn((groups, key["w_rows"], key["w_cols"]), dtype, generator),
        ends.to(dtypes.torch_dtype(str(key["I"]))),
    ]


def depth_atol(key: dict) -> float:
    """f32 accumulation over k."""
    return 2e-6 * int(key["k"])


FAMILY = KernelFamily(
    "grouped_matmul",
    lowers=OpSites((graph.GroupedMatmulOp,), site),
    reference=reference,
    # ragged groups (an empty one, a zero tail), both layouts, one group holding every row
    check_keys=lambda dtype: [
        grouped_matmul_key(37, 50, 29, 4, "kn", dtype, "i32"),
        grouped_matmul_key(70, 20, 33, 3, "nk", dtype, "i64"),
        grouped_matmul_key(9, 16, 8, 1, "nk", dtype, "i32"),
    ],
    check_inputs=check_inputs,
    extra_atol=depth_atol,
)
