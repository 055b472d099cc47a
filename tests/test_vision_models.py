"""Real vision and diffusion models that no one here wrote (torchvision's classifiers and a
tiny diffusers UNet2DConditionModel, random weights) match eager through both APIs on the
emulator, every convolution, norm, pooling and upsampling in emmy kernels: no op falls
back. The models are emmy.frontend.tiny_models'."""

from __future__ import annotations

import pytest
import torch

import emmy
import emmy.api
from emmy.frontend import tiny_models
from emmy.program import Program
from emmy.runtime.emu import EmuDevice

TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}


def fallbacks(programs: list[Program]) -> list[str]:
    return [f"{f['target']}: {f['reason']}" for p in programs for f in p.fallbacks.values()]


@pytest.mark.parametrize("name", list(tiny_models.VISION))
def test_a_torchvision_classifier_matches_eager_through_both_apis(name: str) -> None:
    model, inputs = tiny_models.build(name)
    with torch.no_grad():
        expected = model(*inputs)
    compiled = emmy.compile(model, *inputs, device=EmuDevice(), db="none")
    torch.testing.assert_close(compiled(*inputs), expected, **TOLERANCE)
    assert not fallbacks([compiled.program])
    programs: list[Program] = []
    torch._dynamo.reset()
    with torch.no_grad():
        backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none")
        torch.testing.assert_close(
            torch.compile(model, backend=backend)(*inputs), expected, **TOLERANCE
        )
    assert programs and not fallbacks(programs)


def test_a_diffusers_unet_called_as_its_users_call_it_matches_eager() -> None:
    """UNet2DConditionModel(latents, timesteps, encoder_hidden_states=...) returns its
    output dataclass, through both APIs as in eager."""
    unet = tiny_models.tiny_unet()
    latents, timesteps, states = tiny_models.unet_inputs()
    with torch.no_grad():
        expected = unet(latents, timesteps, encoder_hidden_states=states)
    compiled = emmy.compile(
        unet, latents, timesteps, encoder_hidden_states=states, device=EmuDevice(), db="none"
    )
    actual = compiled(latents, timesteps, encoder_hidden_states=states)
    assert type(actual) is type(expected)
    torch.testing.assert_close(actual.sample, expected.sample, **TOLERANCE)
    assert not fallbacks([compiled.program])
    programs: list[Program] = []
    torch._dynamo.reset()
    with torch.no_grad():
        backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none")
        through_dynamo = torch.compile(unet, backend=backend)(
            latents, timesteps, encoder_hidden_states=states
        )
    torch.testing.assert_close(through_dynamo.sample, expected.sample, **TOLERANCE)
    assert programs and not fallbacks(programs)
