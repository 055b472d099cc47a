"""The safety net under torch.compile: a graph emmy fails to compile for an internal reason
runs eagerly, with one warning line naming the graph, the error and where it was raised;
strict mode (strict=True, or EMMY_STRICT=1 for any process, as the test suite runs) raises."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import emmy.api
from emmy.runtime.emu import EmuDevice


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2.0


def _planted(*args, **kwargs):
    raise KeyError("planted: a kernel.call result used before it is made")


def _compiled(**options) -> tuple[nn.Module, object]:
    torch.manual_seed(0)
    model = Block().eval()
    torch._dynamo.reset()
    return model, torch.compile(model, backend=emmy.api.backend(device=EmuDevice(), **options))


def test_an_internal_error_runs_the_graph_eagerly_with_one_line(monkeypatch, caplog) -> None:
    monkeypatch.delenv("EMMY_STRICT", raising=False)
    monkeypatch.setattr(emmy.api, "build_program", _planted)
    eager_graphs: list[str] = []
    model, compiled = _compiled(eager_graphs=eager_graphs)
    x = torch.randn(4, 8)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="emmy"):
        torch.testing.assert_close(compiled(x), model(x))
        torch.testing.assert_close(compiled(x), model(x))  # stays eager, warns once
    (line,) = eager_graphs
    assert [r.getMessage() for r in caplog.records if r.name == "emmy"] == [line]
    assert "\n" not in line and "failed to compile (KeyError: " in line
    assert "planted" in line and "test_safety_net.py" in line and "it runs eagerly" in line


@pytest.mark.parametrize("how", ["environment", "argument"])
def test_strict_mode_raises(monkeypatch, how: str) -> None:
    monkeypatch.setattr(emmy.api, "build_program", _planted)
    if how == "environment":
        monkeypatch.setenv("EMMY_STRICT", "1")
        _, compiled = _compiled()
    else:
        monkeypatch.delenv("EMMY_STRICT", raising=False)
        _, compiled = _compiled(strict=True)
    with torch.no_grad(), pytest.raises(Exception, match="planted"):
        compiled(torch.randn(4, 8))
