"""PyTorch ops that emmy lowers to one kernel family, for models to call: torch.export
keeps each as one node (`emmy.rope.default`) instead of the slices and concatenation of
its eager form."""

from __future__ import annotations

import torch


@torch.library.custom_op("emmy::rope", mutates_args=())
def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, rotate-half form, of x [batch, seq, heads, dim] by cos and
    sin [seq, dim / 2] (as Llama applies it)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([first * c - second * s, second * c + first * s], dim=-1)


@rope.register_fake
def _(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)
