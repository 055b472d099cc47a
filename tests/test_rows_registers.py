"""The row kernels' `registers` option (softmax, LayerNorm, RMSNorm): the checks run it at
every ragged length, its rows stay in registers (no stack frame: a local array indexed at
run time would live in memory), and the defaults take it, with 16-byte vectors, wherever
the row fits."""

from __future__ import annotations

import pytest

from emmy.backend.nvrtc import compile_cuda
from emmy.base.problem_key import SiteRef
from emmy.check import case_configs, case_variants
from emmy.compiler import compile_sites
from emmy.dsl.keys import problem_key
from emmy.dsl.library import declaration
from emmy.families.registry import registered
from emmy.families.rows import ROW_SHAPES
from emmy.recall.oracles import DefaultOracle, site_query

ROW_FAMILIES = ("softmax", "layer_norm", "rms_norm")
EPS = {"softmax": {}, "layer_norm": {"eps": "1e-05"}, "rms_norm": {"eps": "1e-06"}}


def default_of(family_name: str, rows: int, cols: int, dtype: str) -> dict:
    key = {"rows": rows, "cols": cols, "T": dtype, **EPS[family_name]}
    query = site_query(SiteRef(family_name, problem_key(declaration(family_name), key)))
    decision = DefaultOracle(None).decide(query)
    assert decision is not None
    return decision.config


@pytest.mark.parametrize("family_name", ROW_FAMILIES)
def test_the_checks_run_registers_at_every_ragged_length_and_fused_row(family_name: str) -> None:
    """In some storage type at each key (the checks pair each key with each option, and
    each storage type with each option, not all three at once)."""
    keys = registered(family_name).check_keys("f32")
    ran = {
        c["shape"]
        for dtype in ("f32", "f16", "bf16")
        for c in case_configs(family_name, dtype)
        if c["algo"] == "registers"
    }
    plain = sorted(k["cols"] for k in keys if not {"fn", "causal", "stats"} & set(k))
    assert plain == sorted(c for _, c in ROW_SHAPES)
    assert any(k.get("store") == "yes" and k.get("epilogue", "acc") != "acc" for k in keys)
    missing = [k for i, k in enumerate(keys) if i not in ran]
    assert not missing, f"{family_name}: registers never runs at {missing}"


@pytest.mark.parametrize("family_name", ROW_FAMILIES)
def test_register_rows_have_no_stack_frame(family_name: str) -> None:
    """Each `registers` variant the checks run (one at every ragged length), in one source."""
    variants = [
        variant
        for dtype in ("f32", "f16", "bf16")
        for _, variant in case_variants(family_name, dtype)
        if variant.config["algo"] == "registers"
    ]
    assert variants
    resources = compile_cuda(compile_sites(variants).source, "sm_90").resources
    framed = {v.name: resources[v.name] for v in variants if resources[v.name].stack_frame}
    assert not framed, f"{family_name}: rows in local memory: {framed}"


@pytest.mark.parametrize("family_name", ROW_FAMILIES)
def test_the_default_keeps_rows_that_fit_in_registers_with_16_byte_vectors(
    family_name: str,
) -> None:
    assert default_of(family_name, 64, 4096, "bf16") == {
        "threads": 256,
        "rows_per_block": 1,
        "vec": 8,
        "algo": "registers",
        "reduction": "shuffle",
    }
    assert default_of(family_name, 64, 768, "f32")["vec"] == 4  # 8 f32 are 32 bytes
    assert default_of(family_name, 64, 1000, "f16")["vec"] == 8
    ragged = default_of(family_name, 64, 97, "f16")
    assert ragged["vec"] == 1 and ragged["algo"] == "registers"
    # a row past 64 floats a thread streams from memory
    assert default_of(family_name, 4, 1 << 16, "f32")["algo"] != "registers"
