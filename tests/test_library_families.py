"""Every option of the memory-bound families beyond softmax and elementwise (norms, row
reductions, transpose, embedding), run on the emulator against the float64 references of
emmy.search.reference, and compiled with NVRTC for sm_80 and sm_90 without spills.

Options are covered pairwise per shape; all variants of a family and dtype share one source,
one g++ run and one emulator process, run under two thread orders."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest
import torch
from pairwise import pairwise

from emmy.backend.nvrtc import compile_cuda
from emmy.compiler import TensorSpec, compile_variants, poisoned
from emmy.dsl.library import configs, family
from emmy.runtime.convert import REFERENCE_TOLERANCES, STORAGE_DTYPES, from_storage, to_storage
from emmy.runtime.device import BufferArg, Launch
from emmy.runtime.emu import EmuDevice
from emmy.search.reference import reference

FLOATS = ["f32", "f16", "bf16"]


def randn(shape, dtype: str, generator: torch.Generator, scale: float = 1.0, shift: float = 0.0):
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * scale + shift
    return values.to(STORAGE_DTYPES[dtype])


# family -> (keys of the shapes to test, inputs of a key, output shape of a key)
def _norm_keys(dtype, extra):
    return [
        {"rows": r, "cols": c, "T": dtype, **extra} for r, c in [(3, 1), (2, 7), (5, 96), (2, 1000)]
    ]


SPECS = {
    "layer_norm": (
        lambda dtype: _norm_keys(dtype, {"eps": "1e-05"}),
        lambda k, d, g: [
            randn((k["rows"], k["cols"]), d, g, 2.0, 0.5),
            randn((k["cols"],), d, g),
            randn((k["cols"],), d, g),
        ],
        lambda k: (k["rows"], k["cols"]),
    ),
    "rms_norm": (
        lambda dtype: _norm_keys(dtype, {"eps": "1e-06"}),
        lambda k, d, g: [randn((k["rows"], k["cols"]), d, g, 2.0), randn((k["cols"],), d, g)],
        lambda k: (k["rows"], k["cols"]),
    ),
    "reduce_rows": (
        lambda dtype: [
            {"rows": r, "cols": c, "T": dtype, "op": op}
            for (r, c), op in zip(
                [(3, 1), (5, 97), (2, 1000), (4, 64)], ["sum", "mean", "max", "sum"], strict=True
            )
        ],
        lambda k, d, g: [randn((k["rows"], k["cols"]), d, g)],
        lambda k: (k["rows"],),
    ),
    "transpose": (
        lambda dtype: [
            {"rows": r, "cols": c, "T": dtype} for r, c in [(1, 1), (37, 70), (64, 16), (3, 130)]
        ],
        lambda k, d, g: [randn((k["rows"], k["cols"]), d, g)],
        lambda k: (k["cols"], k["rows"]),
    ),
    "embedding": (
        lambda dtype: [
            {"tokens": t, "vocab": v, "dim": dm, "T": dtype, "I": i}
            for t, v, dm, i in [(1, 3, 1, "i64"), (13, 50, 24, "i32"), (9, 200, 64, "i64")]
        ],
        lambda k, d, g: [
            torch.randint(0, k["vocab"], (k["tokens"],), generator=g).to(
                torch.int32 if k["I"] == "i32" else torch.int64
            ),
            randn((k["vocab"], k["dim"]), d, g),
        ],
        lambda k: (k["tokens"], k["dim"]),
    ),
}


@dataclass
class Case:
    source: str
    launches: list[Launch]
    buffers: dict[str, np.ndarray]
    expected: dict[str, torch.Tensor]
    configs: dict[str, dict]
    dtype: str


@cache
def case(family_name: str, dtype: str) -> Case:
    """Pairwise over the shapes and the forks together: each option runs, with each other
    fork's options and on each shape, in far fewer variants than pairwise per shape."""
    keys_of, inputs_of, output_of = SPECS[family_name]
    generator = torch.Generator().manual_seed(7)
    keys = keys_of(dtype)
    candidates = [
        {"shape": index, **config}
        for index, key in enumerate(keys)
        for config in configs(family(family_name), key)
    ]
    chosen_configs = pairwise(candidates)
    sources, launches, buffers, expected, chosen = [], [], {}, {}, {}
    for shape_index, key in enumerate(keys):
        options = [
            {n: v for n, v in c.items() if n != "shape"}
            for c in chosen_configs
            if c["shape"] == shape_index
        ]
        if not options:
            continue
        tensors = inputs_of(key, dtype, generator)
        names = [f"s{shape_index}_in{i}" for i in range(len(tensors))]
        for name, tensor in zip(names, tensors, strict=True):
            integer = tensor.dtype in (torch.int32, torch.int64)
            buffers[name] = tensor.numpy().copy() if integer else to_storage(tensor)
        want = reference(family_name)(key, tensors)
        program = compile_variants(family_name, key, options, prefix=f"s{shape_index}_")
        sources.append(program.source.split("\n", 1)[1])
        for config, (name, info) in zip(options, program.kernels.items(), strict=True):
            output = f"out_{name}"
            buffers[output] = poisoned(TensorSpec(output, output_of(key), dtype))
            args = tuple(BufferArg(n) for n in names) + (BufferArg(output),)
            launches.append(Launch(name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, args))
            expected[output] = want
            chosen[output] = {"key": key, **config}
    source = '#include "emmy_device.cuh"\n' + "\n".join(sources)
    return Case(source, launches, buffers, expected, chosen, dtype)


def run_and_check(c: Case, schedule: str) -> None:
    buffers = {n: a.copy() for n, a in c.buffers.items()}
    EmuDevice().run(c.source, c.launches, buffers, schedule=schedule, timeout=600)
    torch_dtype = STORAGE_DTYPES[c.dtype]
    rtol, atol = REFERENCE_TOLERANCES[torch_dtype]
    failures = []
    for output, want in c.expected.items():
        actual = from_storage(buffers[output], torch_dtype).double().reshape(want.shape)
        want = want.to(torch_dtype).double()
        close = torch.isclose(actual, want, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()):
            where = tuple(int(i) for i in torch.nonzero(~close)[0])
            failures.append(
                f"{c.configs[output]}: first wrong at {list(where)}: {float(actual[where])} vs {float(want[where])}"
            )
    assert not failures, "\n".join(failures[:8])


@pytest.mark.parametrize("schedule", ["forward", "reverse"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("family_name", list(SPECS))
def test_every_option_on_emu(family_name: str, dtype: str, schedule: str) -> None:
    run_and_check(case(family_name, dtype), schedule)


@pytest.mark.parametrize("family_name", list(SPECS))
def test_pairwise_runs_every_option(family_name: str) -> None:
    seen = {
        (n, v)
        for d in FLOATS
        for config in case(family_name, d).configs.values()
        for n, v in config.items()
        if n != "key"
    }
    for fork in family(family_name).forks:
        for option in fork.options:
            assert (fork.name, option) in seen, f"{family_name} {fork.name}={option} never runs"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("family_name", list(SPECS))
def test_every_option_compiles_with_nvrtc_without_spills(family_name: str, arch: str) -> None:
    for dtype in FLOATS:
        compiled = compile_cuda(case(family_name, dtype).source, arch)
        spilling = {k: r for k, r in compiled.resources.items() if r.spill_stores or r.spill_loads}
        assert not spilling, f"{family_name} {dtype} {arch} spills: {spilling}"
