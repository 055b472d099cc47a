"""Batched matmul with a fused epilogue (SIMT): A stored [m, k] or [k, m], B stored [k, n]
or [n, k]. A matmul's site
is the tensor-core family's where that applies (see `matmul_key`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from emmy.base import dtypes
from emmy.dialects import graph
from emmy.families import key_grid
from emmy.families.chains import collect_group, dtype_of, required_broadcast_kinds, shape_of
from emmy.families.family import Fuses, Fusion, KernelFamily, OpSites, Site


def tensor_core_product(dtype: str) -> bool:
    """Whether the tensor-core matmul takes a product of this storage type: every f16 or
    bf16 one, B stored either way, of any m, n and k (edge tiles are zero-filled, and rows
    that are not whole 16-byte chunks are filled by element loads)."""
    return dtypes.is_half(dtype)


def matmul_key(op: graph.MatmulOp, epilogue: str = "acc", inputs: str = "") -> tuple[str, dict]:
    """The tensor-core family for f16/bf16 (A stored [m, k] or, transpose_a, [k, m]; B
    stored [k, n] or, transpose_b, [n, k]), the SIMT family otherwise, and the key."""
    a, b = shape_of(op.lhs), shape_of(op.rhs)
    n = b[-2] if op.transpose_b else b[-1]
    if op.transpose_a is not None:
        batch, k, m, b_batch = math.prod(a[:-2]), a[-2], a[-1], math.prod(b[:-2])
    elif len(b) == 2:
        batch, m, k, b_batch = 1, math.prod(a[:-1]), a[-1], 1
    else:
        batch, m, k, b_batch = math.prod(a[:-2]), a[-2], a[-1], math.prod(b[:-2])
    T = dtype_of(op.lhs)
    common = {"batch": batch, "m": m, "n": n, "k": k, "b_batch": b_batch}
    layouts = {"layout": "nk" if op.transpose_b else "kn"}
    if op.transpose_a is not None:
        layouts["a_layout"] = "km"
    epilogue_key = {"T": T, "epilogue": epilogue, "inputs": inputs}
    if tensor_core_product(T):
        return "matmul_tc", {**common, **layouts, **epilogue_key}
    return "matmul", {**common, "b_rows": b[-2], "b_cols": b[-1], **layouts, **epilogue_key}


def site(op: graph.MatmulOp, fusion: Fusion) -> Site:
    """The matmul with `fusion`'s epilogue over its product `acc`."""
    if fusion.epilogue is None:
        family_name, key = matmul_key(op)
        return Site(family_name, key, [op.lhs, op.rhs])
    group = collect_group(fusion.epilogue, op.result)
    kinds = required_broadcast_kinds(group.inputs, shape_of(fusion.epilogue.results[0]))
    family_name, key = matmul_key(op, epilogue=group.text, inputs=kinds)
    return Site(family_name, key, [op.lhs, op.rhs, *group.inputs])


def split_k_slices(k: int, split: int) -> list[slice]:
    """The k-slice each of a split-K matmul's `split` parts sums: ceil(k / split) rounded up
    to 8 wide (whole 16-byte rows of 16-bit elements), the last ones shorter or empty."""
    width = math.ceil(math.ceil(k / split) / 8) * 8
    return [slice(min(k, s * width), min(k, (s + 1) * width)) for s in range(split)]


def reference(key: dict, inputs: list):
    # torch stays off the compile path: only benches and checks call references
    import torch

    from emmy.families.tensors import with_epilogue

    a, b = (t.double() for t in inputs[:2])
    if transposes_a(key):
        a = a.transpose(-2, -1)
    if str(key.get("layout", "kn")) == "nk":
        b = b.transpose(-2, -1)
    split = int(key.get("split", 1))
    if split > 1:  # each part's sum over its k-slice, before any epilogue
        b = b.expand(a.shape[0], *b.shape[1:])
        return torch.stack(
            [a[..., cut] @ b[:, cut, :] for cut in split_k_slices(a.shape[-1], split)]
        )
    return with_epilogue(key, a @ b, inputs[2:])


def depth_atol(key: dict) -> float:
    """f32 accumulation over k."""
    return 2e-6 * int(key["k"])


#: fused matmul epilogues: (chain over the product `acc`, kinds of its extra inputs)
EPILOGUES = [
    ("acc", ""),
    ("gelu((acc + in0))", "row"),
    ("(relu(acc) * in0)", "scalar"),
    ("((silu(acc) + in0) + in1)", "full/col"),
]


def check_key(
    dtype: str,
    z: int,
    zb: int,
    m: int,
    n: int,
    k: int,
    layout: str | None,
    epilogue: str = "acc",
    inputs: str = "",
    split: int = 1,
) -> dict:
    """A matmul key (layout None: the tensor-core family's, B stored [k, n])."""
    key: dict = {"batch": z, "m": m, "n": n, "k": k, "b_batch": zb}
    if layout is not None:
        rows, cols = (k, n) if layout == "kn" else (n, k)
        key |= {"b_rows": rows, "b_cols": cols, "layout": layout}
    key |= {"T": dtype, "epilogue": epilogue, "inputs": inputs}
    return key | ({"split": split} if split > 1 else {})


def check_keys(dtype: str) -> list[dict]:
    return [
        check_key(dtype, z, zb, m, n, k, layout, e, kinds)
        for z, zb, m, n, k, layout, (e, kinds) in zip(
            [1, 2, 1, 3],
            [1, 2, 1, 1],
            [1, 37, 64, 130],
            [1, 50, 128, 20],
            [1, 29, 96, 33],
            ["kn", "nk", "kn", "nk"],
            EPILOGUES,
            strict=True,
        )
    ] + [
        # split-K parts: slices of 8 (the last 3 of 8 empty), of 48 (the last ragged)
        check_key(dtype, 2, 1, 37, 50, 40, "nk", split=8),
        check_key(dtype, 1, 1, 70, 20, 140, "kn", split=3),
        # A stored [k, m] (a weight's gradient), with either B and with split-K parts
        check_key(dtype, 1, 1, 45, 30, 70, "kn") | {"a_layout": "km"},
        check_key(dtype, 2, 2, 19, 40, 33, "nk", *EPILOGUES[1]) | {"a_layout": "km"},
        check_key(dtype, 1, 1, 24, 20, 140, "kn", split=3) | {"a_layout": "km"},
    ]


def transposes_a(key: Mapping[str, object]) -> bool:
    """Whether a matmul key's A is stored [k, m] (a_layout km; mk, the default, is left
    out of key texts)."""
    return str(key.get("a_layout", "mk")) == "km"


def a_shape(key: Mapping[str, int | str]) -> tuple[int, int, int]:
    """A's stored shape: [batch, m, k], or [batch, k, m] where a_layout is km."""
    batch, m, k = (int(key[name]) for name in ("batch", "m", "k"))
    return (batch, k, m) if transposes_a(key) else (batch, m, k)


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn, random_epilogue_inputs

    return [
        randn(a_shape(key), dtype, generator),
        randn((key["b_batch"], key["b_rows"], key["b_cols"]), dtype, generator),
        *random_epilogue_inputs(key, dtype, generator),
    ]


#: the dataset grid's products, (m, n, k): matmul's in f32, matmul_tc's in bf16
GRID_SHAPES = (
    (16, 16, 16), (64, 48, 40), (128, 128, 64), (100, 200, 72), (256, 64, 256),
    (32, 256, 128), (200, 96, 48), (64, 64, 512), (8, 512, 64), (160, 160, 160),
    (48, 80, 96), (128, 64, 32), (96, 96, 96), (24, 384, 48), (256, 32, 128),
    (72, 120, 200), (40, 40, 40), (112, 48, 160), (16, 320, 96), (192, 128, 32),
    (80, 56, 248), (144, 72, 64), (56, 176, 112), (120, 24, 192), (32, 96, 384),
    (88, 136, 56), (176, 40, 80), (64, 160, 224),
)  # fmt: skip


def grid_of(dtype: str) -> list[tuple[str, str]]:
    """The dataset grid's products in one storage type."""
    return [
        (f"{key_grid.randn((m, k), dtype)} @ {key_grid.randn((k, n), dtype)}", "")
        for m, n, k in GRID_SHAPES
    ]


FAMILY = KernelFamily(
    "matmul",
    lowers=OpSites((graph.MatmulOp,), site),
    fuses=Fuses.EPILOGUE,
    reference=reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    extra_atol=depth_atol,
    grid=lambda: grid_of("f32"),
)
