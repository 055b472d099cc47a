"""Dynamic shapes and Python numbers as users meet them: `torch.compile(..., dynamic=True)`
and `mark_dynamic` on Hugging Face models called with their defaults, a Python float
dynamo leaves unspecialised (a host scalar: a 0-d float64 input emmy holds in float32),
`.item()` as a graph break and captured, and `emmy.compile` with `dynamic_shapes` of a
model called with `input_ids` and `attention_mask`. Each new shape compiles once (emmy's
kernels are static); a new value of a Python float compiles nothing."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import emmy
import emmy.api
from emmy.frontend import tiny_models
from emmy.runtime.emu import EmuDevice

F32 = {"rtol": 1e-4, "atol": 1e-4}
#: (batch, length) of each call: batches 1 and 3, lengths 7, 16 and 33
SHAPES = ((1, 7), (3, 16), (3, 33))


def _ids_and_mask(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(3, 128, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[-1, -2:] = 0  # the last row padded
    return ids, mask


@pytest.mark.parametrize("how", ["dynamic=True", "mark_dynamic"])
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_a_transformer_with_dynamic_shapes_matches_eager(name: str, how: str) -> None:
    model = tiny_models.hf_model(name, defaults=True, layers=1)
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=how == "dynamic=True" or None)
    torch.manual_seed(0)
    # mark_dynamic's dims are dynamo's from the first call: two shapes show it
    shapes = SHAPES if how == "dynamic=True" else (SHAPES[0], SHAPES[-1])
    for batch, length in shapes:
        ids, mask = _ids_and_mask(batch, length)
        if how == "mark_dynamic":
            for tensor in (ids, mask):
                torch._dynamo.mark_dynamic(tensor, 0)
                torch._dynamo.mark_dynamic(tensor, 1)
        with torch.no_grad():
            got = compiled(input_ids=ids, attention_mask=mask)
            expected = model(input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(got.logits, expected.logits, **F32)
    assert len(programs) == len(shapes)  # one graph, compiled once per shape
    torch._dynamo.reset()


class PythonFloat(nn.Module):
    def forward(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        # math on the float before it meets a tensor, as gelu_new's sqrt(2 / pi)
        return torch.tanh(x * (2.0 / scale) ** 0.5) + x.sum() * scale


def test_a_python_float_under_dynamic_true_is_read_at_each_call() -> None:
    programs: list = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none", fallback=False)
    torch._dynamo.reset()
    model = PythonFloat()
    compiled = torch.compile(model, backend=backend, dynamic=True)
    for columns, scale in ((3, 0.5), (3, 0.25), (5, 3.0)):
        x = torch.randn(2, columns)
        torch.testing.assert_close(compiled(x, scale), model(x, scale), **F32)
    assert len(programs) == 2  # the second float compiled nothing; the new shape did
    torch._dynamo.reset()


@pytest.mark.parametrize("captured", [False, True], ids=["graph-break", "captured"])
def test_item_as_a_graph_break_and_captured(captured: bool) -> None:
    def normalised(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / x.abs().max().item()) * 2

    backend = emmy.api.backend(device=EmuDevice(), db="none", fallback=False)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=captured):
        compiled = torch.compile(normalised, backend=backend)
        for columns in (4, 4, 6):
            x = torch.randn(3, columns)
            torch.testing.assert_close(compiled(x), normalised(x), **F32)
    torch._dynamo.reset()


def test_emmy_compile_with_dynamic_shapes_of_ids_and_a_mask() -> None:
    """The mask moves to the model's device (`aten.to.device`) in the exported graph; each
    length specialises the one export."""
    model = tiny_models.hf_model("gpt2", defaults=True)
    seq = torch.export.Dim("seq", max=60)
    ids, mask = _ids_and_mask(2, 8)
    compiled = emmy.compile(
        model, input_ids=ids, attention_mask=mask, device=EmuDevice(), db="none",
        dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}},
    )  # fmt: skip
    for length in (8, 16, 33):
        ids, mask = _ids_and_mask(2, length)
        with torch.no_grad():
            got = compiled(input_ids=ids, attention_mask=mask)
            expected = model(input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(got["logits"], expected["logits"], **F32)
