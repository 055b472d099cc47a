"""Convolutions are emmy kernels: conv1d and conv2d with stride, padding, dilation and
groups (depthwise included), and transposed ones, through both APIs on the emulator, an inference batch norm
folded into the weights (under torch.compile too, its statistics frozen), activations and
residuals fused as epilogues. The family's every option runs against float64 in
tests/test_library_families.py."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

import emmy
import emmy.api
from emmy.program import Program
from emmy.runtime.emu import EmuDevice

TOLERANCE = {"atol": 2e-5, "rtol": 2e-5}


class Convolutions(nn.Module):
    """A stem conv → batch norm → ReLU, a depthwise conv of stride 2, a dilated conv, a
    1×1 conv of default arguments with a residual add, and a 1-D conv padded "same" over
    the rows."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(6)
        self.depthwise = nn.Conv2d(6, 6, 3, stride=2, padding=1, groups=6)
        self.dilated = nn.Conv2d(6, 6, 3, padding=2, dilation=2)
        self.pointwise = nn.Conv2d(6, 6, 1, bias=False)  # all defaults: torch.export drops them
        self.rows = nn.Conv1d(6, 5, 4, padding="same", dilation=2, bias=False)
        self.norm.running_mean.uniform_(-0.5, 0.5)
        self.norm.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.norm(self.stem(x)))
        y = self.depthwise(y)
        y = self.pointwise(torch.nn.functional.silu(self.dilated(y))) + y
        return self.rows(y.flatten(2))


@functools.cache
def model_and_input() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return Convolutions().eval(), torch.randn(2, 3, 9, 11)


def conv_kernels(program: Program) -> list[str]:
    return [k.site.family for k in program.kernels.values() if k.site.family.startswith("conv")]


def test_emmy_compile_runs_every_convolution_in_its_kernels() -> None:
    model, x = model_and_input()
    compiled = emmy.compile(model, x, device=EmuDevice(), db="none")
    torch.testing.assert_close(compiled(x), model(x), **TOLERANCE)
    program = compiled.program
    assert not program.fallbacks, program.fallbacks
    # five convolutions, five kernels: the batch norm folded into the stem's weights, the
    # activations and the residual fused as epilogues
    assert len(conv_kernels(program)) == 5, program.kernels
    assert all(k.site.family.startswith("conv") for k in program.kernels.values()), program.kernels


def test_torch_compile_folds_the_frozen_batch_norm() -> None:
    model, x = model_and_input()
    programs: list[Program] = []
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(
            model, backend=emmy.api.backend(device=EmuDevice(), programs=programs)
        )
        torch.testing.assert_close(compiled(x), model(x), **TOLERANCE)
    (program,) = programs
    assert not program.fallbacks, program.fallbacks
    assert len(conv_kernels(program)) == 5, program.kernels


def test_a_training_graph_keeps_its_parameters_as_inputs() -> None:
    """With gradients on, the parameters move between calls: nothing is frozen, and the
    batch norm (training: batch statistics) runs through torch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    x = torch.randn(1, 3, 6, 6)
    programs: list[Program] = []
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=emmy.api.backend(device=EmuDevice(), programs=programs))
    torch.testing.assert_close(compiled(x), model(x), **TOLERANCE)
    with torch.no_grad():
        model[0].weight.mul_(2.0)  # an optimizer's step: the next call reads the new weight
    torch.testing.assert_close(compiled(x), model(x), **TOLERANCE)


class TransposedConvolutions(nn.Module):
    """A decoder's upsampling: a ConvTranspose2d of stride 2 with an output_padding and a
    ReLU, then a grouped, dilated one of unequal strides, then a ConvTranspose1d over rows."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)
        self.grouped = nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), groups=2, dilation=(1, 2))
        self.rows = nn.ConvTranspose1d(6, 3, 4, stride=2, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.grouped(torch.relu(self.up(x)))
        return self.rows(y.flatten(2))


@pytest.mark.parametrize("api", ["emmy.compile", "torch.compile"])
def test_transposed_convolutions_run_in_the_convolution_kernel(api: str) -> None:
    """torch.export keeps conv_transpose1d/2d, torch.compile gives aten.convolution of
    `transposed`: each is one SIMT convolution kernel, its ReLU fused."""
    torch.manual_seed(0)
    model, x = TransposedConvolutions().eval(), torch.randn(2, 6, 4, 5)
    if api == "emmy.compile":
        compiled = emmy.compile(model, x, device=EmuDevice(), db="none")
        torch.testing.assert_close(compiled(x), model(x), **TOLERANCE)
        program = compiled.program
    else:
        programs: list[Program] = []
        torch._dynamo.reset()
        with torch.no_grad():
            backend = emmy.api.backend(device=EmuDevice(), programs=programs, fallback=False)
            torch.testing.assert_close(
                torch.compile(model, backend=backend)(x), model(x), **TOLERANCE
            )
        (program,) = programs
    assert not program.fallbacks, program.fallbacks
    assert conv_kernels(program) == ["conv"] * 3, program.kernels


def test_what_no_kernel_takes_falls_back_with_its_reason() -> None:
    """Under torch.compile every convolution arrives as aten.convolution, refused here by
    what no kernel takes (torch.export keeps conv3d, which no entry claims)."""
    conv, reason = nn.Conv3d(3, 4, 3), "a convolution of 3 spatial dims is not supported"
    x = torch.randn(1, 3, 4, 4, 4)
    programs: list[Program] = []
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(
            conv.eval(), backend=emmy.api.backend(device=EmuDevice(), programs=programs)
        )
        torch.testing.assert_close(compiled(x), conv(x), **TOLERANCE)
    (program,) = programs
    assert [reason in f["reason"] for f in program.fallbacks.values()] == [True], program.fallbacks


def test_same_padding_of_an_even_filter_falls_back_under_export() -> None:
    """torch pads one side more; under torch.compile the padding arrives as a copy first."""
    conv, x = nn.Conv1d(3, 4, 4, padding="same"), torch.randn(1, 3, 8)
    graph = emmy.frontend.export.export(conv.eval(), (x,))
    assert ["padded more on one side" in f.reason for f in graph.coverage.fallbacks] == [True]
