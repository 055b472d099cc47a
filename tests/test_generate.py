"""Decoding with a static KV cache: `emmy generate` on the recipes' decode programs (tiny,
f32, emu) gives torch eager's greedy tokens, token for token; the caches are the caller's
tensors, written in place; the prefill and the step compile once each."""

from __future__ import annotations

import logging

import pytest
import torch

import emmy
from emmy.base.errors import EmmyError
from emmy.cli import main
from emmy.decode import greedy, greedy_eager, prompt
from emmy.frontend.recipes import build_decoder, decode_case
from emmy.runtime.emu import EmuDevice

PROMPT, TOKENS = 8, 32


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("recipe", "batch"), [("gpt2", 1), ("llama", 2)])
def test_generate_gives_eager_greedy_tokens(capsys, recipe: str, batch: int) -> None:
    argv = ["generate", recipe, "--config", "tiny", "--prompt-len", str(PROMPT)]
    argv += ["--tokens", str(TOKENS), "--batch", str(batch), "--device", "emu", "--check"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, out + err
    assert f"check: all {batch * TOKENS} tokens equal torch eager's" in out
    assert "compiling the decode step" in err
    rows = [line.split(": ", 1)[1].split() for line in out.splitlines() if line.startswith("row ")]
    assert len(rows) == batch and all(len(row) == TOKENS for row in rows)
    # the random weights are such that greedy decoding does not repeat one token
    assert all(len(set(row)) >= 8 for row in rows), rows
    assert "tokens/s (batch" in out


def test_a_step_writes_the_callers_caches_and_compiles_once(caplog) -> None:
    case = decode_case("gpt2", "tiny", "f32", 1)
    _, step, caches = build_decoder(case)
    _, eager_step, eager_caches = build_decoder(case)
    ids = prompt(1, PROMPT, case.config["vocab"])
    count = 4
    with caplog.at_level(logging.INFO, logger="emmy"):
        generation = greedy(step, ids, caches, count, EmuDevice(), progress=lambda _: None)
    compiled = [r for r in caplog.records if r.getMessage().startswith("compiled a graph")]
    assert generation.compiles == 2 and len(compiled) == 2  # the prefill's and the step's
    expected = greedy_eager(eager_step, ids, eager_caches, count)
    assert torch.equal(generation.tokens, expected.tokens)
    written = PROMPT + count - 1  # the last token is not fed back
    for cache, reference in zip(caches, eager_caches, strict=True):
        assert cache[:, :, written - 1].abs().sum() > 0  # the last step's row reached it
        assert not cache[:, :, written:].any()  # and nothing beyond
        torch.testing.assert_close(cache, reference, rtol=1e-4, atol=1e-5)


def test_the_new_value_of_a_mutated_input_goes_into_its_buffer() -> None:
    case = decode_case("gpt2", "tiny", "f32", 1)
    _, step, caches = build_decoder(case)
    ids = prompt(1, PROMPT, case.config["vocab"])
    program = emmy.compile(step, ids, torch.tensor([0]), *caches, device=EmuDevice()).program
    assert program.mutated_inputs == [spec.name for spec in program.inputs[2:]]
    for name in program.mutated_inputs:
        writers = [c for c in program.calls if c.buffers[-1] == name]
        assert len(writers) == 1  # the index_copy writes the cache itself: no copy after it
        assert program.kernels[writers[0].kernel].site.family == "index_copy"
    assert not {spec.name for spec in program.outputs} & set(program.mutated_inputs)


class ReadsAfterWriting(torch.nn.Module):
    """Writes its input's softmax over it, by a kernel that is not known to write over its
    input (it reads a whole row before it writes), and returns a product of the new value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.copy_(torch.softmax(x, -1))
        return x * 3.0


class CountsInPlace(torch.nn.Module):
    """A counter's `add_` and a transposed write: the elementwise kernel writes over a
    same-shape input in place; a transpose is read into a temporary first."""

    def forward(self, counter: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        counter.add_(1)
        x.copy_(x.t() + 1.0)
        return x * 2.0


def test_a_mutated_input_whose_kernel_reads_it_is_copied_back() -> None:
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    compiled = emmy.compile(ReadsAfterWriting(), x.clone(), device=EmuDevice())
    program = compiled.program
    copies = [e for e in program.fallbacks.values() if e["target"] == "aten.clone.default"]
    assert program.mutated_inputs == ["in0"] and len(copies) == 1
    given = x.clone()
    result = compiled(given)
    torch.testing.assert_close(given, torch.softmax(x, -1))
    torch.testing.assert_close(result, torch.softmax(x, -1) * 3)


def test_elementwise_kernels_write_over_a_same_shape_input() -> None:
    counter, x = torch.tensor(5), torch.arange(9, dtype=torch.float32).reshape(3, 3)
    compiled = emmy.compile(CountsInPlace(), counter.clone(), x.clone(), device=EmuDevice())
    assert compiled.program.mutated_inputs == ["in0", "in1"]
    assert compiled.program.fallbacks == {}  # no copy after either write
    given = (counter.clone(), x.clone())
    result = compiled(*given)
    assert int(given[0]) == 6
    torch.testing.assert_close(given[1], x.t() + 1.0)
    torch.testing.assert_close(result, (x.t() + 1.0) * 2.0)


def test_help_lists_generate(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "generate" in capsys.readouterr().out
    code, _, err = run_cli(capsys, "generate", "gpt2", "--config", "tiny", "--tokens", "64")
    assert code == 2 and "the cache holds 64" in err
    code, _, err = run_cli(capsys, "compile", "gpt2", "--decode", "--dim", "seq=3")
    assert code == 2 and "--decode takes the dims batch and max_len, not seq" in err
    code, _, err = run_cli(capsys, "generate", "mlp", "--config", "tiny")
    assert code == 2 and "recipe mlp has no decode program for config 'tiny'" in err


class WritesItsBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache.add_(x)
        return self.cache * 2.0


def test_a_model_writing_its_own_buffer_is_one_line_naming_it() -> None:
    with pytest.raises(EmmyError, match="the model writes its own cache in place"):
        emmy.compile(WritesItsBuffer(), torch.ones(4), device=EmuDevice())
