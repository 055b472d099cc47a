"""The torch side of a Hugging Face model directory (emmy.frontend.hf builds the model):
the module that calls the model with ids and a mask and returns its first output, and the
example inputs."""

from __future__ import annotations

from collections.abc import Mapping

import torch


class FirstOutput(torch.nn.Module):
    """A Hugging Face model called with ids and a mask, returning its first output (the
    logits of a language model, the last hidden state of a bare model)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        output = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
        return output[0]


def example_inputs(vocab: int, size: Mapping[str, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """`input_ids` [batch, seq] drawn with seed 0, and an int64 `attention_mask` whose
    second row's last quarter (at least one token) is padding."""
    batch, seq = size["batch"], size["seq"]
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if batch > 1 and seq > 1:
        mask[1, seq - max(1, seq // 4) :] = 0
    return ids, mask
