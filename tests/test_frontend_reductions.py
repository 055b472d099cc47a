"""Reductions, scans, norms and products through the model frontend, on the emulator,
against torch eager. Each test compiles one module returning many results, so that a
compile (one g++ run) covers many cases; the kernel cache makes repeats free."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import _pytree

import emmy
from emmy.base.errors import EmmyError
from emmy.dialects import graph, kernel
from emmy.runtime.emu import EmuDevice

#: the dims of each case over a [3, 5, 7] input: one, several, negative with keepdim, all
DIMS = [
    {"dim": 1},
    {"dim": (0, 2)},
    {"dim": -1, "keepdim": True},
    {"dim": (-3, -2), "keepdim": True},
    {},
]
FLOAT_REDUCTIONS = {
    "sum": torch.sum,
    "mean": torch.mean,
    "amax": torch.amax,
    "amin": torch.amin,
    # logsumexp needs its dims: all of them, given
    "logsumexp": lambda x, **kw: torch.logsumexp(x, **({"dim": (0, 1, 2)} | kw)),
    "var": torch.var,
    "std": lambda x, **kw: torch.std(x, correction=0, **kw),
}
#: the reductions over one dim at most (prod, argmax, argmin, max and min with a dim)
ONE_DIM = [{"dim": 1}, {"dim": -1, "keepdim": True}, {}]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def fresh(tensor: torch.Tensor) -> torch.Tensor:
    """Another input of the same shape and dtype, so that nothing of the example is baked in."""
    if tensor.dtype == torch.bool:
        return torch.rand(tensor.shape) > 0.3
    if not tensor.dtype.is_floating_point:
        return torch.randint(-50, 50, tensor.shape, dtype=tensor.dtype)
    return torch.randn(tensor.shape).to(tensor.dtype)


def check(module: nn.Module, *inputs: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-4):
    """Compiles at `inputs`, runs on fresh ones and compares every result with eager: the
    dtype and shape exactly, the values within the tolerance (integers exactly)."""
    compiled = emmy.compile(module.eval(), *inputs, device=EmuDevice())
    inputs = [fresh(t) for t in inputs]
    with torch.no_grad():
        expected = _pytree.tree_leaves(module(*inputs))
    actual = _pytree.tree_leaves(compiled(*inputs))
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert got.dtype == want.dtype and got.shape == want.shape, (index, got, want)
        exact = not want.dtype.is_floating_point
        tolerance = {"atol": 0, "rtol": 0} if exact else {"atol": atol, "rtol": rtol}
        torch.testing.assert_close(got, want, **tolerance, msg=lambda m, i=index: f"{i}: {m}")
    return compiled


def families(compiled) -> set[str]:
    return {call.kernel.rsplit("_", 1)[0] for call in compiled.program.calls}


class FloatReductions(nn.Module):
    def forward(self, x):
        # x [3, 5, 7]
        results = [reduce(x, **dims) for reduce in FLOAT_REDUCTIONS.values() for dims in DIMS]
        results += [torch.prod(x, **dims) for dims in ONE_DIM]
        results += [op(x, **dims) for op in (torch.argmax, torch.argmin) for dims in ONE_DIM]
        results += [*torch.max(x, dim=1), *torch.min(x, dim=-1, keepdim=True)]
        results += [x.var(dim=1, unbiased=False), x.sum(dim=[])]
        results += [*torch.var_mean(x, dim=(0, 2)), *torch.std_mean(x, 1, correction=0)]
        results += [*torch.aminmax(x, dim=-1, keepdim=True)]
        return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float_reductions_over_any_dims_match_eager(dtype):
    x = torch.randn(3, 5, 7).to(dtype)
    # bf16: each result rounded once, after f32 accumulation (torch's CPU bf16 sums alike)
    tolerance = {} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}
    compiled = check(FloatReductions(), x, **tolerance)
    # leading and middle dims are read in place (reduce_cols), the last as rows
    assert families(compiled) >= {"reduce_rows", "reduce_cols", "arg_rows"}


class ChannelSums(nn.Module):
    def forward(self, x):
        # x [2, 3, 4]: a BatchNorm's per-channel sum and mean, over the batch and the pixels
        return x.sum((0, 2)), x.mean((0, 2), keepdim=True), x.amax(0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reductions_over_leading_dims_read_the_tensor_in_place(dtype):
    """f32 over dims before the last, one run or several (a sum of sums): reduce_cols and
    row reductions, no transposed copy; a 16-bit type's reduction over several runs moves
    them last instead (one rounding, as eager's)."""
    tolerance = {} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}
    compiled = check(ChannelSums(), torch.randn(2, 3, 4).to(dtype), **tolerance)
    if dtype == torch.float32:
        assert families(compiled) == {"reduce_cols", "reduce_rows"}
    else:
        assert "permute" in families(compiled)


class IntegerReductions(nn.Module):
    def forward(self, ids, small, mask):
        # ids i64 [4, 6, 5]; small i32 [3, 7]; mask bool [4, 6, 5]
        results = [op(ids, **dims) for op in (torch.sum, torch.amax, torch.amin) for dims in DIMS]
        results += [torch.prod(ids, **dims) for dims in ONE_DIM]
        results += [op(ids, **dims) for op in (torch.argmax, torch.argmin) for dims in ONE_DIM]
        results += [*torch.max(small, dim=0), *torch.min(ids, dim=-1, keepdim=True)]
        results += [small.sum(-1), small.amax(0), small.prod(), small.amin(dim=(0, 1))]
        results += [op(mask, **dims) for op in (torch.any, torch.all) for dims in DIMS]
        results += [mask.sum(-1), mask.sum(), mask.amax(1)]
        return results


def test_integer_and_boolean_reductions_are_exact():
    ids = torch.randint(-50, 50, (4, 6, 5))
    small = torch.randint(-50, 50, (3, 7), dtype=torch.int32)
    mask = torch.rand(4, 6, 5) > 0.3
    compiled = check(IntegerReductions(), ids, small, mask)
    # reductions over leading and middle dims read the integers in place: no copy
    assert families(compiled) == {"reduce_rows_int"}


class Scans(nn.Module):
    def forward(self, mask, small, x, flags):
        # mask i64 [2, 9] (0/1, an attention mask); small i32 [3, 4, 5]; x f32 [3, 4, 5]
        return (
            mask.long().cumsum(-1),
            mask.cumsum(0),
            small.cumsum(1),
            flags.cumsum(-1),
            x.cumsum(1),
            x.cumsum(-1),
            torch.cumsum(x, dim=0),
        )


def test_cumsum_over_any_dim_of_ints_bools_and_floats():
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[0, 6:] = 0
    small = torch.randint(-50, 50, (3, 4, 5), dtype=torch.int32)
    compiled = check(Scans(), mask, small, torch.randn(3, 4, 5), torch.rand(3, 8) > 0.5)
    assert families(compiled) == {"cumsum"}


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm([4, 5])
        self.rms = nn.RMSNorm([4, 5], eps=1e-6)
        self.bn = nn.BatchNorm2d(3)
        self.bn1 = nn.BatchNorm1d(3)
        with torch.no_grad():
            for param in (self.ln.weight, self.ln.bias, self.rms.weight):
                param.normal_()
            for bn in (self.bn, self.bn1):
                bn.running_mean.normal_()
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.normal_()
                bn.bias.normal_()

    def forward(self, x, y):
        # x [2, 3, 4, 5]; y [6, 3]
        return (
            self.ln(x),
            self.rms(x),
            F.layer_norm(x, [3, 4, 5]),
            self.bn(x),
            self.bn1(y),
            torch.log_softmax(x, dim=1),
            F.log_softmax(x, dim=-1),
        )


def test_norms_over_trailing_dims_batch_norm_and_log_softmax():
    compiled = check(Norms(), torch.randn(2, 3, 4, 5), torch.randn(6, 3))
    assert {"layer_norm", "rms_norm", "reduce_rows"} <= families(compiled)


class SoftmaxGradients(nn.Module):
    def forward(self, g, x):
        # g and x [2, 3, 4, 5]: the gradients of a softmax over dim 1 and of a log-softmax
        # over the last dim, as a backward graph holds them
        aten = torch.ops.aten
        return (
            aten._softmax_backward_data(g, torch.softmax(x, 1), 1, x.dtype),
            aten._log_softmax_backward_data(g, torch.log_softmax(x, -1), -1, x.dtype),
        )


def test_softmax_and_log_softmax_gradients_over_any_dim():
    compiled = check(SoftmaxGradients(), torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5))
    assert "softmax_backward" in families(compiled)


class Products(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(5, 6)

    def forward(self, x, v, m, b):
        # x [2, 3, 4, 5]; v [5]; m [5, 5]; b [3, 4, 5]
        return (
            x @ v,
            v @ m,
            v @ v,
            torch.dot(v, v),
            torch.mv(m, v),
            self.linear(v),
            F.linear(v, m),
            m[:4, :4] @ x,
            v @ b.transpose(1, 2),
            torch.addmm(m, m, m, beta=0.5, alpha=2.0),
            torch.addmm(m, m, m, beta=0.0),
            torch.addmv(v, m, v, beta=2.0, alpha=0.5),
            torch.baddbmm(b @ b.transpose(1, 2), b, b.transpose(1, 2), alpha=3.0, beta=0.25),
        )


def test_products_with_vectors_broadcast_batches_and_scales():
    inputs = (torch.randn(2, 3, 4, 5), torch.randn(5), torch.randn(5, 5), torch.randn(3, 4, 5))
    compiled = check(Products(), *inputs)
    assert "matmul" in families(compiled)


class AnyOfFloats(nn.Module):
    def forward(self, x):
        return x.any(-1)


class MeanOfInts(nn.Module):
    def forward(self, ids):
        return ids.mean(-1, dtype=torch.float32)


class SumToHalf(nn.Module):
    def forward(self, x):
        return x.sum(-1, dtype=torch.float16)


class BatchNormOfInputs(nn.Module):
    def forward(self, x, mean, var):
        return F.batch_norm(x, mean, var)


REFUSED = [
    pytest.param(AnyOfFloats(), (torch.randn(2, 3),), "compare it with 0", id="any-float"),
    pytest.param(MeanOfInts(), (torch.ones(2, 3, dtype=torch.int64),), "mean of", id="int-mean"),
    pytest.param(SumToHalf(), (torch.randn(2, 3),), "dtype conversion", id="sum-dtype"),
    pytest.param(
        BatchNormOfInputs(),
        (torch.randn(2, 3, 4), torch.randn(3), torch.rand(3)),
        "that are not weights",
        id="batch-norm-inputs",
    ),
]


@pytest.mark.parametrize(("module", "inputs", "words"), REFUSED)
def test_what_has_no_kernel_falls_back_with_its_reason(module, inputs, words):
    with pytest.raises(EmmyError) as error:
        emmy.compile(module, *inputs, device=EmuDevice(), fallback=False)
    message = str(error.value)
    assert words in message and "\n" not in message, message
    compiled = emmy.compile(module, *inputs, device=EmuDevice())
    torch.testing.assert_close(compiled(*inputs), module(*inputs))
    reasons = [entry["reason"] for entry in compiled.program.fallbacks.values()]
    assert any(words in reason for reason in reasons), reasons


def test_every_reduction_kind_has_its_table_entry() -> None:
    # a kind added to an enum without its row would fail only when first used
    assert set(graph.REDUCE_KINDS) == set(graph.Reduction)
    assert set(kernel.REDUCE_KINDS) == set(kernel.GroupReduction)
