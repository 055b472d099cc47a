"""Decode attention over a static KV cache (emmy::cached_attention → attention_decode):
both paths (one pass, split-KV) on the emulator against the op's torch implementation, with
the cache past the length poisoned, and one compile serving every length."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import emmy
from emmy.base.problem_key import SiteRef
from emmy.cli import explain_lines
from emmy.families import attention_decode_path
from emmy.frontend.ops import cached_attention
from emmy.measure.bench import SiteWork, _fresh_inputs
from emmy.program import TensorSpec
from emmy.runtime.emu import EmuDevice

F32 = {"atol": 1e-5, "rtol": 1e-5}
BF16 = {"atol": 2e-2, "rtol": 2e-2}


class Decode(nn.Module):
    def forward(self, q, k_cache, v_cache, length):
        return cached_attention(q, k_cache, v_cache, length)


def poisoned_inputs(batch, heads, kv_heads, new, max_len, dim, dtype, length):
    """Random q and caches, the cache's positions from `length` on NaN: never to be read."""
    q = torch.randn(batch, heads, new, dim).to(dtype)
    k = torch.randn(batch, kv_heads, max_len, dim).to(dtype)
    v = torch.randn(batch, kv_heads, max_len, dim).to(dtype)
    poison(k, length)
    poison(v, length)
    return q, k, v, torch.tensor([length])


def poison(cache: torch.Tensor, length: int) -> None:
    cache[:, :, length:] = float("nan")


def expected(q, k, v, length):
    """The op's torch implementation, in f32 (bf16 SDPA on the CPU rounds its scores)."""
    return cached_attention(q.float(), k.float(), v.float(), length).to(q.dtype)


def compile_decode(inputs, path: str):
    return emmy.compile(
        Decode(), *inputs, device=EmuDevice(), pins=f"attention_decode_path.path={path}", db="none"
    )


def families(program) -> list[str]:
    return sorted(call.kernel.rsplit("_", 1)[0] for call in program.calls)


# (batch, heads, kv_heads, new, max_len, dim, dtype, path, lengths): each path once per new
# and per dtype, grouped-query in both, lengths 1 (or new) to max_len
CASES = [
    (1, 4, 2, 1, 256, 16, torch.float32, "one_pass", [1, 100, 256]),
    (2, 2, 1, 4, 256, 8, torch.float32, "split4", [4, 67, 256]),
    (1, 4, 2, 1, 256, 16, torch.bfloat16, "split4", [1, 200]),
    (2, 2, 2, 4, 256, 8, torch.bfloat16, "one_pass", [5, 256]),
]


@pytest.mark.parametrize(
    ("batch", "heads", "kv_heads", "new", "max_len", "dim", "dtype", "path", "lengths"), CASES
)
def test_one_compile_serves_every_length_with_the_cache_past_it_poisoned(
    batch, heads, kv_heads, new, max_len, dim, dtype, path, lengths
):
    torch.manual_seed(0)
    shape = (batch, heads, kv_heads, new, max_len, dim, dtype)
    compiled = compile_decode(poisoned_inputs(*shape, lengths[0]), path)
    split = path != "one_pass"
    found = families(compiled.program)
    assert ("attention_decode_combine" in found) == split and "attention_decode" in found
    assert not compiled.program.fallbacks
    (choice,) = [
        line for line in explain_lines(compiled.program) if "attention_decode_path" in line
    ]
    assert f"path={path}(pin)" in choice and f"max_len={max_len}," in choice
    tolerance = F32 if dtype == torch.float32 else BF16
    for length in lengths:
        inputs = poisoned_inputs(*shape, length)
        actual = compiled(*inputs)
        assert not actual.isnan().any(), f"length {length}: a poisoned position was read"
        torch.testing.assert_close(actual, expected(*inputs), **tolerance)
    assert len(compiled.specializations) == 1, "every length ran the one compile"


def test_the_default_splits_a_small_batch_over_a_long_cache():
    # 12 queries: 16 chunks of 128 positions (64 would make chunks under MIN_CHUNK)
    small = {"batch": 1, "heads": 12, "new": 1, "max_len": 2048}
    assert attention_decode_path.options_for(small) == ["one_pass", "split4", "split16"]
    assert attention_decode_path.default_for(small) == "split16"
    # 32 queries: 4 · 32 ≤ 132 multiprocessors, and 16 splits make 2 · 132 (query, chunk) pairs
    assert attention_decode_path.default_for({**small, "heads": 32, "max_len": 8192}) == "split16"
    assert attention_decode_path.default_for({**small, "max_len": 512}) == "one_pass"
    assert attention_decode_path.default_for({**small, "batch": 16}) == "one_pass"
    assert attention_decode_path.options_for({**small, "max_len": 128}) == ["one_pass"]


def test_a_head_dim_no_lanes_option_divides_falls_back_to_torch():
    torch.manual_seed(0)
    inputs = poisoned_inputs(1, 2, 2, 1, 8, 6, torch.float32, 5)
    compiled = emmy.compile(Decode(), *inputs, device=EmuDevice())
    (fallback,) = compiled.program.fallbacks.values()
    assert "head dim 6" in fallback["reason"]
    torch.testing.assert_close(compiled(*inputs), expected(*inputs), **F32)


def test_a_bench_draws_the_length_within_the_cache():
    key = "batch=1,heads=2,kv_heads=1,new=3,max_len=9,dim=4,T=f32"
    shapes = [(1, 2, 3, 4), (1, 1, 9, 4), (1, 1, 9, 4), (1,)]
    specs = [TensorSpec(f"in{i}", s, "i64" if i == 3 else "f32") for i, s in enumerate(shapes)]
    out = [TensorSpec("out0", (1, 2, 3, 4), "f32")]
    work = SiteWork("attention_decode_0", SiteRef.parse("attention_decode", key), {}, specs, out)
    lengths = {int(_fresh_inputs(work, host=False)[1][3]) for _ in range(40)}
    assert lengths <= set(range(3, 10)) and len(lengths) > 1
