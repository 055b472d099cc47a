"""Tiny models of the architectures people compile, for the model tests and the coverage
benchmark: six Hugging Face transformers (GPT-2, Llama, Mistral, Phi-3, Gemma, BERT) at
2 layers, hidden size 64, 4 heads and a vocabulary of 128; `torch.nn.TransformerEncoderLayer`;
and a small convolutional network. Weights are random from seed 0, nothing is downloaded.

Each model takes a batch of 2 with padding: the transformers `input_ids` and an
`attention_mask` whose second row is shorter (emmy.frontend.hf_model.example_inputs), the
encoder layer a key padding mask, the conv net a batch of 3×16×16 images.

    model, inputs = build("llama", seq=8)           # f32, eval mode
    model, inputs = build("llama", seq=8, dtype="bf16")
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from emmy import dtypes
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
}


def hf_config(name: str, defaults: bool = False):
    """The tiny transformers config of HF_MODELS[name]; with `defaults`, the config's own
    defaults where the tiny one only chooses a single forward's behaviour (use_cache)."""
    # transformers (a test extra, seconds to import) is needed by its models alone
    import transformers

    entry = HF_MODELS[name]
    fields = {k: v for k, v in entry.fields.items() if not (defaults and k == "use_cache")}
    return getattr(transformers, entry.config_class)(**fields)


def hf_model(name: str, defaults: bool = False) -> nn.Module:
    """A transformers model of HF_MODELS with random weights (seed 0), eval mode; with
    `defaults`, as its users get it (use_cache as the config says: see hf_config)."""
    # transformers (a test extra, seconds to import) is needed by its models alone
    import transformers

    transformers.logging.set_verbosity_error()  # a random model's load report
    torch.manual_seed(0)
    config = hf_config(name, defaults)
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
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
    return net.eval()


def _conv_net(seq: int) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return conv_net(), (torch.randn(2, 3, 16, 16),)


#: every tiny model by name: builds it (seed 0) and its inputs at a sequence length
MODELS: dict[str, Callable[[int], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    **{name: (lambda seq, name=name: _hf(name, seq)) for name in HF_MODELS},
    "encoder_layer": _encoder_layer,
    "conv_net": _conv_net,
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
