"""GPT-2 (small dims by default): token and position embeddings, pre-LayerNorm blocks of
causal multi-head attention (one fused q/k/v projection, split) and a GELU MLP, a final
LayerNorm and the language-model head tied to the token embedding. Weights are random.

Its decode program (`decoder`) runs the same blocks over a static KV cache: a step takes
new token ids, the position they start at and a key and a value cache per layer, writes
the new keys and values into the caches in place and returns the last token's logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emmy.frontend.ops import cached_attention

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


#: per config, the decode program's cache: its maximum length (up to the positions)
DECODE = {"tiny": {"max_len": 64}, "small": {"max_len": 1024}}


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

    def step(
        self, x: torch.Tensor, position: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
    ) -> torch.Tensor:
        """forward for new tokens at `position` on: their keys and values are written into
        the caches, and they attend over the cache up to themselves."""
        batch, new, dim = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(dim, dim=2)
        shape = (batch, new, self.heads, dim // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        positions = position + torch.arange(new, device=x.device)
        k_cache.index_copy_(2, positions, k)
        v_cache.index_copy_(2, positions, v)
        y = cached_attention(q, k_cache, v_cache, position + new)
        x = x + self.c_proj(y.transpose(1, 2).reshape(batch, new, dim))
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
        # token embeddings of unit variance would make the tied head favour the input token
        # itself, so that greedy decoding repeats one token
        nn.init.normal_(self.wte.weight, std=0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


class Decoder(nn.Module):
    """A decode step of a GPT2 (its own modules, so the same weights): ids [batch, new]
    at `position` (int64 [1]) on, the caches k0, v0, k1, v1, ... [batch, heads, max_len,
    head_dim]; returns the logits [batch, vocab] of the last new token."""

    def __init__(self, model: GPT2) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, position: torch.Tensor, *caches: torch.Tensor):
        model = self.model
        positions = position + torch.arange(ids.shape[1], device=ids.device)
        x = model.wte(ids) + model.wpe(positions)
        for block, k_cache, v_cache in zip(model.blocks, caches[0::2], caches[1::2], strict=True):
            x = block.step(x, position, k_cache, v_cache)
        return F.linear(model.ln_f(x[:, -1]), model.wte.weight)


def build(config: dict) -> nn.Module:
    return GPT2(config)


def example_inputs(config: dict, size: dict) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, config["vocab"], (size["batch"], size["seq"])),)


def decoder(model: nn.Module, config: dict) -> nn.Module:
    return Decoder(model)


def cache_shapes(config: dict, batch: int, max_len: int) -> list[tuple[int, ...]]:
    """The shapes of the caches a decode step takes: a key and a value cache per layer."""
    shape = (batch, config["heads"], max_len, config["dim"] // config["heads"])
    return [shape] * (2 * config["layers"])
