"""Hugging Face `generate` with a static KV cache through the emmy backend on the emulator:
`model.forward = torch.compile(model.forward, backend=...)`, greedy, 32 new tokens, tiny
GPT-2 and Llama (f32), for batch 1 and for batch 2 with left padding. The tokens equal
eager's `generate` token for token; each batch compiles two programs (the prefill and one
decode step that every later step reuses), and every op runs in emmy's kernels, the cache
update (`index_copy` at the cache positions) included.

One model is compiled once per test module; its batch-1 and batch-2 runs are the cases."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

import emmy.api
from emmy.program import Program
from emmy.runtime.emu import EmuDevice

NEW_TOKENS = 32
PROMPT = 6
VOCAB = 256
LAYERS = 2
#: the init's spread: at the default (0.02) the logits are flat and greedy decoding
#: repeats one id, which would hide a wrong token
SPREAD = 0.2
CONFIGS = {
    "gpt2": lambda: GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=LAYERS, n_head=4,
        initializer_range=SPREAD, bos_token_id=None, eos_token_id=None,
    ),
    "llama": lambda: LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
        initializer_range=SPREAD, bos_token_id=None, eos_token_id=None,
    ),
}  # fmt: skip


def prompts(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` prompts of PROMPT ids; the second row is left-padded by 2 (mask 0 there)."""
    ids = torch.randint(1, VOCAB, (batch, PROMPT), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    if batch > 1:
        ids[1, :2] = 0
        mask[1, :2] = 0
    return ids, mask


def generate(model: torch.nn.Module, batch: int) -> torch.Tensor:
    ids, mask = prompts(batch)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            cache_implementation="static",
        )
    return out[:, PROMPT:]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def runs(request) -> dict:
    """Per batch: eager's new tokens, the compiled model's, and the programs its run
    compiled."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIGS[request.param]()).eval()
    model.generation_config.pad_token_id = 0
    eager = {batch: generate(model, batch) for batch in (1, 2)}
    programs: list[Program] = []
    backend = emmy.api.backend(device=EmuDevice(), programs=programs)
    model.forward = torch.compile(model.forward, backend=backend)
    compiled, compiled_programs = {}, {}
    for batch in (1, 2):
        start = len(programs)
        compiled[batch] = generate(model, batch)
        compiled_programs[batch] = programs[start:]
    return {"eager": eager, "compiled": compiled, "programs": compiled_programs}


@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_tokens_equal_eager(runs: dict, batch: int) -> None:
    expected, actual = runs["eager"][batch], runs["compiled"][batch]
    assert expected.shape == (batch, NEW_TOKENS)
    # the weights give varied tokens, so that a wrong logit changes some
    assert all(len(set(row.tolist())) > NEW_TOKENS // 4 for row in expected)
    assert torch.equal(actual, expected), f"emmy {actual.tolist()} != eager {expected.tolist()}"


@pytest.mark.parametrize("batch", [1, 2])
def test_decode_steps_reuse_one_program_and_run_natively(runs: dict, batch: int) -> None:
    programs = runs["programs"][batch]
    # the prefill over the prompt, then one decode step for all NEW_TOKENS - 1 steps
    assert [program.inputs[0].shape for program in programs] == [(batch, PROMPT), (batch, 1)]
    for program in programs:
        assert program.fallbacks == {}, f"ops through torch: {program.fallbacks}"
        assert any(call.kernel.startswith("index_copy") for call in program.calls)
    # the decode step writes the caches (k and v per layer) and the cache's length counters
    # in place: AOTAutograd keeps the mutations in the graph, and copies nothing back
    (_, step) = programs
    written = {spec.name for spec in step.inputs if spec.name in step.mutated_inputs}
    caches = [s for s in step.inputs if s.name in written and len(s.shape) == 4]
    assert len(caches) == 2 * LAYERS, step.mutated_inputs
    assert not written & {o.name for o in step.outputs}
