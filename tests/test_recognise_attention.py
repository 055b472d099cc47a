"""recognise-attention on the emulator: a causal softmax between two matmuls, recognised as
one fused causal attention, computes what the ops as written compute (they stay unfused
where the probabilities are returned too), and what a causal attention is."""

from __future__ import annotations

import numpy as np

from emmy.base.compile_options import CompileOptions, Pins
from emmy.base.identity import EMU
from emmy.compiler import compile_graph
from emmy.frontend.cache import parse_graph
from emmy.runtime.emu import EmuDevice

# 6 queries over 9 keys: causal alignment matters where q_len != kv_len
Q, K, S, P = "tensor<1x2x6x8xf32>", "tensor<1x2x9x8xf32>", "tensor<1x2x6x9xf32>", "tensor<f32>"


def written_out_attention(return_probabilities: bool) -> str:
    """softmax(q kᵀ · 0.5, causal) v as two matmuls and a causal softmax."""
    results = f"{Q}, {S}" if return_probabilities else Q
    returned = "%o, %p : " + results if return_probabilities else "%o : " + Q
    return f"""
func.func @main(%q : {Q}, %k : {K}, %v : {K}) -> ({results}) {{
  %s = graph.matmul %q, %k {{transpose_b}} : {Q}, {K} -> {S}
  %c = graph.constant 5.000000e-01 : f32 -> {P}
  %t = graph.mul %s, %c : {S}, {P} -> {S}
  %p = graph.softmax %t {{dim = -1 : i64, causal}} : {S} -> {S}
  %o = graph.matmul %p, %v : {S}, {K} -> {Q}
  func.return {returned}
}}
"""


def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    scores = (q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)) * scale
    q_len, kv_len = scores.shape[-2:]
    hidden = np.arange(kv_len)[None, :] > np.arange(q_len)[:, None]
    scores = np.where(hidden, -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (weights / weights.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)


def families(program) -> list[str]:
    return sorted(program.kernels[call.kernel].site.family for call in program.calls)


def test_a_causal_softmax_between_matmuls_runs_as_a_causal_attention() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 6, 8), dtype=np.float32)
    k, v = (rng.standard_normal((1, 2, 9, 8), dtype=np.float32) for _ in range(2))
    device = EmuDevice()

    fused = compile_graph(
        parse_graph(written_out_attention(False), "<causal>"),
        CompileOptions(target=EMU, db=None, pins=Pins({"path": "fused"})),
    )
    assert families(fused) == ["attention"]
    assert "causal=yes" in str(fused.kernels[fused.calls[0].kernel].site.key)
    as_written = compile_graph(
        parse_graph(written_out_attention(True), "<causal, probabilities returned>"),
        CompileOptions(target=EMU, db=None),
    )
    assert "attention" not in families(as_written)

    (recognised,) = fused.run(device, [q, k, v])
    unfused, _ = as_written.run(device, [q, k, v])
    np.testing.assert_allclose(recognised, unfused, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(recognised, causal_attention(q, k, v, 0.5), atol=1e-5, rtol=1e-5)
