"""Totality: the ops emmy has no kernel for run through torch between its kernels
(`fallback.call`), through emmy.compile and torch.compile alike, on the emulator; what
depends on constants and shapes alone is computed at compile time; and the account of it
(coverage, the fallbacks with their reasons) reaches the program, its report and the log."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import emmy
import emmy.api
from emmy.base.errors import EmmyError
from emmy.runtime.emu import EmuDevice

F32 = {"atol": 1e-4, "rtol": 1e-4}


class ConvNet(nn.Module):
    """A 3-D convolution of one plane (a torch op: no kernel takes it) before a batch norm,
    pooling, emmy's matmul and relu."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, (1, 3, 3), padding=(0, 1, 1))
        self.norm = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        y = self.pool(torch.relu(self.norm(self.conv(x.unsqueeze(2)).squeeze(2))))
        return self.head(y.flatten(1))


def _conv_net() -> ConvNet:
    torch.manual_seed(0)
    model = ConvNet().eval()
    with torch.no_grad():  # running statistics that are not the identity
        model.norm.running_mean.uniform_(-0.5, 0.5)
        model.norm.running_var.uniform_(0.5, 2.0)
    return model


def test_a_conv_net_runs_with_its_convolutions_through_torch():
    model = _conv_net()
    x = torch.randn(2, 3, 8, 8)
    compiled = emmy.compile(model, x, device=EmuDevice())
    fresh = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(fresh), model(fresh), **F32)
    program = compiled.program
    fell_back = {entry["target"] for entry in program.fallbacks.values()}
    assert any("conv" in op for op in fell_back), fell_back
    assert all(entry["reason"] and entry["source"] for entry in program.fallbacks.values())
    # the model's own line, not torch.nn's
    assert any("test_fallback.py:" in e["source"] for e in program.fallbacks.values())
    coverage = program.coverage
    assert 0 < coverage["native_ops"] < coverage["ops"]
    assert 0 < coverage["native_flops"] < coverage["flops"]
    assert program.report()["fallbacks"] == program.fallbacks
    families = {info.site.family for info in program.kernels.values()}
    assert "matmul" in families or "matmul_tc" in families


def test_torch_compile_runs_a_conv_net_and_logs_one_line_per_graph(caplog):
    model = _conv_net()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=emmy.api.backend(device=EmuDevice()))
    x = torch.randn(2, 3, 8, 8)
    with caplog.at_level(logging.INFO, logger="emmy"), torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **F32)
    lines = [r.getMessage() for r in caplog.records if r.name == "emmy"]
    torch._dynamo.reset()
    assert len(lines) == 1, lines
    assert "ops in emmy kernels" in lines[0] and "aten.convolution.default x1" in lines[0]


class Views(nn.Module):
    """Fallbacks that read a transposed view, integers and booleans, and give two results."""

    def forward(self, x, ids, mask):
        values, indices = torch.topk(x.transpose(0, 1), 2, dim=-1)  # [8, 2] of a [4, 8]
        counts = torch.cumprod(ids, dim=-1)  # int64
        kept = torch.masked_fill(x, mask, 0.0).sum(-1)
        return values * 2.0, indices, counts, kept


def test_fallbacks_read_views_integers_and_booleans_and_give_several_results():
    x = torch.randn(4, 8)
    ids = torch.randint(0, 5, (4, 8))
    mask = torch.rand(4, 8) > 0.5
    compiled = emmy.compile(Views(), x, ids, mask, device=EmuDevice())
    actual = compiled(x, ids, mask)
    expected = Views()(x, ids, mask)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a, e, **F32)


class ShapeMask(nn.Module):
    """A causal mask built from arange and comparisons: shapes alone, so compile time."""

    def forward(self, x):
        n = x.shape[-1]
        rows = torch.arange(n)
        mask = rows[None, :] <= rows[:, None]
        bias = torch.zeros(n, n).masked_fill(~mask, float("-inf"))
        return torch.softmax(x + bias, dim=-1)


def test_what_depends_on_shapes_alone_is_computed_at_compile_time():
    x = torch.randn(2, 6, 6)
    compiled = emmy.compile(ShapeMask(), x, device=EmuDevice())
    torch.testing.assert_close(compiled(x), ShapeMask()(x), **F32)
    program = compiled.program
    assert not program.fallbacks
    assert program.coverage["folded_ops"] >= 3
    assert any(spec.name.startswith("folded.") for spec in program.constants)


class Nonzero(nn.Module):
    def forward(self, x):
        return torch.nonzero(x > 0)


def test_a_data_dependent_shape_is_one_line_naming_the_op():
    with pytest.raises(EmmyError) as error:
        emmy.compile(Nonzero(), torch.randn(4, 8), device=EmuDevice())
    message = str(error.value)
    assert "\n" not in message
    assert "data-dependent" in message and "nonzero" in message, message


def test_no_fallback_names_the_op_and_its_line():
    with pytest.raises(EmmyError) as error:
        emmy.compile(_conv_net(), torch.randn(2, 3, 8, 8), device=EmuDevice(), fallback=False)
    message = str(error.value)
    expected = "unsupported op aten.conv3d.default (node conv3d at "
    assert message.startswith(expected), message
    assert "test_fallback.py:" in message and "\n" not in message


def test_a_handler_whose_later_op_fails_its_verifier_leaves_nothing_behind() -> None:
    """An op refused by its verifier is never inserted, so the handler's earlier ops can be
    erased and its node falls back (it held their results: erasing them raised)."""
    from torch import fx
    from xdsl.dialects.builtin import TensorType, f32

    from emmy.base.errors import EmmyError
    from emmy.dialects import graph
    from emmy.frontend.converter import Converter

    converter = Converter(fx.Graph(), {})
    x = converter.block.insert_arg(TensorType(f32, [4]), 0)
    before = converter.block.last_op
    doubled = converter.insert(graph.AddOp(x, x, x.type))
    with pytest.raises(EmmyError, match="graph.matmul needs operands of rank 2"):
        converter.insert(graph.MatmulOp(doubled, doubled, x.type, transpose_b=False))
    converter.erase_after(before)
    assert converter.block.last_op is before
