"""The key grid of the prior's dataset: one-site PyTorch expressions per family, from tiny
shapes to what the emulator runs in well under a second (`emmy campaign plan --grid`,
scripts/make-dataset)."""

from __future__ import annotations

import itertools

from emmy.dtypes import torch_dtype

#: the storage types the dataset's keys are in
DTYPES = ("f32", "bf16")


def randn(shape: tuple[int, ...], dtype: str) -> str:
    return f"torch.randn({', '.join(map(str, shape))}, dtype={torch_dtype(dtype)})"


def grid() -> dict[str, list[tuple[str, str]]]:
    """Per group (a family, or `split_k`), the expressions of its keys with the pins of
    their compile: shapes from tiny to what the emulator runs in well under a second,
    ragged and round, in f32 and bf16."""
    rows_cols = [
        (8, 64), (64, 100), (256, 256), (32, 1000), (128, 768), (16, 4096),
        (1, 4096), (512, 64), (4, 2048), (200, 333), (1024, 128), (48, 1536),
        (96, 512), (2, 8192), (300, 200), (64, 3072), (24, 640), (768, 96), (128, 2048),
        (40, 50), (12, 1200), (160, 480), (640, 40), (36, 2560), (400, 160), (6, 6000),
    ]  # fmt: skip
    f = "torch.nn.functional"
    expressions: dict[str, list[str]] = {
        "softmax": [],
        "layer_norm": [],
        "rms_norm": [],
        "elementwise": [],
        "reduce_rows": [],
        "matmul": [],
        "matmul_tc": [],
        "attention": [],
        "attention_tc": [],
        "permute": [],
        "embedding": [],
        "mask_bias": [],
    }
    for (rows, cols), dtype in itertools.product(rows_cols, DTYPES):
        x = randn((rows, cols), dtype)
        w, b = randn((cols,), dtype), randn((cols,), dtype)
        expressions["softmax"].append(f"torch.softmax({x}, -1)")
        expressions["layer_norm"].append(f"{f}.layer_norm({x}, ({cols},), {w}, {b})")
        expressions["rms_norm"].append(f"{f}.rms_norm({x}, ({cols},), {w}, 1e-6)")
        expressions["elementwise"].append(f"{f}.gelu({x} * 2.0 + {b})")
        expressions["reduce_rows"].append(f"{x}.sum(-1)")
        expressions["permute"].append(f"{x}.t().contiguous()")
    for m, n, k in [
        (16, 16, 16), (64, 48, 40), (128, 128, 64), (100, 200, 72), (256, 64, 256),
        (32, 256, 128), (200, 96, 48), (64, 64, 512), (8, 512, 64), (160, 160, 160),
        (48, 80, 96), (128, 64, 32), (96, 96, 96), (24, 384, 48), (256, 32, 128),
        (72, 120, 200), (40, 40, 40), (112, 48, 160), (16, 320, 96), (192, 128, 32),
        (80, 56, 248), (144, 72, 64), (56, 176, 112), (120, 24, 192), (32, 96, 384),
        (88, 136, 56), (176, 40, 80), (64, 160, 224),
    ]:  # fmt: skip
        expressions["matmul"].append(f"{randn((m, k), 'f32')} @ {randn((k, n), 'f32')}")
        expressions["matmul_tc"].append(f"{randn((m, k), 'bf16')} @ {randn((k, n), 'bf16')}")
    # bf16 attention runs on tensor cores (attention_tc), f32 on the SIMT kernel
    for heads, length, dim in [
        (2, 16, 32), (4, 64, 64), (8, 33, 64), (2, 128, 128), (1, 200, 64), (4, 40, 128),
        (2, 96, 64), (1, 64, 128), (3, 48, 32), (1, 256, 64), (2, 80, 64), (4, 24, 128),
        (1, 160, 128), (2, 200, 32), (8, 16, 64), (2, 48, 128), (2, 112, 64), (1, 96, 128),
        (4, 56, 32), (3, 72, 64), (1, 144, 64), (2, 64, 128), (6, 32, 64), (1, 112, 128),
        (2, 176, 32), (4, 88, 64), (1, 48, 128), (2, 136, 64),
    ]:  # fmt: skip
        qkv = ", ".join(randn((1, heads, length, dim), "bf16") for _ in range(3))
        sdpa = f"{f}.scaled_dot_product_attention({qkv}, is_causal=True)"
        expressions["attention_tc"].append(sdpa)
        qkv = ", ".join(randn((1, heads, length, dim), "f32") for _ in range(3))
        expressions["attention"].append(f"{f}.scaled_dot_product_attention({qkv})")
    for (tokens, vocab, dim), dtype in itertools.product(
        [(8, 100, 64), (64, 1000, 256), (200, 512, 96), (1, 5000, 768), (512, 300, 128),
         (33, 2000, 40), (128, 4096, 512), (16, 64, 1024), (1024, 256, 32), (300, 777, 200),
         (48, 50257, 768), (2048, 128, 16)],
        DTYPES,
    ):  # fmt: skip
        ids = f"torch.randint(0, {vocab}, ({tokens},))"
        expressions["embedding"].append(f"{f}.embedding({ids}, {randn((vocab, dim), dtype)})")
    # a boolean mask over (query, key) becomes an additive one (mask_bias) beside its attention
    masks = itertools.product(
        [16, 40, 64, 100, 128, 200, 256, 333, 512, 1000], [(1, 1), (2, 4)], ["f32"]
    )
    wide = itertools.product([128, 300, 512, 1024, 2048], [(1, 16), (1, 64)], ["f32"])
    for length, (heads, queries), dtype in itertools.chain(masks, wide):
        q = randn((1, heads, queries, 32), dtype)
        kv = ", ".join(randn((1, heads, length, 32), dtype) for _ in range(2))
        mask = f"torch.ones(1, 1, {queries}, {length}, dtype=torch.bool)"
        expressions["mask_bias"].append(
            f"{f}.scaled_dot_product_attention({q}, {kv}, attn_mask={mask})"
        )
    keys = {family: [(e, "") for e in exprs] for family, exprs in expressions.items()}
    # split-K: the k-slices (matmul, matmul_tc with a `split`) and their sum (split_sum)
    keys["split_k"] = []
    for (m, n, k, split), dtype in itertools.product(
        [(16, 64, 512, 2), (16, 64, 1024, 4), (32, 128, 1024, 2), (8, 96, 2048, 8),
         (64, 64, 2048, 4), (16, 256, 512, 2), (48, 80, 1536, 4), (1, 192, 1024, 4),
         (4, 128, 1024, 2), (24, 64, 768, 2), (32, 32, 2048, 8), (2, 320, 512, 2),
         (40, 96, 1024, 4), (8, 64, 4096, 8)],
        DTYPES,
    ):  # fmt: skip
        product = f"{randn((m, k), dtype)} @ {randn((k, n), dtype)}"
        keys["split_k"].append((product, f"matmul=split{split}"))
    # decode-like split-K products with the epilogues a model puts on them: split_sum's
    # epilogue and extra inputs vary, and the matmuls see the [n, k] weights of a linear
    for (m, n, k, split, epilogue), dtype in itertools.product(
        [(1, 256, 1024, 4, "bias"), (2, 128, 2048, 8, "gelu"), (4, 384, 512, 2, "none"),
         (8, 160, 1024, 4, "bias"), (12, 96, 1536, 4, "silu"), (16, 128, 2048, 8, "residual"),
         (20, 48, 1024, 2, "gelu"), (24, 256, 768, 2, "bias"), (32, 80, 4096, 8, "none"),
         (6, 512, 1024, 4, "silu"), (64, 32, 1024, 2, "residual"), (3, 640, 512, 2, "bias"),
         (10, 200, 1024, 4, "gelu"), (28, 112, 1536, 4, "none"), (1, 1024, 2048, 8, "bias"),
         (48, 48, 2048, 8, "silu"), (8, 320, 768, 2, "residual"), (16, 176, 1024, 4, "gelu"),
         (5, 72, 3072, 8, "bias"), (40, 128, 512, 2, "none"), (2, 768, 1024, 4, "silu"),
         (56, 64, 1536, 4, "bias"), (14, 240, 2048, 8, "residual"), (36, 96, 1024, 2, "gelu")],
        DTYPES,
    ):  # fmt: skip
        x, weight, bias = randn((m, k), dtype), randn((n, k), dtype), randn((n,), dtype)
        linear = f"{f}.linear({x}, {weight}, {bias})"
        product = {
            "none": f"{f}.linear({x}, {weight})",
            "bias": linear,
            "gelu": f"{f}.gelu({linear})",
            "silu": f"{f}.silu({linear})",
            "residual": f"{linear} + {randn((m, n), dtype)}",
        }[epilogue]
        keys["split_k"].append((product, f"matmul=split{split}"))
    return keys
