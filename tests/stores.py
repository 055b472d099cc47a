"""Helpers for tests of the stores: planted rows, golden files, a program of one site."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, ModuleOp, TensorType
from xdsl.ir import Block, Region

from emmy.base.compile_options import CompileOptions
from emmy.base.regime import regime_for
from emmy.compiler import compile_graph
from emmy.dialects import kernel
from emmy.dsl.library import declaration
from emmy.families.family import KernelFamily
from emmy.recall.tuning_db import Row
from emmy.sites.lower import instantiate

SOFTMAX_KEY = "rows=8,cols=64,T=f32"
SOFTMAX_DEFAULT = {
    "threads": 256,
    "rows_per_block": 1,
    "vec": 4,
    "algo": "registers",
    "reduction": "shuffle",
}


def row(
    config: dict,
    median_s: float,
    *,
    device: str = "emu",
    regime: str | None = None,
    family_name: str = "softmax",
    key: str = SOFTMAX_KEY,
    origin: str = "forced",
    status: str = "ok",
) -> Row:
    regime_obj = regime_for("emu")
    return Row(
        device=device,
        regime=regime or regime_obj.id,
        regime_words=regime_obj.words,
        compiler="g++ test",
        family=family_name,
        key=key,
        config=config,
        origin=origin,
        status=status,
        median_s=median_s if status in ("ok", "unstable") else None,
        repetitions=5,
        bench="planted",
    )


def softmax_config(**changes) -> dict:
    return {**SOFTMAX_DEFAULT, **changes}


def golden_entry(config: dict, median_s: float) -> dict:
    """A golden file's entry for the softmax site of these tests."""
    return {
        "family": "softmax",
        "key": SOFTMAX_KEY,
        "config": config,
        "median_s": median_s,
        "promoted_from": {},
    }


def write_golden(
    path: Path, entries: list[dict], *, device: str = "emu", regime: str | None = None
) -> Path:
    regime_obj = regime_for("emu")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "schema": 1,
                "device": device,
                "regime": regime or regime_obj.id,
                "regime_words": regime_obj.words,
                "entries": entries,
            }
        )
    )
    return path


def scaling_family(name: str, factor: float) -> KernelFamily:
    """The registry entry of a test library's kernel of one vector (tests/library/: fault,
    scale) whose reference is `factor` x: checked on one key of 64 ones."""
    return KernelFamily(
        name,
        reference=lambda key, inputs: inputs[0].double() * factor,
        check_keys=lambda dtype: [{"n": 64, "T": dtype}],
        check_inputs=lambda key, dtype, generator: [torch.ones(key["n"])],
        check_dtypes=("f32",),
    )


def single_site_module(family_name: str, key: dict, shape: list[int], dtype=None) -> ModuleOp:
    """`@main` calling one site of a family, as lower-graph would build it."""
    decl = declaration(family_name)
    site = instantiate(decl, key, f"{family_name}_0")
    tensor = TensorType(dtype or Float32Type(), shape)
    block = Block(arg_types=[tensor])
    call = kernel.CallOp(site.sym_name.data, [block.args[0]], [tensor])
    block.add_ops([call, func.ReturnOp(call.outputs[0])])
    main = func.FuncOp("main", ([tensor], [tensor]), Region(block))
    return ModuleOp([site, main])


def softmax_program(db: Path, **options: str):
    """The softmax site compiled with the tuning database `db` and `options` as text
    (CompileOptions.parse's keywords)."""
    module = single_site_module("softmax", {"rows": 8, "cols": 64, "T": "f32"}, [8, 64])
    return compile_graph(module, CompileOptions.parse(db=db, **options))


def matmul_module(m: int, n: int, k: int) -> ModuleOp:
    """`@main(a, b) = a · b` in bf16 as the frontend gives it (a graph op, not yet a site):
    the pipeline makes it a `matmul_path` choice."""
    from xdsl.dialects.builtin import BFloat16Type

    from emmy.dialects import graph

    a, b, c = (TensorType(BFloat16Type(), shape) for shape in ([m, k], [k, n], [m, n]))
    block = Block(arg_types=[a, b])
    product = graph.MatmulOp(block.args[0], block.args[1], c, transpose_b=False)
    block.add_ops([product, func.ReturnOp(product.result)])
    return ModuleOp([func.FuncOp("main", ([a, b], [c]), Region(block))])
