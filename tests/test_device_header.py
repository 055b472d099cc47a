"""emmy_device.cuh is valid CUDA (NVRTC, no GPU needed) and offers the same API on the emulator."""

from __future__ import annotations

import re

import pytest

from emmy.base.paths import INCLUDE_DIR
from emmy.runtime.emu import compile_emu

nvrtc = pytest.importorskip("cuda.bindings.nvrtc")

# Touches every part of the header API, including every template path of the reductions.
SOURCE = r"""
#include "emmy_device.cuh"

template <int N, class T>
__device__ void vadd(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * N;
  if (i >= n) return;
  float x[N], y[N];
  emmy::load_vec<N>(a + i, x);
  emmy::load_vec<N>(b + i, y);
  for (int k = 0; k < N; ++k) x[k] += y[k];
  emmy::store_vec<N>(c + i, x);
}

#define VADD(T, tag, N)                                                 \
  EMMY_KERNEL void vadd_##tag##_##N(const T* a, const T* b, T* c, int n) { \
    vadd<N>(a, b, c, n);                                                 \
  }                                                                      \
  EMMY_EMU_ENTRY(vadd_##tag##_##N)
#define VADDS(T, tag) \
  VADD(T, tag, 1) VADD(T, tag, 2) VADD(T, tag, 4) VADD(T, tag, 8) VADD(T, tag, 16)
VADDS(float, f32)
VADDS(emmy::f16, f16)
VADDS(emmy::bf16, bf16)

template <int G, emmy::Reduce S>
__device__ float reduce_all(float v) {
  float m = v, s = 1.0f;
  emmy::group_reduce_online<G, S>(m, s, emmy::smem());
  return emmy::group_reduce<G, S>(v, emmy::op_sum{}, emmy::smem()) +
         emmy::group_reduce<G, S>(v, emmy::op_max{}, emmy::smem()) + m + s;
}

template <emmy::Reduce S>
__device__ float reduce_groups(float v) {
  return reduce_all<1, S>(v) + reduce_all<2, S>(v) + reduce_all<4, S>(v) + reduce_all<8, S>(v) +
         reduce_all<16, S>(v) + reduce_all<32, S>(v) + reduce_all<64, S>(v) +
         reduce_all<128, S>(v) + reduce_all<256, S>(v) + reduce_all<512, S>(v) +
         reduce_all<1024, S>(v);
}

EMMY_KERNEL void __launch_bounds__(1024) everything(const float* __restrict__ x, float* y,
                                                    emmy::f16* h, emmy::bf16* b, long long n,
                                                    float alpha) {
  const unsigned t = emmy::thread_linear();
  const float v = emmy::load(x + t) * alpha;
  float r = reduce_groups<emmy::Reduce::shuffle>(v) + reduce_groups<emmy::Reduce::smem>(v);
  r += emmy::shfl_xor(v, 1) + emmy::shfl_down(v, 2, 16) + emmy::shfl_idx(v, 3, 8);
  r += emmy::lane_id() + emmy::warp_id() + emmy::warp_size + gridDim.x + blockIdx.y + blockDim.z;
  r += emmy::exp(v) + emmy::fast_exp(v) + emmy::exp2(v) + emmy::log(v) + emmy::tanh(v) + emmy::erf(v);
  r += emmy::sqrt(v) + emmy::rsqrt(v) + emmy::fmax(v, 1.0f) + emmy::fmin(v, 1.0f) + emmy::abs(v);
  r += emmy::to_float(emmy::from_float<emmy::f16>(v));
  r += emmy::to_float(emmy::from_float<emmy::bf16>(v));
  emmy::sync_threads();
  if (t < n) {
    emmy::store(y + t, r > emmy::inf() ? 0.0f : r);
    emmy::store(h + t, r);
    emmy::store(b + t, emmy::load(h + t));
  }
}
EMMY_EMU_ENTRY(everything)
"""


def _nvrtc(source: str, arch: str) -> tuple[bool, str, str]:
    """(success, log, ptx) of compiling `source` with the header for `arch`."""
    header = (INCLUDE_DIR / "emmy_device.cuh").read_bytes()
    err, prog = nvrtc.nvrtcCreateProgram(
        source.encode(), b"k.cu", 1, [header], [b"emmy_device.cuh"]
    )
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        ptx = b""
        if result == nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetPTXSize(prog)
            ptx = b" " * size
            nvrtc.nvrtcGetPTX(prog, ptx)
        ok = result == nvrtc.nvrtcResult.NVRTC_SUCCESS
        return ok, log.rstrip(b"\0").decode(), ptx.rstrip(b"\0").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_header_compiles_with_nvrtc(arch: str) -> None:
    ok, log, ptx = _nvrtc(SOURCE, arch)
    assert ok and "error" not in log.lower(), log
    # Vector accesses are real 16-byte memory operations, conversions are single instructions.
    assert re.search(r"ld\.global(\.nc)?\.v4\.(u32|f32)", ptx)
    assert re.search(r"st\.global\.v4\.(u32|f32)", ptx)
    for insn in ("cvt.rn.f16.f32", "cvt.rn.bf16.f32", "cvt.f32.f16", "shfl.sync.bfly.b32"):
        assert insn in ptx, insn
    assert "ex2.approx" in ptx  # fast_exp is __expf


def test_nvrtc_reports_errors() -> None:
    ok, log, _ = _nvrtc(SOURCE.replace("emmy::sync_threads();", "emmy::no_such_thing();"), "sm_90")
    assert not ok and "no_such_thing" in log


def test_same_source_compiles_for_the_emulator() -> None:
    assert compile_emu(SOURCE).stat().st_size > 0
