"""The pointwise table (emmy/base/pointwise_ops.py) end to end: every op against torch
eager on the emulator, in f32, in bf16 and on integers and bools, each converted natively
(its graph op is in the converted graph), with torch's type promotion; 0-d tensors,
broadcasts of rank 4 against ranks 0 to 3, non-contiguous and empty inputs, and chains of
the table's ops as one kernel. Each program computes many ops (one g++ run each)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy
from emmy.base.compile_options import CompileOptions
from emmy.base.pointwise_ops import DEVICE_FUNCTIONS, TABLE
from emmy.compiler import compile_graph
from emmy.frontend.cache import parse_graph
from emmy.frontend.export import export
from emmy.runtime.emu import EmuDevice

#: each op of the table on floats: x [2, 3, 4, 8], row [8], col [4, 1], s 0-d
FLOAT_SAMPLES = {
    "add": lambda x, row, col, s: x + row,
    "sub": lambda x, row, col, s: torch.sub(x, col, alpha=2),
    "mul": lambda x, row, col, s: x * s,
    "div": lambda x, row, col, s: x / (col.abs() + 1),
    "exp": lambda x, row, col, s: torch.exp(x),
    "tanh": lambda x, row, col, s: torch.tanh(x),
    "sigmoid": lambda x, row, col, s: torch.sigmoid(x),
    "silu": lambda x, row, col, s: F.silu(x),
    "relu": lambda x, row, col, s: torch.relu(x),
    "neg": lambda x, row, col, s: -x,
    "gelu": lambda x, row, col, s: F.gelu(x, approximate="tanh"),
    "abs": lambda x, row, col, s: x.abs(),
    "sqrt": lambda x, row, col, s: x.abs().sqrt(),
    "rsqrt": lambda x, row, col, s: torch.rsqrt(x.abs() + 0.5),
    "log": lambda x, row, col, s: torch.log(x.abs() + 0.5),
    "log1p": lambda x, row, col, s: torch.log1p(x.abs()),
    "expm1": lambda x, row, col, s: torch.expm1(x),
    "sin": lambda x, row, col, s: torch.sin(x),
    "cos": lambda x, row, col, s: torch.cos(x),
    "erf": lambda x, row, col, s: torch.erf(x),
    "reciprocal": lambda x, row, col, s: torch.reciprocal(x.abs() + 1),
    "sign": lambda x, row, col, s: torch.sign(x),
    "floor": lambda x, row, col, s: torch.floor(x),
    "ceil": lambda x, row, col, s: torch.ceil(x),
    "round": lambda x, row, col, s: torch.round(x),
    "trunc": lambda x, row, col, s: torch.trunc(x),
    "pow": lambda x, row, col, s: torch.pow(x, 2) + x.abs() ** row,
    "clamp": lambda x, row, col, s: torch.clamp(x, -0.5, 0.5) + torch.clamp(x, col - 1, col + 1),
    "clamp_min": lambda x, row, col, s: torch.clamp(x, min=0.1) + torch.clamp_min(x, row),
    "clamp_max": lambda x, row, col, s: torch.clamp(x, max=0.1),
    # divisors of powers of two: a bf16 quotient rounded near a whole number floors apart
    "floor_divide": lambda x, row, col, s: torch.floor_divide(x, 0.25) + x // -0.5,
    "maximum": lambda x, row, col, s: torch.maximum(x, row),
    "minimum": lambda x, row, col, s: torch.minimum(x, col),
    "softplus": lambda x, row, col, s: F.softplus(x, beta=2.0, threshold=1.0),
    "hardswish": lambda x, row, col, s: F.hardswish(x * 3),
    "hardsigmoid": lambda x, row, col, s: F.hardsigmoid(x * 3),
    "elu": lambda x, row, col, s: F.elu(x, alpha=0.5) + F.hardtanh(x, -0.5, 0.25),
    "leaky_relu": lambda x, row, col, s: F.leaky_relu(x, 0.2),
    "mish": lambda x, row, col, s: F.mish(x),
    "eq": lambda x, row, col, s: x == row,
    "ne": lambda x, row, col, s: x != s,
    "lt": lambda x, row, col, s: x < col,
    "le": lambda x, row, col, s: x <= 0.25,
    "gt": lambda x, row, col, s: x > row,
    "ge": lambda x, row, col, s: x >= s,
    "isnan": lambda x, row, col, s: torch.isnan(torch.log(x)),
    "isinf": lambda x, row, col, s: torch.isinf(torch.log(torch.relu(x))),
    "logical_and": lambda x, row, col, s: torch.logical_and(x > 0, col),
    "logical_or": lambda x, row, col, s: torch.logical_or(x > 0, row > 0),
    "logical_xor": lambda x, row, col, s: torch.logical_xor(x > 0, col > 0),
    "logical_not": lambda x, row, col, s: torch.logical_not(x > 0),
    "where": lambda x, row, col, s: torch.where(x > 0, x, row) + x.masked_fill(col > 0, -1e4),
    "lerp": lambda x, row, col, s: torch.lerp(x, row, 0.3) + torch.lerp(x, col, torch.sigmoid(x)),
    "addcmul": lambda x, row, col, s: torch.addcmul(x, row, col, value=0.5),
    "addcdiv": lambda x, row, col, s: torch.addcdiv(x, row, col.abs() + 1, value=2),
    "convert": lambda x, row, col, s: (x.to(torch.float16), x.to(torch.int32), x.to(torch.bool)),
}
#: each op of the table that takes integers or bools: i [4, 8] i64, j [8] i32, k 0-d i64,
#: m [4, 8] bool
INTEGER_SAMPLES = {
    "add": lambda i, j, k, m: i + j,
    "sub": lambda i, j, k, m: torch.sub(i, j, alpha=3),
    "mul": lambda i, j, k, m: i * k * 3,
    "div": lambda i, j, k, m: i / (j.abs() + 1),
    "exp": lambda i, j, k, m: torch.exp(i * 0.25),
    "sqrt": lambda i, j, k, m: torch.sqrt(i.abs()),
    "neg": lambda i, j, k, m: -j,
    "relu": lambda i, j, k, m: torch.relu(i),
    "abs": lambda i, j, k, m: torch.abs(j),
    "sign": lambda i, j, k, m: torch.sign(i),
    "floor": lambda i, j, k, m: torch.floor(i) + torch.ceil(j) + torch.round(i) + torch.trunc(j),
    "pow": lambda i, j, k, m: i**2 + torch.pow(j, j.abs().clamp(max=3)),
    "clamp": lambda i, j, k, m: torch.clamp(i, -2, 3) + torch.clamp(i, min=0) + i.clamp(max=j),
    "floor_divide": lambda i, j, k, m: i // 2 + torch.floor_divide(i * 5, j.abs() + 1) + i // -3,
    "maximum": lambda i, j, k, m: torch.maximum(i, j) + torch.minimum(i, k),
    "eq": lambda i, j, k, m: (i == j, i != 3, i < k, i <= j, i > 2, i >= j, m == (i > 0)),
    "isnan": lambda i, j, k, m: torch.isnan(i) | torch.isinf(j),
    "logical_and": lambda i, j, k, m: torch.logical_and(i, j) ^ torch.logical_or(m, i),
    "logical_not": lambda i, j, k, m: torch.logical_not(j) & torch.logical_xor(i, m),
    "bitwise_and": lambda i, j, k, m: (i & j) + (i | 6) + (j ^ 5) + (~i),
    "bitwise_or": lambda i, j, k, m: m | (i > 0),
    "bitwise_not": lambda i, j, k, m: ~m,
    "where": lambda i, j, k, m: torch.where(m, i, j) + i.masked_fill(m, -7),
    "addcmul": lambda i, j, k, m: torch.addcmul(i, j, i, value=2),
    "convert": lambda i, j, k, m: (
        i.to(torch.float32),
        j.to(torch.int64) * 2**40,
        i.to(torch.bool),
    ),
}


class Samples(nn.Module):
    """Every sample of `samples` on the same inputs: one program, many outputs."""

    def __init__(self, samples: dict):
        super().__init__()
        self.samples = list(samples.values())

    def forward(self, *inputs):
        outputs = []
        for sample in self.samples:
            result = sample(*inputs)
            outputs.extend(result if isinstance(result, tuple) else [result])
        return tuple(outputs)


def _check(module: nn.Module, inputs: tuple, rtol: float, atol: float):
    compiled = emmy.compile(module, *inputs, device=EmuDevice())
    with torch.no_grad():
        expected = module(*inputs)
    actual = compiled(*inputs)
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got.dtype == want.dtype and got.shape == want.shape, f"output {index}"
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    return compiled


def _graph_ops(module: nn.Module, inputs: tuple) -> str:
    return str(export(module, inputs).module)


def test_every_device_function_is_in_the_header() -> None:
    """One header for the GPU and the emulator: each table op's function is in its shared part."""
    header = (Path(emmy.__file__).parent / "runtime/include/emmy_device.cuh").read_text()
    shared = header.split("shared by GPU and emulator", 1)[1]
    assert sorted(f for f in DEVICE_FUNCTIONS if f" {f}(" not in shared) == []


def test_every_table_op_has_a_sample() -> None:
    names = {entry.name for entry in TABLE}
    sampled = set(FLOAT_SAMPLES) | set(INTEGER_SAMPLES)
    related = {"clamp_min", "clamp_max", "ne", "lt", "le", "gt", "ge"}  # in one sample
    related |= {"isinf", "logical_or", "logical_xor", "bitwise_xor", "minimum"}
    related |= {"ceil", "round", "trunc"}
    assert names - sampled - related == set()


@pytest.mark.parametrize(
    ("dtype", "rtol", "atol"), [(torch.float32, 1e-5, 1e-5), (torch.bfloat16, 2e-2, 2e-2)]
)
def test_float_ops_match_eager(dtype: torch.dtype, rtol: float, atol: float) -> None:
    torch.manual_seed(0)
    inputs = tuple(torch.randn(shape).to(dtype) for shape in [(2, 3, 4, 8), (8,), (4, 1), ()])
    module = Samples(FLOAT_SAMPLES)
    text = _graph_ops(module, inputs)
    missing = [n for n in FLOAT_SAMPLES if f"graph.{n} " not in text]
    assert not missing, f"not converted natively: {missing}"
    _check(module, inputs, rtol, atol)


def test_integer_and_bool_ops_are_exact() -> None:
    torch.manual_seed(0)
    inputs = (
        torch.randint(-9, 10, (4, 8)),
        torch.randint(-9, 10, (8,), dtype=torch.int32),
        torch.tensor(3),
        torch.rand(4, 8) > 0.5,
    )
    module = Samples(INTEGER_SAMPLES)
    text = _graph_ops(module, inputs)
    missing = [n for n in INTEGER_SAMPLES if f"graph.{n} " not in text]
    assert not missing, f"not converted natively: {missing}"
    # i64 arithmetic is 64-bit: 2**40 times an int32 does not wrap
    assert "i64" in text
    _check(module, inputs, 0.0, 0.0)


class Shapes(nn.Module):
    def forward(self, x, s, mid, col, t, i, imid):
        # x [2, 3, 4, 8]; s 0-d; mid [3, 1, 1] and col [4, 1] broadcast against rank 4;
        # t [2, 8, 4, 3] read transposed; i [2, 3, 4, 8] i64, imid [3, 1, 8] i32
        return (
            torch.exp(s),
            F.silu(s),
            torch.sigmoid(s) + 1,
            s > 0,
            x + s,
            x * mid + col,
            torch.where(x > mid, col, s),
            torch.exp(t.transpose(1, 3)) + x,
            t.transpose(1, 3) > x,
            i + imid,
            i.transpose(0, 2) * 2,
        )


def test_zero_dim_broadcast_and_non_contiguous_inputs() -> None:
    torch.manual_seed(0)
    inputs = (
        torch.randn(2, 3, 4, 8),
        torch.randn(()),
        torch.randn(3, 1, 1),
        torch.randn(4, 1),
        torch.randn(2, 8, 4, 3),
        torch.randint(-9, 10, (2, 3, 4, 8)),
        torch.randint(-9, 10, (3, 1, 8), dtype=torch.int32),
    )
    compiled = _check(Shapes(), inputs, 1e-5, 1e-6)
    assert compiled(*inputs)[0].shape == ()


EMPTY = """
func.func @main(%x : tensor<0x4xf32>, %row : tensor<4xf32>) -> (tensor<0x4xf32>, tensor<0x4xi8>) {
  %e = graph.exp %x : tensor<0x4xf32> -> tensor<0x4xf32>
  %y = graph.add %e, %row : tensor<0x4xf32>, tensor<4xf32> -> tensor<0x4xf32>
  %z = graph.constant 0.000000e+00 : f32 -> tensor<f32>
  %p = graph.gt %x, %z : tensor<0x4xf32>, tensor<f32> -> tensor<0x4xi8>
  func.return %y, %p : tensor<0x4xf32>, tensor<0x4xi8>
}
"""


def test_empty_results_launch_nothing() -> None:
    """A site whose results have no element is compiled but never launched (the frontend
    folds an empty result into a constant before it gets here; a graph may still hold one)."""
    program = compile_graph(parse_graph(EMPTY, "<empty>"), CompileOptions(db=None))
    assert program.kernels and not program.calls
    x, row = np.zeros((0, 4), np.float32), np.ones(4, np.float32)
    y, p = program.run(EmuDevice(), [x, row])
    assert y.shape == (0, 4) and p.shape == (0, 4)


class MixedChain(nn.Module):
    def forward(self, x, ids, mask):
        gate = torch.where(ids > 2, F.softplus(x), torch.clamp(x, 0.0, 1.0))
        return (gate.masked_fill(mask, 0.0) * ids).to(torch.bfloat16)


def test_a_chain_of_table_ops_and_dtypes_is_one_kernel() -> None:
    torch.manual_seed(0)
    inputs = (torch.randn(4, 16), torch.randint(0, 5, (16,)), torch.rand(4, 16) > 0.5)
    compiled = _check(MixedChain(), inputs, 1e-2, 1e-2)
    (kernel,) = compiled.program.kernels.values()
    assert kernel.site.family == "elementwise"
    assert "T=bf16" in str(kernel.site.key) and "dtypes=i8/i64/f32" in str(kernel.site.key)


class SizeArithmetic(nn.Module):
    def forward(self, x):
        return x * x.shape[1] + (x > x.size(0))


def test_a_size_of_a_dynamic_dim_is_a_number_of_the_chain() -> None:
    x = torch.randn(4, 6)
    seq = torch.export.Dim("seq", max=64)
    compiled = emmy.compile(SizeArithmetic(), x, device=EmuDevice(), dynamic_shapes=({1: seq},))
    torch.testing.assert_close(compiled(x), SizeArithmetic()(x))
    assert not compiled.program.fallbacks
