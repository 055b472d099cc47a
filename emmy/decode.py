"""Greedy decoding of a recipe's decode program with a static KV cache: the prefill of a
prompt writes the caches, then each step feeds the last token and writes one row of each
cache in place. Two programs serve every step: the prefill's (new = the prompt's length)
and the step's (new = 1); the position is a runtime input, so the step compiles once.

`greedy` runs the step module through emmy, `greedy_eager` through torch on its own
caches: the same module, so their tokens compare token for token.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from emmy import api
from emmy.base.errors import EmmyError
from emmy.runtime.device import Device

#: the seed of a generated prompt
PROMPT_SEED = 0


@dataclass
class Generation:
    """Greedy tokens [batch, count] and what producing them took."""

    tokens: torch.Tensor
    prefill_s: float
    decode_s: float
    #: the programs compiled: the prefill's and the step's
    compiles: int

    @property
    def steps(self) -> int:
        return self.tokens.shape[1] - 1

    def tokens_per_s(self) -> float:
        """Decode tokens per second, over the batch (the prefill's token not counted)."""
        if self.decode_s <= 0:
            return 0.0
        return self.steps * self.tokens.shape[0] / self.decode_s


def prompt(batch: int, length: int, vocab: int, seed: int = PROMPT_SEED) -> torch.Tensor:
    """A random prompt [batch, length] of token ids, the same for a seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=generator)


def check_lengths(prompt_len: int, count: int, max_len: int) -> None:
    if prompt_len < 1 or count < 1:
        raise EmmyError(f"--prompt-len and --tokens must be at least 1, not {prompt_len}, {count}")
    if prompt_len + count - 1 > max_len:
        raise EmmyError(
            f"a prompt of {prompt_len} and {count} tokens need {prompt_len + count - 1} cache "
            f"rows; the cache holds {max_len}"
        )


def _position(value: int, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor([value], dtype=torch.int64, device=like.device)


def _next(logits: object) -> torch.Tensor:
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"a decoder step returns its logits, not {type(logits).__name__}")
    return logits.argmax(-1, keepdim=True)


def _now(like: torch.Tensor) -> float:
    """The time once the device's queued work is done (a GPU runs ahead of the host)."""
    if like.is_cuda:
        torch.cuda.synchronize(like.device)
    return time.perf_counter()


def greedy(
    step: torch.nn.Module,
    ids: torch.Tensor,
    caches: Sequence[torch.Tensor],
    count: int,
    device: Device,
    progress: Callable[[str], None] | None = None,
    **options,
) -> Generation:
    """`count` greedy tokens after the prompt `ids` [batch, P], through emmy on `device`:
    the prefill's program and the step's are compiled first (`progress` told of each),
    then run; `caches` (zeroed, the step's) are written in place. `options` as
    emmy.compile's."""
    say = progress or (lambda line: print(line, file=sys.stderr))
    batch, length = ids.shape
    prefill_inputs, step_inputs = decode_examples(ids, caches)
    say(f"compiling the prefill (ids [{batch}, {length}])")
    compiled = api.compile(step, *prefill_inputs, device=device, **options)
    say(f"compiling the decode step (ids [{batch}, 1])")
    compiled.specialize(step_inputs)
    tokens, prefill, decode = _loop(compiled, ids, caches, count)
    return Generation(tokens, prefill, decode, len(compiled.specializations))


def decode_examples(
    ids: torch.Tensor, caches: Sequence[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The example inputs of the two programs `greedy` compiles for a prompt `ids`
    [batch, P]: the prefill's (the prompt at position 0) and the step's (one token at
    position P)."""
    batch, length = ids.shape
    # a fresh tensor, not a slice of the prompt: torch.export makes a strided input's
    # dims symbolic
    first = torch.zeros((batch, 1), dtype=ids.dtype, device=ids.device)
    return [ids, _position(0, ids), *caches], [first, _position(length, ids), *caches]


def greedy_eager(
    step: Callable[..., object],
    ids: torch.Tensor,
    caches: Sequence[torch.Tensor],
    count: int,
) -> Generation:
    """The same greedy decoding through torch (the module eagerly, or a torch.compile of
    it), writing `caches` in place."""
    with torch.no_grad():
        tokens, prefill, decode = _loop(step, ids, caches, count)
    return Generation(tokens, prefill, decode, 0)


def _loop(
    step: Callable[..., object],
    ids: torch.Tensor,
    caches: Sequence[torch.Tensor],
    count: int,
) -> tuple[torch.Tensor, float, float]:
    """Greedy decoding by `step` (ids, position, *caches → logits): the prompt's prefill,
    then one token a step; the new tokens and the seconds of the prefill and the steps."""
    length = ids.shape[1]
    start = _now(ids)
    token = _next(step(ids, _position(0, ids), *caches))
    prefill = _now(ids) - start
    tokens = [token]
    start = _now(ids)
    for offset in range(count - 1):
        token = _next(step(token, _position(length + offset, ids), *caches))
        tokens.append(token)
    return torch.cat(tokens, dim=1), prefill, _now(ids) - start


def first_mismatch(actual: torch.Tensor, expected: torch.Tensor) -> tuple[int, int] | None:
    """The (row, token) of the first token that differs, or None where all are equal."""
    different = (actual != expected).nonzero()
    if not len(different):
        return None
    row, index = (int(v) for v in different[0])
    return row, index


class LMConfig(Protocol):
    vocab_size: int


@runtime_checkable
class CausalLM(Protocol):
    """A Hugging Face causal language model, as decoding runs it: its config, its forward
    (compiled in place) and its `generate`."""

    config: LMConfig
    forward: Callable[..., Any]

    def generate(self, *args: Any, **kwargs: Any) -> torch.Tensor: ...


class _Clock:
    """A streamer for Hugging Face's generate: the time of each token it is handed (the
    prompt first, then each new token)."""

    def __init__(self, like: torch.Tensor) -> None:
        self.like = like
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(_now(self.like))

    def end(self) -> None:
        pass


def hf_greedy(model: CausalLM, ids: torch.Tensor, count: int) -> Generation:
    """`count` greedy tokens of a Hugging Face causal LM after `ids`, through its
    `generate` with a static cache (as its forward runs: eagerly, or compiled)."""
    clock = _Clock(ids)
    with torch.no_grad():
        start = _now(ids)
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=count,
            min_new_tokens=count,
            do_sample=False,
            cache_implementation="static",
            streamer=clock,
        )
    first = clock.times[1] if len(clock.times) > 1 else _now(ids)
    return Generation(out[:, ids.shape[1] :], first - start, clock.times[-1] - first, 0)


def hf_greedy_emmy(
    model: CausalLM, ids: torch.Tensor, count: int, device: Device, strict: bool = False
) -> Generation:
    """hf_greedy with the model's forward compiled by torch.compile with emmy's backend on
    `device`: a first pass compiles (each graph once), a second is timed. `strict` raises
    where a graph fails to compile instead of running it eagerly."""
    programs: list = []
    model.forward = torch.compile(
        model.forward, backend=api.backend(device=device, programs=programs, strict=strict)
    )
    hf_greedy(model, ids, count)
    generation = hf_greedy(model, ids, count)
    generation.compiles = len(programs)
    return generation
