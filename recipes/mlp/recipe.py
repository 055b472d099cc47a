"""An MLP: Linear → GELU → ... → Linear over [batch, features]."""

from __future__ import annotations

import torch
from torch import nn

CONFIGS = {
    "tiny": {"features": 64, "hidden": 128, "layers": 2, "dtype": "f32"},
    "base": {"features": 1024, "hidden": 4096, "layers": 4, "dtype": "bf16"},
}
SIZES = {"tiny": [{"batch": 8}, {"batch": 3}], "base": [{"batch": 64}, {"batch": 512}]}
DEFAULT = "base"
#: dims `--dim NAME=VALUE` may set, per config, within (low, high)
DYNAMIC = {"tiny": {"batch": (1, 4096)}, "base": {"batch": (1, 65536)}}


def build(config: dict) -> nn.Module:
    layers: list[nn.Module] = []
    width = config["features"]
    for _ in range(config["layers"] - 1):
        layers += [nn.Linear(width, config["hidden"]), nn.GELU()]
        width = config["hidden"]
    layers.append(nn.Linear(width, config["features"]))
    return nn.Sequential(*layers)


def example_inputs(config: dict, size: dict) -> tuple[torch.Tensor, ...]:
    return (torch.randn(size["batch"], config["features"]),)
