"""The frontend on PyTorch's own OpInfo samples (torch's `op_db`), on the emulator, against
eager torch (tests/opinfo_sweep.py builds and runs the sweeps).

- The native sweep: every op of `NATIVE` in f32, in a 16-bit dtype and in an integer dtype
  where the op takes one; a fallback to torch counts as a failure.
- The fallback sweep: the ops emmy has no kernel for (`FALLBACK`), and the samples of
  native ops that emmy refuses with a reason (`PENDING`), must match eager through torch
  and must have fallen back: an entry that no longer falls back moves out.
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
            "abs",
            "sqrt",
            "rsqrt",
            "log",
            "log1p",
            "expm1",
            "sin",
            "cos",
            "erf",
            "reciprocal",
            "sign",
            "floor",
            "ceil",
            "round",
            "trunc",
            "isnan",
            "logical_not",
            "bitwise_not",
        ),
    ),
    Group(
        "activations",
        (
            "nn.functional.silu",
            "nn.functional.relu",
            "nn.functional.gelu",
            "nn.functional.softplus",
            "nn.functional.hardswish",
            "nn.functional.hardsigmoid",
            "nn.functional.elu",
            "nn.functional.leaky_relu",
            "nn.functional.mish",
            "nn.functional.glu",
        ),
    ),
    Group(
        "binary",
        (
            "add",
            "sub",
            "mul",
            "div.no_rounding_mode",
            "rsub",
            "pow",
            "maximum",
            "minimum",
            "clamp",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logical_and",
            "logical_or",
            "bitwise_and",
            "where",
            "masked_fill",
            "lerp",
            "addcmul",
        ),
    ),
    Group(
        "reductions",
        (
            "sum",
            "mean",
            "amax",
            "amin",
            "prod",
            "argmax",
            "argmin",
            "any",
            "all",
            "var",
            "std",
            "logsumexp",
            "max.reduction_with_dim",
            "cumsum",
        ),
    ),
    Group(
        "rows",
        ("softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.rms_norm"),
        FLOATS,
    ),
    Group(
        "products",
        ("matmul", "mm", "bmm", "addmm", "nn.functional.linear", "mv", "dot", "baddbmm"),
        FLOATS,
    ),
    Group(
        "movement",
        (
            "cat",
            "stack",
            "index_select",
            "gather",
            "nn.functional.embedding",
            "repeat",
            "flip",
            "roll",
            "triu",
            "tril",
        ),
    ),
    Group(
        "vision",
        ("nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d"),
        FLOATS,
    ),
)


def every(sample: Sample) -> bool:
    return True


def zero_dim(sample: Sample) -> bool:
    return sample.any_tensor(lambda t: t.dim() == 0)


def empty(sample: Sample) -> bool:
    return sample.any_tensor(lambda t: t.numel() == 0)


def renormalised(sample: Sample) -> bool:
    return sample.arguments()[2].get("max_norm") is not None


@dataclass(frozen=True)
class Refused:
    """Samples emmy does not compile natively (those of `ops` that `when` picks), and why."""

    name: str
    ops: tuple[str, ...]
    kinds: tuple[Kind, ...]
    reason: str
    when: Callable[[Sample], bool] = every

    def picks(self, sample: Sample, kind: Kind) -> bool:
        return kind in self.kinds and sample.op in self.ops and self.when(sample)


#: samples of native ops that emmy does not compile natively, with why (each as the
#: refusal that sends it to torch says): the fallback sweep tests them; an entry whose
#: samples no longer fall back fails there, and moves out
PENDING = (
    Refused("float-any-all", ("any", "all"), FLOATS, "no kernel: compare floats with 0 first"),
    Refused("empty-var-std", ("var", "std"), FLOATS, "no kernel: a reduction of nothing", empty),
    Refused("integer-logsumexp", ("logsumexp",), (INT,), "no kernel: logsumexp of integers"),
    Refused("0-dim-softmax", ("softmax", "log_softmax"), FLOATS, "no kernel: 0-dim rows", zero_dim),
    Refused(
        "empty-products",
        ("matmul", "mm", "addmm"),
        FLOATS,
        "no kernel: a product over an empty dim (zeros)",
        empty,
    ),
    Refused("0-dim-bias", ("baddbmm",), FLOATS, "no kernel: a product's 0-dim addend", zero_dim),
    Refused("0-dim-gathers", ("index_select", "gather"), ALL, "no kernel: 0-dim sources", zero_dim),
    Refused(
        "max-norm-embedding",
        ("nn.functional.embedding",),
        FLOATS,
        "no kernel: max_norm renormalises the table in place (aten.embedding_renorm_)",
        renormalised,
    ),
    Refused("integer-triangles", ("triu", "tril"), (INT,), "no kernel: triu/tril of integers"),
)

#: ops emmy has no kernel for: they run through torch (one op an entry, so that an op that
#: becomes native is named)
FALLBACK = (
    Refused("sort", ("sort",), ALL, "no kernel"),
    Refused("argsort", ("argsort",), ALL, "no kernel"),
    Refused("topk", ("topk",), ALL, "no kernel"),
    Refused("interpolate", ("nn.functional.interpolate.nearest",), FLOATS, "no kernel"),
    Refused("cumprod", ("cumprod",), ALL, "no kernel"),
    Refused("integer-products", NATIVE[5].ops, (INT,), "no kernel: products of integers"),
)


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
    samples = [s for s in samples_of(swept, kind) if not any(e.picks(s, kind) for e in PENDING)]
    fail_on(check(samples, native=True))


def _fallback_cases() -> list:
    return [
        pytest.param(entry, kind, id=f"{entry.name}-{kind.value}")
        for entry in (*FALLBACK, *PENDING)
        for kind in entry.kinds
    ]


@pytest.mark.parametrize(("entry", "kind"), _fallback_cases())
def test_ops_without_kernels_match_eager_through_torch(entry: Refused, kind: Kind):
    swept = [op for op in entry.ops if dtype_of(op, kind) is not None]
    assert swept, f"no op of {entry.name} takes a {kind.value} dtype: drop the kind"
    samples = [s for s in samples_of(swept, kind) if entry.picks(s, kind)]
    assert samples, f"{entry.name} picks no {kind.value} sample: drop it"
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
    """Tensors with a dim of 0: empty results launch nothing."""

    def forward(self, x, y):
        return torch.exp(x), x + y, torch.softmax(x, dim=0), x.sum(0)


class OverEmpty(nn.Module):
    """Reductions over a dim of 0: the sum's zeros, the mean's NaN."""

    def forward(self, x):
        return x.sum(-1), x.mean(-1)


def test_empty_inputs():
    problems = native_failures(Empty(), torch.randn(3, 0), torch.randn(1, 0))
    fail_on(problems)


def test_reductions_over_an_empty_dim_match_eager():
    # zeros (a sum) and NaN (a mean): emmy may run them through torch, but must match
    problems = native_failures(OverEmpty(), torch.randn(3, 0), native=False)
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
    y = torch.randn(12, 4)[::2]  # [6, 4], every other row
    problems = native_failures(NonContiguous(), x, y)
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
        return x, x.t(), x[1], y, y.flatten(), y.transpose(0, 1)


def test_returned_views():
    problems = native_failures(ReturnedViews(), torch.randn(3, 4))
    fail_on(problems)


def test_returned_views_of_a_non_contiguous_input():
    problems = native_failures(ReturnedViews(), torch.randn(4, 3).t())
    fail_on(problems)
