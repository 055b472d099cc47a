"""Ops seen on real models that once ran through torch run as emmy's kernels: cat's
aliases and square, einsum as a batched matmul, repeat_interleave as a copy or a gather,
cumsum to another dtype, strided copies of more than 4 dims that do not merge (as two
copies), and as_strided as a view; through emmy.compile and torch.compile alike, on the
emulator, against eager, with no fallback."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import emmy
import emmy.api
from emmy.runtime.emu import EmuDevice

APIS = ["emmy", "torch.compile"]


def _run(api: str, model: nn.Module, *inputs: torch.Tensor) -> tuple[object, list]:
    """The model's output through `api` and the (target, reason) of each op that fell back."""
    if api == "emmy":
        compiled = emmy.compile(model, *inputs, device=EmuDevice(), db="none")
        fallbacks = compiled.program.fallbacks.values()
        return compiled(*inputs), [(e["target"], e["reason"]) for e in fallbacks]
    torch._dynamo.reset()
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs)
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    try:
        with torch.no_grad():
            out = compiled(*inputs)
    finally:
        torch._dynamo.reset()
    assert programs, "emmy compiled no graph (it ran eagerly)"
    return out, [(e["target"], e["reason"]) for p in programs for e in p.fallbacks.values()]


def _assert_native(api: str, model: nn.Module, *inputs: torch.Tensor) -> None:
    model = model.eval()
    out, fell_back = _run(api, model, *inputs)
    assert fell_back == []
    with torch.no_grad():
        torch.testing.assert_close(out, model(*inputs), atol=1e-4, rtol=1e-4)


class Aliases(nn.Module):
    def forward(self, a, b):
        return torch.concat([a, b], 1), torch.concatenate([a, b], -1), torch.square(a) + 1


class Einsums(nn.Module):
    """Two operands: batch, contracted and free labels, a label one operand sums alone,
    an ellipsis, an implicit output, an outer product, a state-space model's 5-dim scores;
    and one operand permuted."""

    def forward(self, a, b, c, d):
        return (
            torch.einsum("bij,bkj->bik", a, b),
            torch.einsum("bij,bkl->jk", a, b),
            torch.einsum("...ij,...kj->...ki", a, b),
            torch.einsum("bij,bkj", a, b),
            torch.einsum("i,j->ij", a[0, 0], b[1, 1]),
            torch.einsum("bclhn,bcshn->bhcls", c, d),
            torch.einsum("abc->cab", a) * 2,
        )


class RepeatInterleave(nn.Module):
    """By one count along a dim (negative, of a transposed input), flattened, and by
    constant counts per element (`output_size` given: else the shape depends on them)."""

    def forward(self, x):
        return (
            x.repeat_interleave(2, dim=1),
            x.transpose(0, 2).repeat_interleave(3, dim=-2),
            x.transpose(0, 2).repeat_interleave(2),
            x.repeat_interleave(torch.tensor([1, 0, 2]), dim=1, output_size=3),
            x.repeat_interleave(torch.tensor(2), dim=2, output_size=8),
        )


class CumsumTo(nn.Module):
    def forward(self, x):
        return (x > 0).cumsum(-1, dtype=torch.int32), x.half().cumsum(1, dtype=torch.float32)


class StridedCopies(nn.Module):
    """Copies of 5, 6 and 7 dims that do not merge: permutes (through another order of
    their dims), permutes of slices (through runs of storage; the last's second copy, of
    5 dims, split again)."""

    def forward(self, x, y, z, w):
        return (
            x.permute(4, 2, 0, 3, 1) * 1,
            x[:, ::2, :, ::2].permute(3, 1, 4, 0, 2) * 1,
            y.permute(5, 2, 0, 4, 3, 1) * 1,
            z.permute(5, 2, 0, 4, 6, 3, 1) * 1,
            w[::2, :, ::2, :, ::2, :].permute(1, 3, 5, 0, 2, 4) * 1,
        )


class AsStrided(nn.Module):
    """Of an input, of a view of one (its storage is the input's), of a computed tensor."""

    def forward(self, x):
        return (
            x.as_strided((3, 4), (1, 3), 2) * 2,
            x[1].as_strided((2, 3), (3, 1), 1) * 2,
            (x + 1).as_strided((4, 2), (2, 5)) * 2,
        )


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape)))


CASES = {
    "aliases": (Aliases, lambda: (_randn(2, 3, 4), _randn(2, 3, 4) + 1)),
    "einsum": (
        Einsums,
        lambda: (
            _randn(2, 3, 4),
            _randn(2, 3, 4) - 1,
            _randn(2, 2, 3, 2, 4),
            _randn(2, 2, 3, 2, 4),
        ),
    ),
    "repeat_interleave": (RepeatInterleave, lambda: (_randn(2, 3, 4),)),
    "cumsum_dtype": (CumsumTo, lambda: (_randn(2, 3, 5),)),
    "strided_copy": (
        StridedCopies,
        lambda: (
            _randn(2, 3, 4, 5, 6),
            _randn(2, 3, 2, 3, 2, 3),
            _randn(2, 3, 2, 3, 2, 3, 2),
            _randn(3, 4, 3, 4, 3, 4) + 1,
        ),
    ),
    "as_strided": (AsStrided, lambda: (_randn(2, 3, 4),)),
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("name", list(CASES))
def test_the_op_runs_natively_and_matches_eager(name: str, api: str) -> None:
    cls, inputs = CASES[name]
    _assert_native(api, cls(), *inputs())


class Diagonal(nn.Module):
    def forward(self, x):
        return torch.einsum("ii->i", x) + 1


def test_an_einsum_it_does_not_lower_falls_back_saying_why() -> None:
    x = _randn(3, 3)
    out, fell_back = _run("emmy", Diagonal().eval(), x)
    assert fell_back == [
        (
            "aten.einsum.default",
            "einsum 'ii->i' of one operand (a sum or a diagonal) is not supported",
        )
    ]
    torch.testing.assert_close(out, torch.einsum("ii->i", x) + 1)
