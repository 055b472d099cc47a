"""The frontend on PyTorch's own OpInfo samples (torch's `op_db`), on the emulator, against
eager torch (tests/opinfo_sweep.py builds and runs the sweeps).

- The native sweep: every op of `NATIVE` in f32, in a 16-bit dtype and in an integer dtype
  where the op takes one; a fallback to torch counts as a failure.
- The fallback sweep: the ops emmy has no kernel for (`FALLBACK`) and the samples of native
  ops that it does not compile (`NOT_NATIVE`: not yet, or by design) must match eager
  through torch, and must have fallen back: an op that became native moves to `NATIVE`.
- Edge cases of their own: 0-dim, empty, non-contiguous and broadcast inputs, returned
  views.

Each (group, dtype) is one module, one export and one g++ call; a failing group is
compiled again in halves, so that its failure names the sample.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from opinfo_sweep import Kind, Sample, check, dtype_of, native_failures, samples_of
from torch import nn

F32, HALF, INT = Kind.F32, Kind.HALF, Kind.INT
FLOATS = (F32, HALF)
ALL = (F32, HALF, INT)


@dataclass(frozen=True)
class Group:
    """Ops swept together (one module per dtype), in the dtype kinds listed."""

    name: str
    ops: tuple[str, ...]
    kinds: tuple[Kind, ...] = ALL


#: the ops emmy compiles natively (OpInfo names), by group: the contract of the native sweep
NATIVE = (
    Group(
        "unary",
        (
            "exp",
            "tanh",
            "sigmoid",
            "neg",
            "nn.functional.silu",
            "nn.functional.relu",
            "nn.functional.gelu",
        ),
    ),
    Group("binary", ("add", "sub", "mul", "div.no_rounding_mode", "rsub")),
    Group("reductions", ("sum", "mean", "amax")),
    Group("softmax", ("softmax",), FLOATS),
    Group("norms", ("nn.functional.layer_norm", "nn.functional.rms_norm"), FLOATS),
    Group("products", ("matmul", "mm", "bmm", "addmm", "nn.functional.linear"), FLOATS),
)


def every(sample: Sample) -> bool:
    return True


def zero_dim(sample: Sample) -> bool:
    return sample.any_tensor(lambda t: t.dim() == 0)


@dataclass(frozen=True)
class NotNative:
    """Samples of a native op (those `when` picks) that emmy does not compile, and why:
    not yet (the part of issue 15 that will make them native), or by design."""

    op: str
    kinds: tuple[Kind, ...]
    reason: str
    when: Callable[[Sample], bool] = every

    def __contains__(self, sample: Sample) -> bool:
        return sample.op == self.op and self.when(sample)


#: the native ops' samples that fall back, with why: the fallback sweep tests them
NOT_NATIVE = (NotNative("exp", (INT,), "pending: integer inputs of float ops (pointwise table)"),)

#: ops emmy has no kernel for: they run through torch
FALLBACK = (
    Group("conv2d", ("nn.functional.conv2d",), FLOATS),
    Group("max_pool2d", ("nn.functional.max_pool2d",), FLOATS),
    Group("avg_pool2d", ("nn.functional.avg_pool2d",), FLOATS),
    Group("sort", ("sort",)),
    Group("topk", ("topk",)),
    Group("argsort", ("argsort",)),
    Group("interpolate", ("nn.functional.interpolate.nearest",), FLOATS),
    Group("cumprod", ("cumprod",)),
)


def _not_native(sample: Sample, kind: Kind) -> bool:
    return any(sample in entry and kind in entry.kinds for entry in NOT_NATIVE)


def _native_cases() -> list:
    return [
        pytest.param(group, kind, id=f"{group.name}-{kind.value}")
        for group in NATIVE
        for kind in group.kinds
    ]


@pytest.mark.parametrize(("group", "kind"), _native_cases())
def test_native_ops_match_eager_without_fallback(group: Group, kind: Kind):
    swept = [op for op in group.ops if dtype_of(op, kind) is not None]
    assert swept, f"no op of {group.name} takes a {kind.value} dtype: drop the kind"
    samples = [s for s in samples_of(swept, kind) if not _not_native(s, kind)]
    fail_on(check(samples, native=True))


def _fallback_cases() -> list:
    cases = [
        pytest.param(group.ops, kind, every, id=f"{group.name}-{kind.value}")
        for group in FALLBACK
        for kind in group.kinds
    ]
    cases += [
        pytest.param((entry.op,), kind, entry.when, id=f"not-native-{entry.op}-{kind.value}")
        for entry in NOT_NATIVE
        for kind in entry.kinds
    ]
    return cases


@pytest.mark.parametrize(("ops", "kind", "when"), _fallback_cases())
def test_ops_without_kernels_match_eager_through_torch(ops, kind, when):
    assert all(dtype_of(op, kind) for op in ops), f"{ops} take no {kind.value} dtype"
    samples = [s for s in samples_of(ops, kind) if when(s)]
    assert samples, f"no sample of {ops} in {kind.value} is picked: drop the entry"
    fail_on(check(samples, native=False))


def fail_on(failures: list[str]) -> None:
    if failures:
        pytest.fail(f"{len(failures)} failure(s):\n" + "\n".join(failures), pytrace=False)


# -- edge cases ---------------------------------------------------------------------------


class ZeroDim(nn.Module):
    """0-dim inputs (exp, silu and sigmoid of one once crashed the emulator)."""

    def forward(self, s, x):
        return torch.exp(s), nn.functional.silu(s), torch.sigmoid(s), s * x, x.sum() + s


def test_zero_dim_inputs():
    problems = native_failures(ZeroDim(), torch.tensor(0.5), torch.randn(3, 4))
    fail_on(problems)


class Empty(nn.Module):
    """Tensors with a dim of 0: empty results, and a sum over an empty dim (zeros)."""

    def forward(self, x, y):
        return torch.exp(x), x + y, x.sum(-1), torch.softmax(x, dim=0)


def test_empty_inputs():
    problems = native_failures(Empty(), torch.randn(3, 0), torch.randn(1, 0))
    fail_on(problems)


class NonContiguous(nn.Module):
    """Transposed, sliced and permuted views read by kernels."""

    def forward(self, x, y):
        t = x.transpose(0, 1)
        return torch.exp(t), t + y, x[:, ::2].sum(-1), torch.softmax(x.permute(1, 0), dim=-1)


def test_non_contiguous_inputs():
    problems = native_failures(NonContiguous(), torch.randn(4, 6), torch.randn(6, 4))
    fail_on(problems)


def test_non_contiguous_tensors_passed_in():
    x = torch.randn(6, 4).t()  # [4, 6], its elements in column order
    problems = native_failures(NonContiguous(), x, torch.randn(6, 4)[:, :].t().contiguous().t())
    fail_on(problems)


class Broadcasts(nn.Module):
    """Elementwise ops between inputs of different ranks."""

    def forward(self, a, b, c, s):
        return a + b, a * c, b - s, torch.div(c, a), (a + b) * s


def test_broadcast_inputs_of_different_ranks():
    inputs = torch.randn(3, 1, 5), torch.randn(4, 1), torch.randn(2, 3, 4, 5), torch.tensor(2.0)
    problems = native_failures(Broadcasts(), *inputs)
    fail_on(problems)


class ReturnedViews(nn.Module):
    """Outputs that are an input, or views of an input or of a computed value."""

    def forward(self, x):
        y = torch.exp(x)
        return x, x.t(), x[1], y, y.view(-1), y.transpose(0, 1)


def test_returned_views():
    problems = native_failures(ReturnedViews(), torch.randn(3, 4))
    fail_on(problems)
