"""Batched matmul with a fused epilogue on tensor cores (mma.sync, ldmatrix, cp.async):
f16/bf16, B stored [k, n] or [n, k]. Its sites are built by matmul's (`matmul.matmul_key` picks it)."""

from __future__ import annotations

from emmy.base import dtypes
from emmy.families.family import KernelFamily
from emmy.families.matmul import EPILOGUES, a_shape, check_key, depth_atol, grid_of
from emmy.families.matmul import reference as matmul_reference


def check_keys(dtype: str) -> list[dict]:
    """Both layouts of B, and of A; k and n ragged (rows of A or B not whole 16-byte
    chunks: element fills), n = 50257 (GPT-2's vocabulary: its edge tiles) at a small m and k; the big tiles at
    small shapes; split-K parts, one with ragged slices."""

    def key(z, zb, m, n, k, layout, epilogue=("acc", ""), split=1) -> dict:
        tc = check_key(dtype, z, zb, m, n, k, None, *epilogue, split=split)
        return tc | {"layout": layout}

    return [
        key(1, 1, 16, 8, 16, "kn", EPILOGUES[0]),
        key(2, 2, 37, 48, 40, "nk", EPILOGUES[1]),
        key(1, 1, 128, 136, 96, "kn", EPILOGUES[2]),
        key(3, 1, 70, 24, 200, "nk", EPILOGUES[3]),
        key(1, 1, 19, 45, 43, "kn", EPILOGUES[1]),
        key(2, 1, 21, 77, 43, "nk"),
        # GPT-2's vocabulary, once: its 1571 to 197 blocks cost the emulator seconds
        key(1, 1, 3, 50257, 16, "nk") if dtype == "bf16" else key(1, 1, 3, 257, 16, "nk"),
        key(2, 1, 37, 48, 40, "kn", split=8),
        key(1, 1, 70, 24, 136, "nk", split=3),
        key(1, 1, 20, 30, 45, "kn", split=2),
        # A stored [k, m] (a weight's gradient): m whole chunks (cp.async) or ragged, with
        # either B and with split-K parts
        key(1, 1, 48, 40, 70, "kn") | {"a_layout": "km"},
        key(2, 2, 19, 24, 33, "nk", EPILOGUES[1]) | {"a_layout": "km"},
        key(1, 1, 64, 72, 136, "nk", split=3) | {"a_layout": "km"},
    ]


def check_inputs(key: dict, dtype: str, generator) -> list:
    # torch stays off the compile path: only checks build inputs
    from emmy.families.tensors import randn, random_epilogue_inputs

    zb, n, k = (key[name] for name in ("b_batch", "n", "k"))
    b_shape = (zb, n, k) if key["layout"] == "nk" else (zb, k, n)
    return [
        randn(a_shape(key), dtype, generator),
        randn(b_shape, dtype, generator),
        *random_epilogue_inputs(key, dtype, generator),
    ]


FAMILY = KernelFamily(
    "matmul_tc",
    reference=matmul_reference,
    check_keys=check_keys,
    check_inputs=check_inputs,
    check_dtypes=dtypes.HALF_NAMES,
    extra_atol=depth_atol,
    grid=lambda: grid_of("bf16"),
)
