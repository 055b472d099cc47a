"""Mixtures of experts (Mixtral, OLMoE, Qwen2-MoE from transformers, tiny) called as their
users call them, `model(input_ids=..., attention_mask=...)` with use_cache at its default,
through `emmy.compile` and `torch.compile(backend=emmy.api.backend(...))` on the emulator:
every tensor of the output matches eager's (tests/test_hf_default_call.py, which runs them
beside the dense transformers). transformers' default experts implementation
(`grouped_mm`) routes by topk, sorts the picks by expert, counts them per expert (histc),
offsets them (cumsum) and multiplies each expert's rows by its weights in one grouped
matmul (`transformers::grouped_mm_fallback` on CPU): graph.grouped_matmul. Every op runs
in emmy's kernels: none falls back to torch."""

from __future__ import annotations

import collections

import torch

import emmy
from emmy.runtime.emu import EmuDevice


def _fell_back(programs: list) -> dict[str, int]:
    counts = collections.Counter(
        entry["target"] for program in programs for entry in program.fallbacks.values()
    )
    return dict(counts)


class Routing(torch.nn.Module):
    """A router's ops on their own, at shapes and values the tiny models do not reach:
    ties, a descending sort of floats, bf16 picks, an expert no token picks, a histogram
    with elements outside its range; in-place writes of tensors of its own (torch.export
    keeps them: they convert as their functional forms)."""

    def forward(self, logits: torch.Tensor, ids: torch.Tensor, x: torch.Tensor):
        weights, picks = torch.topk(logits.softmax(-1), 2, dim=-1)
        weights /= weights.sum(-1, keepdim=True)  # written in place, as Mixtral's router
        smallest = torch.topk(logits.to(torch.bfloat16), 3, dim=-1, largest=False)
        by_expert, order = torch.sort(ids.reshape(-1))
        descending = torch.sort(logits, descending=True)
        counts = torch.histc(by_expert.float(), bins=5, min=0, max=4)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.shape[0])
        return (
            weights, picks, *smallest, by_expert, order, *descending, counts, offsets,
            inverse, order // 2, torch.histc(x, bins=7, min=-1.0, max=1.5),
        )  # fmt: skip


def test_routing_ops_match_eager_in_emmy_kernels() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, generator=generator)
    logits[0, 3] = logits[0, 1]  # a tie: the first place comes first, as torch's topk
    ids = torch.randint(0, 4, (6, 2), generator=generator)  # expert 4 picked by none
    ids[0] = torch.tensor([2, 2])  # sort's ties, in their order
    x = torch.randn(4, 5, generator=generator)
    x[0, :2] = torch.tensor([1.5, -1.0])  # the range's ends; others fall outside it
    inputs = (logits, ids, x)
    compiled = emmy.compile(Routing(), *inputs, device=EmuDevice(), db="none")
    assert _fell_back([compiled.program]) == {}
    for got, want in zip(compiled(*inputs), Routing()(*inputs), strict=True):
        torch.testing.assert_close(got, want)  # integers exactly
