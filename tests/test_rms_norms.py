"""RMSNorms found in dynamo's graphs (emmy.frontend.rms_norms) and `emmy::rms_norm`'s
gradients: the forms models write, the forms that are not an RMSNorm, and training and
inference under torch.compile(backend="emmy"), strict, against eager."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import emmy.api
from emmy.frontend import ops
from emmy.frontend.rms_norms import recognise_rms_norms, with_rms_norms
from emmy.runtime.emu import EmuDevice


class WrittenOut(nn.Module):
    """transformers' LlamaRMSNorm, as its models write it; `square` spells x² otherwise."""

    def __init__(self, width: int, square: str = "pow", offset: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width) * 0.1 + 1.0)
        self.square, self.offset = square, offset

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        squares = {"pow": lambda: h.pow(2), "mul": lambda: h * h, "square": h.square}
        variance = squares[self.square]().mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + 1e-6)
        return (self.weight + self.offset) * h.to(dtype)


class ReturnsRstd(WrittenOut):
    """The rstd is read again: the pattern's pieces are not its own, so it is no norm."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * (x * rstd), rstd


class OverTheFirstDim(WrittenOut):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6) * self.weight[0]


def _found(module: nn.Module, x: torch.Tensor) -> int:
    """How many RMSNorms are found in dynamo's graph of `module` on x; the rewritten graph
    gives eager's result."""
    counts: list[int] = []

    def backend(graph_module: torch.fx.GraphModule, example_inputs: list) -> object:
        counts.append(recognise_rms_norms(graph_module))
        return graph_module.forward

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(module, backend=backend)(x)
        want = module(x)
    torch._dynamo.reset()
    torch.testing.assert_close(
        got, want, rtol=2e-2 if x.dtype == torch.bfloat16 else 1e-5, atol=1e-5
    )
    return sum(counts)


@pytest.mark.parametrize(
    ("module", "dtype"),
    [
        (WrittenOut(16), torch.float32),
        (WrittenOut(16), torch.bfloat16),  # x widened to f32, read as bf16 by the op
        (WrittenOut(16, square="mul"), torch.float32),
        (WrittenOut(16, square="square"), torch.float32),
        (WrittenOut(16, offset=1.0), torch.float32),  # Gemma's (1 + w)
        (nn.RMSNorm(16), torch.float32),
        (nn.RMSNorm(16, eps=1e-5), torch.bfloat16),
    ],
    ids=["llama", "llama-bf16", "x-times-x", "square", "gemma", "nn", "nn-bf16"],
)
def test_the_forms_models_write_are_one_op(module: nn.Module, dtype: torch.dtype) -> None:
    module = module.to(dtype)
    assert _found(module, torch.randn(3, 5, 16, dtype=dtype)) == 1


@pytest.mark.parametrize(
    "module",
    [ReturnsRstd(16), OverTheFirstDim(16), nn.RMSNorm(16, elementwise_affine=False)],
    ids=["rstd-read-again", "first-dim", "no-weight"],
)
def test_what_is_not_the_pattern_stays_as_it_is(module: nn.Module) -> None:
    assert _found(module, torch.randn(4, 16)) == 0


def test_the_ops_gradients_are_autograds_of_its_formula() -> None:
    """emmy::rms_norm's backward (emmy::rms_norm_backward, and the weight's sum over the
    rows) against autograd through x · rsqrt(mean(x²) + eps) · w, in float64."""
    torch.manual_seed(0)
    x = (torch.randn(2, 3, 24, dtype=torch.float64) * 2 + 0.5).requires_grad_()
    w = torch.randn(24, dtype=torch.float64).requires_grad_()
    grad = torch.randn(2, 3, 24, dtype=torch.float64)
    got = torch.autograd.grad(ops.rms_norm(x, w, 1e-5), (x, w), grad)
    formula = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-5) * w
    want = torch.autograd.grad(formula, (x, w), grad)
    for have, expected in zip(got, want, strict=True):
        torch.testing.assert_close(have, expected)


def _kernels(program) -> list[str]:
    return [call.kernel.rsplit("_", 1)[0] for call in program.calls]


@pytest.mark.parametrize("norm", [nn.RMSNorm(32), WrittenOut(32)], ids=["nn", "written-out"])
def test_an_rms_norm_trains_in_one_row_kernel_each_way(norm: nn.Module) -> None:
    """Strict, both forms: the forward is one rms_norm kernel (no statistics saved), the
    backward one rms_norm_backward kernel and the weight's column sum; the gradients and
    an inference call are eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), norm, nn.Linear(32, 4))
    eager = copy.deepcopy(model)
    x = torch.randn(6, 8)
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    step = torch.compile(lambda m, x: m(x).square().sum(), backend=backend)
    step(model, x).backward()
    eager(x).square().sum().backward()
    for (name, mine), theirs in zip(model.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad, rtol=1e-4, atol=1e-5, msg=name)
    forward, backward = (_kernels(p) for p in programs)
    # the one row sum the forward keeps is the loss's
    assert forward.count("rms_norm") == 1 and forward.count("reduce_rows") == 1, forward
    assert backward.count("rms_norm_backward") == 1 and "reduce_rows" not in backward, backward
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend=backend)(x), eager(x))
    assert "rms_norm" in _kernels(programs[-1]), _kernels(programs[-1])
    torch._dynamo.reset()


def test_emmy_compile_reads_the_written_out_form_as_one_kernel() -> None:
    """emmy.compile finds the form in the exported ATen graph (x widened to f32 and
    narrowed back): one rms_norm kernel, no row sum, eager's result; the exported program
    itself is left as it was."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), WrittenOut(32), nn.Linear(32, 4))
    x = torch.randn(6, 8)
    compiled = emmy.api.compile(model, x, device=EmuDevice(), db="none", use_cache=False)
    kernels = _kernels(compiled.program)
    assert kernels.count("rms_norm") == 1 and "reduce_rows" not in kernels, kernels
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    exported = torch.export.export(model, (x,))
    assert with_rms_norms(exported.graph) is not exported.graph
    targets = {node.target for node in exported.graph.nodes}
    assert (
        torch.ops.aten.rsqrt.default in targets and torch.ops.emmy.rms_norm.default not in targets
    )
