"""A Llama-style decoder: RMSNorm, causal grouped-query attention with rotary embeddings
(emmy's rope op, rotate-half form), a SwiGLU MLP, residual adds, a final RMSNorm and the
language-model head. Weights are random.

Its decode program (`decoder`) runs the same layers over a static KV cache: a step takes
new token ids, the position they start at and a key and a value cache per layer (of the
kv_heads), writes the new keys and values into the caches in place and returns the last
token's logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from emmy.frontend.ops import cached_attention, rope

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
    # 1.1B parameters, for decode benchmarks: Llama 3.2 1B's layers (16, grouped-query
    # attention of 32 heads over 8) with a 32000-token vocabulary; no forward sizes, so the
    # compile snapshot does not compile it
    "1b": {
        "vocab": 32000,
        "dim": 2048,
        "heads": 32,
        "kv_heads": 8,
        "hidden": 8192,
        "layers": 16,
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

#: per config, the decode program's cache: its maximum length (up to max_seq)
DECODE = {"tiny": {"max_len": 64}, "small": {"max_len": 4096}, "1b": {"max_len": 2048}}


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

    def step(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position: torch.Tensor,
        caches: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """forward for new tokens at `position` on (cos and sin at their positions): their
        keys and values are written into the caches, and they attend over the cache."""
        batch, new, dim = x.shape
        q = rope(self.q_proj(x).view(batch, new, self.heads, self.head_dim), cos, sin)
        k = rope(self.k_proj(x).view(batch, new, self.kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(batch, new, self.kv_heads, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        positions = position + torch.arange(new, device=x.device)
        k_cache, v_cache = caches
        k_cache.index_copy_(2, positions, k)
        v_cache.index_copy_(2, positions, v)
        y = cached_attention(q, k_cache, v_cache, position + new)
        return self.o_proj(y.transpose(1, 2).reshape(batch, new, dim))


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

    def step(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        position: torch.Tensor,
        caches: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        x = x + self.attn.step(self.input_norm(x), cos, sin, position, caches)
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


class Decoder(nn.Module):
    """A decode step of a Llama (its own modules, so the same weights): ids [batch, new]
    at `position` (int64 [1]) on, the caches k0, v0, k1, v1, ... [batch, kv_heads,
    max_len, head_dim]; returns the logits [batch, vocab] of the last new token."""

    def __init__(self, model: Llama) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, position: torch.Tensor, *caches: torch.Tensor):
        model = self.model
        positions = position + torch.arange(ids.shape[1], device=ids.device)
        cos, sin = model.cos[positions], model.sin[positions]
        x = model.embed(ids)
        pairs = zip(caches[0::2], caches[1::2], strict=True)
        for layer, pair in zip(model.layers, pairs, strict=True):
            x = layer.step(x, cos, sin, position, pair)
        return model.lm_head(model.norm(x[:, -1]))


def build(config: dict) -> nn.Module:
    return Llama(config)


def example_inputs(config: dict, size: dict) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, config["vocab"], (size["batch"], size["seq"])),)


def decoder(model: nn.Module, config: dict) -> nn.Module:
    return Decoder(model)


def cache_shapes(config: dict, batch: int, max_len: int) -> list[tuple[int, ...]]:
    """The shapes of the caches a decode step takes: a key and a value cache per layer."""
    shape = (batch, config["kv_heads"], max_len, config["dim"] // config["heads"])
    return [shape] * (2 * config["layers"])
