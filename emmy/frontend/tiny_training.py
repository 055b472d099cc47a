"""Tiny training steps, as their users write them, for the training tests and benchmarks:
each a model in train mode (random weights from seed 0), its inputs and its loss. An MLP
with LayerNorm and cross-entropy; a CNN with BatchNorm in train mode, max pooling and a
grouped convolution; tiny GPT-2 and Llama (emmy.frontend.tiny_models' configs, their
defaults, dropout included) with the loss transformers computes from `labels`; a tiny ViT
classifier. A compiled step draws its dropout masks as eager does: seeded alike, the two
drop the same elements.

    step = TRAINING["gpt2"]()
    loss = step.loss(step.model, *step.inputs)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from emmy.frontend import packages, tiny_models


@dataclass(frozen=True)
class TrainingStep:
    """A model, its inputs, and its loss as a function of the model and the inputs."""

    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    loss: Callable[..., torch.Tensor]


def _cross_entropy(model: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), labels)


def mlp() -> TrainingStep:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))
    return TrainingStep(model, (torch.randn(8, 16), torch.randint(0, 4, (8,))), _cross_entropy)


def cnn() -> TrainingStep:
    """The convolution before the norm has no bias, as CNNs write it: that bias's gradient
    is zero, and an optimizer that normalises its steps (AdamW) turns the rounding of a
    zero into full steps."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, stride=2, groups=2),
        nn.Flatten(),
        nn.Linear(8, 4),
    )
    inputs = (torch.randn(2, 3, 8, 8), torch.randint(0, 4, (2,)))
    return TrainingStep(model, inputs, _cross_entropy)


def _language_model_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def language_model(name: str) -> TrainingStep:
    """A tiny transformers causal LM with its defaults (GPT-2's dropout of 0.1 included), its
    loss from `labels`, at one layer (a second adds the same graph's ops again)."""
    model = tiny_models.hf_model(name, defaults=True, layers=1).train()
    torch.manual_seed(0)
    return TrainingStep(model, (torch.randint(3, 128, (2, 8)),), _language_model_loss)


def _classifier_loss(model: nn.Module, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return model(pixel_values=x, labels=labels).loss


def vit() -> TrainingStep:
    transformers = packages.transformers()
    config = transformers.ViTConfig(
        num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2,
        image_size=16, patch_size=8, num_labels=4,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.ViTForImageClassification(config)
    inputs = (torch.randn(2, 3, 16, 16), torch.randint(0, 4, (2,)))
    return TrainingStep(model, inputs, _classifier_loss)


#: the training steps, by name
TRAINING: dict[str, Callable[[], TrainingStep]] = {
    "mlp": mlp,
    "cnn": cnn,
    "gpt2": lambda: language_model("gpt2"),
    "llama": lambda: language_model("llama"),
    "vit": vit,
}
