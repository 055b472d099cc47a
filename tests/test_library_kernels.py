"""Every option of every fork of the library families, run on the emulator and compiled
with NVRTC. Options are covered pairwise (each option at least once, every pair of options
of two forks together) on shapes that stress the edges; all variants of one dtype share one
source, so each dtype costs one compiler invocation and one emulator process."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest
import torch
from pairwise import pairwise

from emmy.backend.nvrtc import compile_cuda
from emmy.compiler import NUMPY_STORAGE, TensorSpec, compile_variants, poisoned
from emmy.dsl.library import configs, family
from emmy.runtime.convert import from_storage, to_storage
from emmy.runtime.device import BufferArg, Launch
from emmy.runtime.emu import EmuDevice

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
#: (rtol, atol) against a float64 reference of the same rounded inputs: emmy computes in
#: f32 and rounds once to the storage type
TOLERANCE = {"f32": (1e-5, 1e-6), "f16": (2e-3, 2e-3), "bf16": (1e-2, 1e-2)}
DTYPES = list(TORCH_DTYPES)

SOFTMAX_SHAPES = [(3, 1), (2, 7), (5, 97), (4, 130), (1, 4096), (2, 1000)]
ELEMENTWISE_SHAPES = [(1, 1), (7, 13), (3, 64), (5, 120)]
# every op of the family, every broadcast kind: in0 full, in1 row, in2 column, in3 scalar
CHAIN = "((gelu((in0 * in1)) + silu((in2 - in3))) / (2.0 + exp(tanh(in0)))) - relu(gelu_tanh(in1))"


def chain_reference(in0, in1, in2, in3):
    gelu = torch.nn.functional.gelu
    return (gelu(in0 * in1) + torch.nn.functional.silu(in2 - in3)) / (
        2.0 + torch.exp(torch.tanh(in0))
    ) - torch.relu(gelu(in1, approximate="tanh"))


@dataclass
class Case:
    """All variants of one family and dtype: one source, one launch per (shape, config)."""

    source: str
    launches: list[Launch]
    buffers: dict[str, np.ndarray]
    expected: dict[str, torch.Tensor]
    configs: dict[str, dict]
    dtype: str


def _random(shape, dtype: str, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float64).to(TORCH_DTYPES[dtype])


def _softmax_input(rows: int, cols: int, dtype: str, generator: torch.Generator) -> torch.Tensor:
    x = _random((rows, cols), dtype, generator).double() * 3
    big = {"f32": 1e4, "f16": 3e4, "bf16": 1e4}[dtype]  # exp overflows without the max
    x[0, cols // 2] = big
    if cols > 3:
        x[-1, 1] = -big
        x[0, 2] = -math.inf
    if rows > 2:
        x[1, :] = -math.inf  # a row of -inf: NaN, like torch
    return x.to(TORCH_DTYPES[dtype])


@cache
def softmax_case(dtype: str) -> Case:
    generator = torch.Generator().manual_seed(0)
    return _build("softmax", dtype, SOFTMAX_SHAPES, generator)


@cache
def elementwise_case(dtype: str) -> Case:
    generator = torch.Generator().manual_seed(1)
    return _build("elementwise", dtype, ELEMENTWISE_SHAPES, generator)


def _build(family_name: str, dtype: str, shapes, generator) -> Case:
    sources, launches, buffers, expected, chosen = [], [], {}, {}, {}
    for shape_index, (rows, cols) in enumerate(shapes):
        if family_name == "softmax":
            key = {"rows": rows, "cols": cols, "T": dtype}
            x = _softmax_input(rows, cols, dtype, generator)
            inputs = {f"x{shape_index}": x}
            reference = torch.softmax(x.double(), dim=-1)
        else:
            key = {
                "n": rows * cols,
                "cols": cols,
                "T": dtype,
                "inputs": "full/row/col/scalar",
                "fn": CHAIN,
            }
            tensors = [
                _random((rows, cols), dtype, generator),
                _random((cols,), dtype, generator),
                _random((rows, 1), dtype, generator),
                _random((1,), dtype, generator),
            ]
            inputs = {f"in{i}_{shape_index}": t for i, t in enumerate(tensors)}
            reference = chain_reference(*(t.double() for t in tensors))
        for name, tensor in inputs.items():
            buffers[name] = to_storage(tensor)
        options = pairwise(list(configs(family(family_name), key)))
        program = compile_variants(family_name, key, options, prefix=f"s{shape_index}_")
        sources.append(program.source)
        for config, (name, info) in zip(options, program.kernels.items(), strict=True):
            output = f"out_{name}"
            buffers[output] = poisoned(TensorSpec(output, (rows, cols), dtype))
            args = tuple(BufferArg(n) for n in inputs) + (BufferArg(output),)
            launches.append(Launch(name, (info.grid, 1, 1), (info.block, 1, 1), info.smem, args))
            expected[output] = reference
            chosen[output] = {"shape": (rows, cols), **config}
    header, *_ = sources[0].split("\n", 1)
    body = "\n".join(s.split("\n", 1)[1] for s in sources)
    return Case(header + "\n" + body, launches, buffers, expected, chosen, dtype)


def check(case: Case, buffers: dict[str, np.ndarray]) -> None:
    rtol, atol = TOLERANCE[case.dtype]
    failures = []
    for output, reference in case.expected.items():
        actual = from_storage(buffers[output], TORCH_DTYPES[case.dtype]).double()
        want = reference.to(TORCH_DTYPES[case.dtype]).double()
        close = torch.isclose(actual, want, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()):
            where = tuple(int(i) for i in torch.nonzero(~close)[0])
            failures.append(
                f"{case.configs[output]}: {int((~close).sum())} wrong, first at {list(where)}: "
                f"{float(actual[where])} vs {float(want[where])}"
            )
    assert not failures, "\n".join(failures[:10])


def run_case(case: Case, schedule: str) -> None:
    buffers = {n: a.copy() for n, a in case.buffers.items()}
    EmuDevice().run(case.source, case.launches, buffers, schedule=schedule, timeout=600)
    check(case, buffers)


@pytest.mark.parametrize("schedule", ["forward", "reverse"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_every_option_on_emu(dtype: str, schedule: str) -> None:
    run_case(softmax_case(dtype), schedule)


@pytest.mark.parametrize("schedule", ["forward", "shuffle:3"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_every_option_on_emu(dtype: str, schedule: str) -> None:
    run_case(elementwise_case(dtype), schedule)


def test_pairwise_covers_every_option() -> None:
    case = softmax_case("f32")
    seen = {(name, value) for config in case.configs.values() for name, value in config.items()}
    for fork in family("softmax").forks:
        for option in fork.options:
            assert (fork.name, option) in seen, f"softmax {fork.name}={option} never runs"


def test_a_wrong_kernel_is_caught() -> None:
    """The check is not vacuous: a softmax that forgets to normalise fails it."""
    case = softmax_case("f32")
    broken = Case(
        case.source.replace(" * v", " * 0.5f * v", 1),
        **{k: getattr(case, k) for k in ("launches", "buffers", "expected", "configs", "dtype")},
    )
    assert broken.source != case.source
    with pytest.raises(AssertionError):
        run_case(broken, "forward")


#: keys where every option of every fork is valid, for the NVRTC check
RICH_KEYS = {
    "softmax": {"rows": 4096, "cols": 4096},
    "elementwise": {"n": 1 << 20, "cols": 1024, "inputs": "full/row/col/scalar", "fn": CHAIN},
}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("family_name", ["softmax", "elementwise"])
def test_every_option_compiles_with_nvrtc_without_spills(family_name: str, arch: str) -> None:
    for dtype in DTYPES:
        key = {**RICH_KEYS[family_name], "T": dtype}
        options = pairwise(list(configs(family(family_name), key)))
        program = compile_variants(family_name, key, options)
        compiled = compile_cuda(program.source, arch)
        assert set(compiled.resources) == set(program.kernels)
        spilling = {k: r for k, r in compiled.resources.items() if r.spill_stores or r.spill_loads}
        assert not spilling, f"{family_name} {dtype} {arch} spills: {spilling}"


def test_storage_dtypes_match_numpy() -> None:
    assert {k: np.dtype(v).itemsize for k, v in NUMPY_STORAGE.items()} == {
        "f32": 4,
        "f16": 2,
        "bf16": 2,
    }
