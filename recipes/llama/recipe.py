"""A Llama-style decoder: RMSNorm, causal grouped-query attention with rotary embeddings
(emmy's rope op, rotate-half form), a SwiGLU MLP, residual adds, a final RMSNorm and the
language-model head. Weights are random."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emmy.frontend.ops import rope

CONFIGS = {
    "tiny": {
        "vocab": 256,
        "dim": 64,
        "heads": 4,
        "kv_heads": 2,
        "hidden": 160,
        "layers": 2,
        "max_seq": 64,
        "dtype": "f32",
    },
    "small": {
        "vocab": 32000,
        "dim": 2048,
        "heads": 16,
        "kv_heads": 4,
        "hidden": 5632,
        "layers": 4,
        "max_seq": 4096,
        "dtype": "bf16",
    },
}
SIZES = {
    "tiny": [{"batch": 2, "seq": 16}, {"batch": 1, "seq": 9}],
    "small": [{"batch": 1, "seq": 2048}, {"batch": 4, "seq": 512}],
}
DEFAULT = "small"
#: dims `--dim NAME=VALUE` may set, per config, within (low, high): seq up to max_seq
DYNAMIC = {
    "tiny": {"batch": (1, 64), "seq": (1, 64)},
    "small": {"batch": (1, 64), "seq": (1, 4096)},
}


class Attention(nn.Module):
    def __init__(self, config: dict) -> None:
        super().__init__()
        self.heads, self.kv_heads = config["heads"], config["kv_heads"]
        self.head_dim = config["dim"] // config["heads"]
        dim, kv_dim = config["dim"], self.kv_heads * self.head_dim
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q = rope(self.q_proj(x).view(batch, seq, self.heads, self.head_dim), cos, sin)
        k = rope(self.k_proj(x).view(batch, seq, self.kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(batch, seq, self.kv_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(batch, seq, dim))


class DecoderLayer(nn.Module):
    def __init__(self, config: dict) -> None:
        super().__init__()
        self.input_norm = nn.RMSNorm(config["dim"], eps=1e-6)
        self.attn = Attention(config)
        self.post_norm = nn.RMSNorm(config["dim"], eps=1e-6)
        self.gate = nn.Linear(config["dim"], config["hidden"], bias=False)
        self.up = nn.Linear(config["dim"], config["hidden"], bias=False)
        self.down = nn.Linear(config["hidden"], config["dim"], bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.input_norm(x), cos, sin)
        h = self.post_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, config: dict) -> None:
        super().__init__()
        head_dim = config["dim"] // config["heads"]
        self.embed = nn.Embedding(config["vocab"], config["dim"])
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config["layers"]))
        self.norm = nn.RMSNorm(config["dim"], eps=1e-6)
        self.lm_head = nn.Linear(config["dim"], config["vocab"], bias=False)
        inverse = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(config["max_seq"]).float(), inverse)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq = ids.shape[1]
        cos, sin = self.cos[:seq], self.sin[:seq]
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def build(config: dict) -> nn.Module:
    return Llama(config)


def example_inputs(config: dict, size: dict) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, config["vocab"], (size["batch"], size["seq"])),)
