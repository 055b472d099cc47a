"""Real vision and diffusion models that no one here wrote (torchvision's classifiers and a
tiny diffusers UNet2DConditionModel, random weights) match eager through both APIs on the
emulator, every convolution, norm, pooling and upsampling in emmy kernels: no op falls
back. The models are emmy.frontend.tiny_models'.

Through emmy.compile, resnet18 and the UNet, which between them have every op kind of the
tiny vision models but the depthwise convolutions (convolutions, batch, layer and group
norms, pooling, upsampling, cross-attention), compile with the IR verified
in full after every pass (EMMY_VERIFY_EACH=1): the rest of the suite
compiles as users do, the op verifiers after the last pass alone, so that a pass leaving an op
invalid for a later one to remove is named here. Each compiled model is called three times,
the examples and then other values (tests/calls.py), each against eager.

Beside these, benchmarks/vision_zoo.py takes every torchvision classifier that builds at a
small size through both APIs with the same calls."""

from __future__ import annotations

import pytest
import torch
from calls import each_call

import emmy
import emmy.api
from emmy.frontend import tiny_models
from emmy.program import Program
from emmy.runtime.emu import EmuDevice

TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}
#: the classifiers emmy.compile verifies in full after every pass (the UNet is, too)
VERIFIED_EACH_PASS = ("resnet18",)


def compile_verified(model, *args, verify_each: bool, **kwargs) -> emmy.api.CompiledModule:
    """emmy.compile on the emulator; with `verify_each`, the IR verified in full after each
    pass (no program cache: a cached program would skip the passes)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EMMY_VERIFY_EACH", "1" if verify_each else "")
        return emmy.compile(
            model, *args, device=EmuDevice(), db="none", use_cache=not verify_each, **kwargs
        )


def fallbacks(programs: list[Program]) -> list[str]:
    return [f"{f['target']}: {f['reason']}" for p in programs for f in p.fallbacks.values()]


#: the classifiers tested here: mobilenet_v3_small's parts beside these (hardswish and
#: hardsigmoid, squeeze-excitation, depthwise convolutions) are efficientnet_b0's or the
#: pointwise tests'; benchmarks/vision_zoo.py takes it with every other classifier
TESTED = [name for name in tiny_models.VISION if name != "mobilenet_v3_small"]


@pytest.mark.parametrize("name", TESTED)
def test_a_torchvision_classifier_matches_eager_through_both_apis(name: str) -> None:
    model, inputs = tiny_models.build(name)
    compiled = compile_verified(model, *inputs, verify_each=name in VERIFIED_EACH_PASS)
    assert not fallbacks([compiled.program])
    programs: list[Program] = []
    torch._dynamo.reset()
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none")
    dynamo = torch.compile(model, backend=backend)
    for args, _ in each_call(inputs):
        with torch.no_grad():
            expected = model(*args)
            assert expected.abs().amax() > 0.01  # outputs of zeros would match any kernel
            torch.testing.assert_close(compiled(*args), expected, **TOLERANCE)
            torch.testing.assert_close(dynamo(*args), expected, **TOLERANCE)
    assert programs and not fallbacks(programs)


def test_a_diffusers_unet_called_as_its_users_call_it_matches_eager() -> None:
    """UNet2DConditionModel(latents, timesteps, encoder_hidden_states=...) returns its
    output dataclass, through both APIs as in eager."""
    unet = tiny_models.tiny_unet()
    latents, timesteps, states = tiny_models.unet_inputs()
    compiled = compile_verified(
        unet, latents, timesteps, encoder_hidden_states=states, verify_each=True
    )
    assert not fallbacks([compiled.program])
    programs: list[Program] = []
    torch._dynamo.reset()
    backend = emmy.api.backend(device=EmuDevice(), programs=programs, db="none")
    dynamo = torch.compile(unet, backend=backend)
    for args, kwargs in each_call((latents, timesteps), {"encoder_hidden_states": states}):
        with torch.no_grad():
            expected = unet(*args, **kwargs)
            actual, through_dynamo = compiled(*args, **kwargs), dynamo(*args, **kwargs)
        assert type(actual) is type(expected)
        torch.testing.assert_close(actual.sample, expected.sample, **TOLERANCE)
        torch.testing.assert_close(through_dynamo.sample, expected.sample, **TOLERANCE)
    assert programs and not fallbacks(programs)
