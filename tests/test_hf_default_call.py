"""Hugging Face models called as their users call them: `model(input_ids=..., attention_mask=...)`
with every other argument at its default (use_cache, return_dict), through `emmy.compile` and
`torch.compile(backend="emmy")`, on the emulator. The outputs are what eager returns (a
ModelOutput, its cache a DynamicCache) and every tensor in them matches eager's, at three
calls: the examples, then other values (tests/calls.py)."""

from __future__ import annotations

import pytest
import torch
from calls import each_call
from torch.utils import _pytree

import emmy
import emmy.api
from emmy.frontend import tiny_models
from emmy.frontend.export import register_output_types
from emmy.frontend.hf_model import example_inputs
from emmy.runtime.emu import EmuDevice

SEQ = 8
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def _call() -> dict[str, torch.Tensor]:
    ids, mask = example_inputs(128, {"batch": 2, "seq": SEQ})
    return {"input_ids": ids, "attention_mask": mask}


def _assert_same(actual: object, expected: object) -> None:
    """The same structure (types included) with every tensor close to eager's."""
    register_output_types()  # a DynamicCache flattens into its tensors
    assert type(actual) is type(expected)
    got, got_spec = _pytree.tree_flatten(actual)
    want, want_spec = _pytree.tree_flatten(expected)
    assert got_spec == want_spec
    for a, b in zip(got, want, strict=True):
        if isinstance(b, torch.Tensor):
            torch.testing.assert_close(a, b, **TOLERANCE)
        else:
            assert a == b


@pytest.mark.parametrize("name", list(tiny_models.HF_MODELS))
def test_the_default_call_matches_eager_through_both_apis(name: str) -> None:
    """The dense transformers and the mixtures of experts (tests/test_moe.py: their
    routing), with no op through torch under either API."""
    model = tiny_models.hf_model(name, defaults=True)
    compiled = emmy.compile(model, **_call(), device=EmuDevice(), db="none")
    assert not compiled.program.fallbacks, compiled.program.fallbacks
    torch._dynamo.reset()
    programs: list = []
    dynamo = torch.compile(model, backend=emmy.api.backend(device=EmuDevice(), programs=programs))
    for _, call in each_call((), _call()):
        with torch.no_grad():
            expected = model(**call)
            _assert_same(compiled(**call), expected)
            _assert_same(dynamo(**call), expected)
    assert programs and not [p.fallbacks for p in programs if p.fallbacks]
