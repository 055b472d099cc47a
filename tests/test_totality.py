"""Whatever eager runs, emmy runs: tensors a model builds in its forward (get_attr
constants under torch.compile) are constants of the program, and complex tensors have a
storage type (torch computes them between emmy's kernels) while a rotary embedding's
complex arithmetic runs natively as real arithmetic on pairs (emmy.frontend.complex);
through emmy.compile and torch.compile alike, on the emulator, against eager."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import emmy
import emmy.api
from emmy.runtime.emu import EmuDevice

F32 = {"atol": 1e-4, "rtol": 1e-4}


def _run(api: str, model: nn.Module, *inputs: torch.Tensor, **options) -> tuple[object, list]:
    """The model's output through `api` and the targets of the ops that fell back."""
    if api == "emmy":
        compiled = emmy.compile(model, *inputs, device=EmuDevice())
        return compiled(*inputs), [e["target"] for e in compiled.program.fallbacks.values()]
    torch._dynamo.reset()
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs)
    compiled = torch.compile(model, backend=backend, fullgraph=True, **options)
    try:
        with torch.no_grad():
            out = compiled(*inputs)
    finally:
        torch._dynamo.reset()
    assert programs, "emmy compiled no graph (it ran eagerly)"
    return out, [e["target"] for p in programs for e in p.fallbacks.values()]


# -- tensor constants built in forward ---------------------------------------------------
class Literal(nn.Module):
    """A `torch.tensor([...])` literal: a get_attr constant under torch.compile."""

    def forward(self, x):
        return x * 2 + torch.tensor([1.0, 2.0, 3.0])


class CausalMask(nn.Module):
    def forward(self, x):
        mask = torch.ones(x.shape[-1], x.shape[-1]).tril()
        return x.masked_fill(mask == 0, -1e4).softmax(-1)


class RelativeBuckets(nn.Module):
    """T5-style relative-position buckets from an arange, read by an embedding."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Embedding(8, 4)

    def forward(self, x):
        position = torch.arange(x.shape[-1])
        relative = position[None, :] - position[:, None]
        buckets = relative.abs().clamp(max=7)
        return x + self.bias(buckets).sum(-1)


BUILT = {
    "literal": (Literal, (2, 3)),
    "causal_mask": (CausalMask, (2, 4, 4)),
    "relative_buckets": (RelativeBuckets, (8, 8)),
}


@pytest.mark.parametrize("api", ["emmy", "torch.compile"])
@pytest.mark.parametrize("name", list(BUILT))
def test_tensors_built_in_forward_are_constants_of_the_program(name, api):
    torch.manual_seed(0)
    cls, shape = BUILT[name]
    model = cls().eval()
    x = torch.randn(*shape)
    out, fell_back = _run(api, model, x)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), **F32)
    assert fell_back == []


def test_a_tensor_literal_under_dynamic_shapes():
    model = Literal()
    torch._dynamo.reset()
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs)
    compiled = torch.compile(model, backend=backend, dynamic=True, fullgraph=True)
    try:
        for rows in (2, 5):
            x = torch.randn(rows, 3)
            with torch.no_grad():
                torch.testing.assert_close(compiled(x), model(x), **F32)
    finally:
        torch._dynamo.reset()
    assert len(programs) == 2 and not any(p.fallbacks for p in programs)


# -- complex tensors --------------------------------------------------------------------
def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    """Meta's llama reference code."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    shape = [d if i == 1 or i == x.ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Rotary(nn.Module):
    """Llama's attention projections and rotary embedding, its complex frequencies a
    buffer (`buffer`) or computed in forward."""

    def __init__(self, buffer: bool):
        super().__init__()
        self.buffer = buffer
        if buffer:
            self.register_buffer("freqs_cis", precompute_freqs_cis(16, 32), persistent=False)
        self.wq = nn.Linear(64, 64, bias=False)
        self.wk = nn.Linear(64, 64, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, 4, 16)
        k = self.wk(x).view(b, s, 4, 16)
        freqs = self.freqs_cis if self.buffer else precompute_freqs_cis(16, 32)
        q, k = apply_rotary_emb(q, k, freqs[:s])
        return q + k


@pytest.mark.parametrize("api", ["emmy", "torch.compile"])
@pytest.mark.parametrize("buffer", [True, False], ids=["buffer", "in_forward"])
def test_llama_rotary_runs_as_real_arithmetic_on_pairs(buffer, api):
    torch.manual_seed(0)
    model = Rotary(buffer).eval()
    x = torch.randn(2, 8, 64)
    out, fell_back = _run(api, model, x)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), **F32)
    # under torch.compile the complex buffer is a frozen constant, its pairs read in place
    assert fell_back == []


class ComplexAbs(nn.Module):
    def forward(self, x):
        return torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2)).abs() + 1


class ReturnsComplex(nn.Module):
    def forward(self, x):
        return torch.polar(x.abs(), x) * 2


class PairArithmetic(nn.Module):
    def forward(self, x):
        z = torch.view_as_complex(x.reshape(4, 2))
        w = z * z + z - z * 0.5
        return torch.view_as_real(w.unsqueeze(0).transpose(0, 1)).flatten()


@pytest.mark.parametrize("api", ["emmy", "torch.compile"])
@pytest.mark.parametrize(
    ("cls", "shape", "native"),
    [(ComplexAbs, (3, 8), False), (ReturnsComplex, (5,), False), (PairArithmetic, (8,), True)],
    ids=["abs_falls_back", "complex_output_falls_back", "pairs"],
)
def test_complex_tensors_run_natively_or_through_torch(cls, shape, native, api):
    torch.manual_seed(0)
    model = cls()
    x = torch.randn(*shape)
    out, fell_back = _run(api, model, x)
    expected = model(x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, **F32)
    assert (fell_back == []) == native, fell_back
