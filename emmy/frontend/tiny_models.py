"""Tiny models of the architectures people compile, for the model tests and the coverage
benchmark: six Hugging Face transformers (GPT-2, Llama, Mistral, Phi-3, Gemma, BERT) and
three mixtures of experts (Mixtral, OLMoE, Qwen2-MoE: 4 experts, 2 per token) at 2 layers,
hidden size 64, 4 heads and a vocabulary of 128; `torch.nn.TransformerEncoderLayer`; a
small convolutional network; torchvision's classifiers (VISION: random weights, 64×64
images); and a tiny diffusers UNet2DConditionModel. Weights are random from seed 0, nothing
is downloaded.

Each model takes a batch of 2 with padding: the transformers `input_ids` and an
`attention_mask` whose second row is shorter (emmy.frontend.hf_model.example_inputs), the
encoder layer a key padding mask, the conv net a batch of 3×16×16 images, the classifiers
3×64×64 images, the UNet 4×8×8 latents, timesteps and 5 tokens of text states.

    model, inputs = build("llama", seq=8)           # f32, eval mode
    model, inputs = build("llama", seq=8, dtype="bf16")
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from emmy.base import dtypes
from emmy.frontend import packages
from emmy.frontend.hf_model import FirstOutput, example_inputs

#: the sizes every tiny transformer shares, as Hugging Face configs name them
_HIDDEN, _HEADS, _LAYERS, _VOCAB, _POSITIONS = 64, 4, 2, 128, 64
_COMMON = {
    "hidden_size": _HIDDEN,
    "num_hidden_layers": _LAYERS,
    "num_attention_heads": _HEADS,
    "intermediate_size": 2 * _HIDDEN,
    "vocab_size": _VOCAB,
    "max_position_embeddings": _POSITIONS,
    # token ids inside the tiny vocabulary; no KV cache in a single forward pass
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "use_cache": False,
}
_DECODER = {**_COMMON, "num_key_value_heads": 2}


@dataclass(frozen=True)
class HFModel:
    """A transformers model class and the fields of its tiny config."""

    config_class: str
    model_class: str
    fields: dict = field(default_factory=dict)


#: the transformers models, by name: config and model class, tiny config fields
HF_MODELS = {
    "gpt2": HFModel(
        "GPT2Config",
        "GPT2LMHeadModel",
        {
            "n_embd": _HIDDEN,
            "n_layer": _LAYERS,
            "n_head": _HEADS,
            "vocab_size": _VOCAB,
            "n_positions": _POSITIONS,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "use_cache": False,
        },
    ),
    "llama": HFModel("LlamaConfig", "LlamaForCausalLM", _DECODER),
    "mistral": HFModel("MistralConfig", "MistralForCausalLM", _DECODER),
    "phi3": HFModel("Phi3Config", "Phi3ForCausalLM", _DECODER),
    "gemma": HFModel(
        "GemmaConfig", "GemmaForCausalLM", {**_DECODER, "head_dim": _HIDDEN // _HEADS}
    ),
    "bert": HFModel("BertConfig", "BertForMaskedLM", _COMMON),
    "mixtral": HFModel(
        "MixtralConfig",
        "MixtralForCausalLM",
        {**_DECODER, "num_local_experts": 4, "num_experts_per_tok": 2},
    ),
    "olmoe": HFModel(
        "OlmoeConfig", "OlmoeForCausalLM", {**_DECODER, "num_experts": 4, "num_experts_per_tok": 2}
    ),
    "qwen2_moe": HFModel(
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            **_DECODER,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": _HIDDEN,
            "shared_expert_intermediate_size": 2 * _HIDDEN,
        },
    ),
}

#: the mixtures of experts among HF_MODELS, and the dense transformers
MOE = ("mixtral", "olmoe", "qwen2_moe")
TRANSFORMERS = tuple(name for name in HF_MODELS if name not in MOE)


def hf_config(name: str, defaults: bool = False):
    """The tiny transformers config of HF_MODELS[name]; with `defaults`, the config's own
    defaults where the tiny one only chooses a single forward's behaviour (use_cache)."""
    entry = HF_MODELS[name]
    fields = {k: v for k, v in entry.fields.items() if not (defaults and k == "use_cache")}
    return getattr(packages.transformers(), entry.config_class)(**fields)


def hf_model(name: str, defaults: bool = False, layers: int | None = None) -> nn.Module:
    """A transformers model of HF_MODELS with random weights (seed 0), eval mode; with
    `defaults`, as its users get it (use_cache as the config says: see hf_config); with
    `layers`, that many layers instead of the tiny config's."""
    transformers = packages.transformers()  # a test extra, seconds to import
    transformers.logging.set_verbosity_error()  # a random model's load report
    torch.manual_seed(0)
    config = hf_config(name, defaults)
    if layers is not None:
        config.num_hidden_layers = layers
    return getattr(transformers, HF_MODELS[name].model_class)(config).eval()


def _hf(name: str, seq: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return FirstOutput(hf_model(name)), example_inputs(_VOCAB, {"batch": 2, "seq": seq})


class PaddedEncoderLayer(nn.Module):
    """`nn.TransformerEncoderLayer` (batch first) called with a key padding mask."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            _HIDDEN, _HEADS, 2 * _HIDDEN, dropout=0.0, batch_first=True
        )

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.layer(x, src_key_padding_mask=padding)


def _encoder_layer(seq: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = PaddedEncoderLayer().eval()
    padding = torch.zeros(2, seq, dtype=torch.bool)
    padding[1, seq - max(1, seq // 4) :] = True  # the second row is shorter
    return model, (torch.randn(2, seq, _HIDDEN), padding)


def conv_net() -> nn.Sequential:
    """Two conv → batch norm → ReLU → max-pool stages and a linear classifier, for 3×16×16
    images; the batch norms' running statistics are random, as a trained net's are."""
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )
    for norm in (net[1], net[5]):
        norm.get_buffer("running_mean").uniform_(-0.5, 0.5)
        norm.get_buffer("running_var").uniform_(0.5, 2.0)
    return net.eval()


def _conv_net(seq: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return conv_net(), (torch.randn(2, 3, 16, 16),)


#: torchvision's classifiers, with the arguments that fit them to 64×64 images
VISION = {
    "resnet18": {},
    "mobilenet_v3_small": {},
    "efficientnet_b0": {},
    "convnext_tiny": {},
    "vit_b_16": {"image_size": 64},
}


def vision_model(name: str) -> nn.Module:
    """A torchvision classifier of VISION with random weights (seed 0), eval mode."""
    torch.manual_seed(0)
    model = getattr(packages.torchvision().models, name)(weights=None, **VISION[name])
    return without_zero_parameters(model).eval()


def without_zero_parameters(model: nn.Module) -> nn.Module:
    """`model` with each parameter that is all zeros drawn afresh (normal, std 0.02, from
    torch's current seed): torchvision zero-initialises ViT's head, whose output is then
    zeros whatever the layers below it compute, and norms' biases, so that a comparison
    with eager would miss a wrong kernel."""
    with torch.no_grad():
        for parameter in model.parameters():
            if not parameter.any():
                parameter.normal_(0.0, 0.02)
    return model


def _vision(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = vision_model(name)
    return model, (torch.randn(2, 3, 64, 64),)


class SampleOutput(nn.Module):
    """A diffusers model's `sample` (what its output dataclass holds), for the benchmarks
    that compare tensors."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(*args).sample


def tiny_unet() -> nn.Module:
    """diffusers' UNet2DConditionModel at its smallest: two blocks of 32 and 64 channels, one
    layer each, cross-attention to 32-wide text states, group norms of 8 groups."""
    torch.manual_seed(0)
    return (
        packages.diffusers()
        .UNet2DConditionModel(
            sample_size=8,
            in_channels=4,
            out_channels=4,
            layers_per_block=1,
            block_out_channels=(32, 64),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32,
            attention_head_dim=8,
            norm_num_groups=8,
        )
        .eval()
    )


def unet_inputs() -> tuple[torch.Tensor, ...]:
    """Latents, timesteps and text states for tiny_unet, a batch of 2."""
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 4, 8, 8, generator=generator)
    states = torch.randn(2, 5, 32, generator=generator)
    return latents, torch.tensor([1, 10]), states


def _unet(seq: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return SampleOutput(tiny_unet()), unet_inputs()


#: every tiny model by name: builds it (seed 0) and its inputs at a sequence length
MODELS: dict[str, Callable[[int], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    **{name: (lambda seq, name=name: _hf(name, seq)) for name in HF_MODELS},
    "encoder_layer": _encoder_layer,
    "conv_net": _conv_net,
    **{name: (lambda seq, name=name: _vision(name)) for name in VISION},
    "unet": _unet,
}

#: the sets the coverage benchmark names
SETS = {
    "transformers": (*TRANSFORMERS, "encoder_layer"),
    "vision": ("conv_net", *VISION),
    "diffusion": ("unet",),
    "moe": MOE,
}


def build(
    name: str, seq: int = 8, dtype: str = "f32"
) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """MODELS[name] in `dtype` (its floating inputs too), eval mode, and its inputs."""
    model, inputs = MODELS[name](seq)
    torch_dtype = dtypes.torch_dtype(dtype)
    inputs = tuple(t.to(torch_dtype) if t.is_floating_point() else t for t in inputs)
    return model.to(torch_dtype).eval(), inputs


def parse_model_arguments(description: str) -> tuple[list[str], int]:
    """The `--models` (comma-separated names of MODELS, default all) and `--seq` of a
    benchmark's command line; an unknown name is a usage error."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"comma-separated, of {', '.join(MODELS)} (default: all)",
    )
    parser.add_argument("--seq", type=int, default=8, help="sequence length (default: 8)")
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}")
    return names, args.seq
