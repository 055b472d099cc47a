"""The tensor-core matmul's reach and fork space: every f16/bf16 product takes it (B as
[k, n] or [n, k], any n and k), its configs fit A100/H100/H200 blocks, and GPT-2's tied
lm_head reads the embedding in place. Its numerics: tests/test_library_families.py runs
every option on the check keys of emmy/families/matmul_tc/."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import Float32Type, TensorType, f16
from xdsl.ir import Block

from emmy.dialects import graph
from emmy.dsl.library import active_params, declaration
from emmy.families.matmul import matmul_key
from emmy.sites.fork_space import ForkSpace

#: shared memory a block may have on A100 (164 KiB) and H100/H200 (228 KiB), with room
SHARED_LIMIT = 160 * 1024


def product(element, a: list[int], b: list[int], transpose_b: bool) -> graph.MatmulOp:
    n = b[-2] if transpose_b else b[-1]
    operands = Block(arg_types=[TensorType(element, a), TensorType(element, b)]).args
    return graph.MatmulOp(*operands, TensorType(element, [*a[:-1], n]), transpose_b)


@pytest.mark.parametrize(
    "a, b, transpose_b, layout",
    [([3, 768], [50257, 768], True, "nk"), ([5, 43], [43, 45], False, "kn")],
)
def test_every_half_product_takes_tensor_cores(a, b, transpose_b, layout) -> None:
    family_name, key = matmul_key(product(f16, a, b, transpose_b))
    assert family_name == "matmul_tc"
    assert key["layout"] == layout and key["n"] == (b[-2] if transpose_b else b[-1])
    assert list(ForkSpace.of(declaration("matmul_tc")).configs(key)), (
        "no config for a ragged product"
    )
    assert matmul_key(product(Float32Type(), a, b, transpose_b))[0] == "matmul"


def test_the_layout_picks_the_b_parameter() -> None:
    decl = declaration("matmul_tc")
    key = {"batch": 1, "m": 3, "n": 50257, "k": 768, "b_batch": 1, "T": "bf16"}
    kn = [p.name for p in active_params(decl, key)]
    nk = [p.name for p in active_params(decl, {**key, "layout": "nk"})]
    assert kn[:2] == ["a", "b"] and nk[:2] == ["a", "bt"]


def launch(config: dict) -> tuple[int, int]:
    """(threads, shared bytes) of a config, as the declaration's launch computes them."""
    bm, bn, bk, stages = (config[n] for n in ("block_m", "block_n", "block_k", "stages"))
    b_stage = max(bk * (bn + 8), bn * (bk + 8))
    shared = 2 * max(stages * (bm * (bk + 8) + b_stage), bm * (bn + 8))
    return config["warps_m"] * config["warps_n"] * 32, shared


def test_every_config_fits_a_block_of_the_gpus() -> None:
    """Warp tiles up to 64 x 64 (32 mma tiles), block tiles up to 128 x 256, 2-4 stages;
    none over 256 threads or 160 KiB of shared memory; rows of A and B not whole 16-byte
    chunks (k = 43) only with element fills."""
    decl = declaration("matmul_tc")
    key = {"batch": 1, "m": 1024, "n": 50257, "k": 768, "b_batch": 1, "layout": "nk"}
    space = list(ForkSpace.of(decl).configs({**key, "T": "bf16", "epilogue": "acc", "inputs": ""}))
    for config in space:
        threads, shared = launch(config)
        assert threads <= 256 and shared <= SHARED_LIMIT, config
        mma_tiles = config["block_m"] // (config["warps_m"] * 16) * config["block_n"]
        assert mma_tiles // (config["warps_n"] * 8) <= 32, config
    assert {(c["block_m"], c["block_n"]) for c in space} >= {(128, 256), (32, 32)}
    assert {c["stages"] for c in space} == {2, 3, 4}
    declared = {f.name: f.default for f in decl.forks}
    assert declared in space and declared["stages"] == 3
    ragged = {**key, "k": 43, "T": "f16", "epilogue": "acc", "inputs": ""}
    assert {c["fill"] for c in ForkSpace.of(decl).configs(ragged)} == {"scalar"}


def test_gpt2s_tied_lm_head_reads_the_embedding_in_place() -> None:
    """At the tiny config in bf16, the logits x · wteᵀ read wte itself (no transposed copy
    of it among the constants) on tensor cores; no product of the model is left to SIMT."""
    from emmy.build import parse_graph, recipe_graph_text
    from emmy.frontend.recipes import resolve_case

    text, constants = recipe_graph_text(resolve_case("gpt2", "tiny", 0, "bf16"))
    assert "wte.weight" in constants and "wte.weight.T" not in constants
    module = parse_graph(text, "<gpt2 tiny bf16>")
    products = [op for op in module.walk() if isinstance(op, graph.MatmulOp)]
    assert products and {matmul_key(op)[0] for op in products} == {"matmul_tc"}
    transposed = [matmul_key(op)[1] for op in products if op.transpose_b]
    assert [(key["n"], key["layout"]) for key in transposed] == [(256, "nk")]  # tiny's vocab
