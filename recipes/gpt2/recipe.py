"""GPT-2 (small dims by default): token and position embeddings, pre-LayerNorm blocks of
causal multi-head attention (one fused q/k/v projection, split) and a GELU MLP, a final
LayerNorm and the language-model head tied to the token embedding. Weights are random."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

CONFIGS = {
    "tiny": {"vocab": 256, "positions": 64, "dim": 64, "heads": 4, "layers": 2, "dtype": "f32"},
    "small": {
        "vocab": 50257,
        "positions": 1024,
        "dim": 768,
        "heads": 12,
        "layers": 12,
        "dtype": "bf16",
    },
}
SIZES = {
    "tiny": [{"batch": 2, "seq": 16}, {"batch": 1, "seq": 7}],
    "small": [{"batch": 1, "seq": 1024}, {"batch": 8, "seq": 128}],
}
DEFAULT = "small"
#: dims `--dim NAME=VALUE` may set, per config, within (low, high): seq up to the positions
DYNAMIC = {
    "tiny": {"batch": (1, 64), "seq": (1, 64)},
    "small": {"batch": (1, 64), "seq": (1, 1024)},
}


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(dim, dim=2)
        shape = (batch, seq, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(batch, seq, dim))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, config: dict) -> None:
        super().__init__()
        self.wte = nn.Embedding(config["vocab"], config["dim"])
        self.wpe = nn.Embedding(config["positions"], config["dim"])
        self.blocks = nn.ModuleList(
            Block(config["dim"], config["heads"]) for _ in range(config["layers"])
        )
        self.ln_f = nn.LayerNorm(config["dim"])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def build(config: dict) -> nn.Module:
    return GPT2(config)


def example_inputs(config: dict, size: dict) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, config["vocab"], (size["batch"], size["seq"])),)
