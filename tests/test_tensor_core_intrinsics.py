"""Tensor-core, ldmatrix and cp.async intrinsics of emmy_device.cuh: the emulator follows the
PTX ISA's per-lane layouts, and the same source compiles with NVRTC for sm_80 and sm_90.

The layouts in the kernels below are written out from the PTX ISA ("Matrix Fragments for
mma.m16n8k16 with floating point type", "ldmatrix"), independently of the header. Every kernel
also runs on a GPU when there is one; checks of the emulator's deferred copies are emu-only.
All kernels live in one source: the module costs one g++ and two NVRTC invocations.
"""

from __future__ import annotations

import numpy as np
import pytest

from emmy.base.errors import KernelLaunchError
from emmy.runtime.device import BufferArg, Device, Launch, ScalarArg
from emmy.runtime.emu import EmuDevice, compile_emu

SOURCE = r"""
#include "emmy_device.cuh"

using emmy::frag_a;
using emmy::frag_b;
using emmy::frag_c;

// Fragments straight from global memory: A 16x16 and B 16x8 (k x n), both row-major.
template <class T>
__device__ void load_frags(const T* A, const T* B, const float* C, frag_a& a, frag_b& b,
                           frag_c& c) {
  const int l = emmy::lane_id(), g = l / 4, t = l % 4;
  for (int r = 0; r < 4; ++r) {  // a(2r), a(2r+1)
    const int row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
    a.x[r] = A[row * 16 + col].bits | unsigned(A[row * 16 + col + 1].bits) << 16;
  }
  for (int r = 0; r < 2; ++r) {  // b(2r), b(2r+1)
    const int k = 2 * t + 8 * r;
    b.x[r] = B[k * 8 + g].bits | unsigned(B[(k + 1) * 8 + g].bits) << 16;
  }
  for (int i = 0; i < 4; ++i) c.x[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
}

__device__ void store_frag(float* D, const frag_c& d) {
  const int l = emmy::lane_id(), g = l / 4, t = l % 4;
  for (int i = 0; i < 4; ++i) D[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2] = d.x[i];
}

// Warp w multiplies its own tiles w + 1 times into the accumulator: D = C + (w + 1) A B.
template <class T>
__device__ void mma_global(const T* A, const T* B, const float* C, float* D) {
  const int w = emmy::warp_id();
  frag_a a;
  frag_b b;
  frag_c c;
  load_frags(A + 256 * w, B + 128 * w, C + 128 * w, a, b, c);
  for (int i = 0; i <= w; ++i) emmy::mma_16816<T>(c, a, b, c);
  store_frag(D + 128 * w, c);
}

// The same through shared memory and ldmatrix. Rows are padded so that no layout lines up by
// accident. b_kn: B is kept k x n (row-major) and loaded transposed; else n x k, loaded as is.
template <class T>
__device__ void mma_ldmatrix(const T* A, const T* B, const float* C, float* D, int b_kn) {
  T* As = reinterpret_cast<T*>(emmy::smem());  // 16 rows of 24
  T* Bs = As + 16 * 24;                        // k x n: 16 rows of 16; n x k: 8 rows of 24
  const int l = emmy::lane_id();
  for (int i = l; i < 256; i += 32) As[i / 16 * 24 + i % 16] = A[i];
  for (int i = l; i < 128; i += 32) {
    const int k = i / 8, n = i % 8;
    if (b_kn) Bs[k * 16 + n] = B[i];
    else Bs[n * 24 + k] = B[i];
  }
  emmy::sync_threads();
  frag_a a;
  frag_b b;
  frag_c c;
  // matrices: rows 0-7 | 8-15 of columns 0-7, then of columns 8-15
  emmy::ldmatrix<4>(a.x, As + l % 16 * 24 + l / 16 * 8);
  if (b_kn) emmy::ldmatrix_trans<2>(b.x, Bs + l % 16 * 16);  // rows k 0-7 | 8-15
  else emmy::ldmatrix<2>(b.x, Bs + l % 8 * 24 + l / 8 % 2 * 8);  // k 0-7 | 8-15 of rows n
  const int g = l / 4, t = l % 4;
  for (int i = 0; i < 4; ++i) c.x[i] = C[(g + 8 * (i / 2)) * 8 + 2 * t + i % 2];
  emmy::mma_16816<T>(c, a, b, c);
  store_frag(D, c);
}

#define KERNELS(T, tag)                                                                  \
  EMMY_KERNEL void mma_global_##tag(const T* A, const T* B, const float* C, float* D) {  \
    mma_global(A, B, C, D);                                                               \
  }                                                                                       \
  EMMY_EMU_ENTRY(mma_global_##tag)                                                        \
  EMMY_KERNEL void mma_ldmatrix_##tag(const T* A, const T* B, const float* C, float* D,  \
                                      int b_kn) {                                         \
    mma_ldmatrix(A, B, C, D, b_kn);                                                       \
  }                                                                                       \
  EMMY_EMU_ENTRY(mma_ldmatrix_##tag)
KERNELS(emmy::f16, f16)
KERNELS(emmy::bf16, bf16)

// Raw ldmatrix words: 4 matrices of 8x8 at scattered, 16-byte-aligned shared rows; lanes that
// supply no row address pass a null one. out[variant][lane][matrix], variants x1 x2 x4, then
// the same transposed.
EMMY_KERNEL void ldmatrix_raw(const unsigned short* M, unsigned* out) {
  unsigned short* s = reinterpret_cast<unsigned short*>(emmy::smem());  // 32 rows of 40
  const int l = emmy::lane_id();
  for (int i = l; i < 256; i += 32) s[(i / 8 * 7 % 32) * 40 + 8 + i % 8] = M[i];
  emmy::sync_threads();
  const unsigned short* row = s + (l * 7 % 32) * 40 + 8;  // row l % 8 of matrix l / 8
  unsigned r1[1], r2[2], r4[4];
  emmy::ldmatrix<1>(r1, l < 8 ? row : nullptr);
  emmy::ldmatrix<2>(r2, l < 16 ? row : nullptr);
  emmy::ldmatrix<4>(r4, row);
  out[(0 * 32 + l) * 4] = r1[0];
  for (int m = 0; m < 2; ++m) out[(1 * 32 + l) * 4 + m] = r2[m];
  for (int m = 0; m < 4; ++m) out[(2 * 32 + l) * 4 + m] = r4[m];
  emmy::ldmatrix_trans<1>(r1, l < 8 ? row : nullptr);
  emmy::ldmatrix_trans<2>(r2, l < 16 ? row : nullptr);
  emmy::ldmatrix_trans<4>(r4, row);
  out[(3 * 32 + l) * 4] = r1[0];
  for (int m = 0; m < 2; ++m) out[(4 * 32 + l) * 4 + m] = r2[m];
  for (int m = 0; m < 4; ++m) out[(5 * 32 + l) * 4 + m] = r4[m];
}
EMMY_EMU_ENTRY(ldmatrix_raw)

// A tile of 7 * blockDim floats through shared memory with all three copy sizes; each thread
// writes back words other threads copied. early: the first word, read before the wait (a race).
EMMY_KERNEL void cp_async_tile(const float* src, float* dst, float* early, int wait_all) {
  float* s = reinterpret_cast<float*>(emmy::smem());
  const int t = threadIdx.x, n = blockDim.x;
  emmy::cp_async<16>(s + 4 * t, src + 4 * t);
  emmy::cp_async<8>(s + 4 * n + 2 * t, src + 4 * n + 2 * t);
  emmy::cp_async<4>(s + 6 * n + t, src + 6 * n + t);
  if (wait_all) {
    early[t] = s[4 * t];
    emmy::cp_async_wait_all();
  } else {
    emmy::cp_async_commit();
    early[t] = s[4 * t];
    emmy::cp_async_wait<0>();
  }
  emmy::sync_threads();
  for (int i = (t + 5) % n; i < 7 * n; i += n) dst[i] = s[i];
}
EMMY_EMU_ENTRY(cp_async_tile)

// Group bookkeeping, one thread: snapshots of s[0..11] after each step (60 words), then a
// zero-filled copy of 6 bytes into s[12..15] (4 words).
EMMY_KERNEL void cp_async_groups(const float* src, float* out) {
  float* s = reinterpret_cast<float*>(emmy::smem());
  emmy::cp_async<16>(s, src);
  emmy::cp_async_commit();  // group 0
  emmy::cp_async<16>(s + 4, src + 4);
  emmy::cp_async_commit();  // group 1
  emmy::cp_async<16>(s + 8, src + 8);  // not committed
  for (int i = 0; i < 12; ++i) out[i] = s[i];
  emmy::cp_async_wait<2>();
  for (int i = 0; i < 12; ++i) out[12 + i] = s[i];
  emmy::cp_async_wait<1>();
  for (int i = 0; i < 12; ++i) out[24 + i] = s[i];
  emmy::cp_async_wait<0>();
  for (int i = 0; i < 12; ++i) out[36 + i] = s[i];
  emmy::cp_async_wait_all();
  for (int i = 0; i < 12; ++i) out[48 + i] = s[i];
  emmy::cp_async<16>(s + 12, src + 12, 6);
  emmy::cp_async_wait_all();
  for (int i = 12; i < 16; ++i) out[48 + i] = s[i];
}
EMMY_EMU_ENTRY(cp_async_groups)

// More copies in flight than the emulator queues (it performs the oldest early).
EMMY_KERNEL void cp_async_many(const float* src, float* out, int n) {
  float* s = reinterpret_cast<float*>(emmy::smem());
  for (int i = 0; i < n; ++i) {
    emmy::cp_async<4>(s + i, src + i);
    if (i % 10 == 9) emmy::cp_async_commit();
  }
  emmy::cp_async_wait<0>();  // the last n % 10 copies are in no group yet
  emmy::cp_async_wait_all();
  for (int i = 0; i < n; ++i) out[i] = s[i];
}
EMMY_EMU_ENTRY(cp_async_many)

EMMY_KERNEL void pack(const float* x, unsigned* h, unsigned* b, float* hx, float* bx) {
  const int i = threadIdx.x;
  h[i] = emmy::pack_half2<emmy::f16>(x[2 * i], x[2 * i + 1]);
  b[i] = emmy::pack_half2<emmy::bf16>(x[2 * i], x[2 * i + 1]);
  emmy::unpack<emmy::f16>(h[i], hx[2 * i], hx[2 * i + 1]);
  emmy::unpack<emmy::bf16>(b[i], bx[2 * i], bx[2 * i + 1]);
}
EMMY_EMU_ENTRY(pack)

// Misuse the emulator reports: a warp of 16 threads, lanes at different collectives.
EMMY_KERNEL void mma_misuse(float* D, int diverge) {
  frag_a a = {};
  frag_b b = {};
  frag_c c = {};
  if (diverge && emmy::lane_id() < 8) emmy::mma_16816<emmy::f16>(c, a, b, c);
  else emmy::mma_16816<emmy::f16>(c, a, b, c);
  store_frag(D, c);
}
EMMY_EMU_ENTRY(mma_misuse)
"""

HALF = ["f16", "bf16"]


def _devices() -> list:
    return ["emu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(scope="module")
def emu_dev() -> EmuDevice:
    compile_emu(SOURCE)
    return EmuDevice(workers=2)


@pytest.fixture(scope="module", params=_devices())
def dev(request, emu_dev: EmuDevice) -> Device:
    if request.param == "emu":
        yield emu_dev
    else:
        from emmy.runtime.cuda import CudaDevice

        with CudaDevice() as gpu:
            yield gpu


def _launch(kernel: str, block: int, *args, smem: int = 0) -> Launch:
    return Launch(kernel, (1, 1, 1), (block, 1, 1), smem, tuple(args))


def _bufs(*names: str) -> tuple[BufferArg, ...]:
    return tuple(BufferArg(n) for n in names)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, round to nearest even (no NaNs here)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _halves(rng: np.random.Generator, shape: tuple, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """Random nonzero values as (bits, float32 values) of f16 or bf16."""
    x = rng.uniform(0.25, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    if tag == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint16), h.astype(np.float32)
    bits = bf16_bits(x.astype(np.float32))
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def _check_mma(got: np.ndarray, want: np.ndarray) -> None:
    # Products are exact in f32; only the order and rounding of the 16-term sums differ.
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3 * np.abs(want).max())
    # tight as well: any misplaced element would be off by O(1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("tag", HALF)
@pytest.mark.parametrize("warps", [1, 4])
def test_mma_from_global(dev: Device, tag: str, warps: int) -> None:
    rng = np.random.default_rng(10 + warps)
    a_bits, a = _halves(rng, (warps, 16, 16), tag)
    b_bits, b = _halves(rng, (warps, 16, 8), tag)
    c = rng.uniform(-1, 1, (warps, 16, 8)).astype(np.float32)
    d = np.full((warps, 16, 8), np.nan, np.float32)
    buffers = {"A": a_bits, "B": b_bits, "C": c, "D": d}
    launch = _launch(f"mma_global_{tag}", 32 * warps, *_bufs("A", "B", "C", "D"))
    dev.run(SOURCE, [launch], buffers, schedule="reverse")  # warps interleave at each mma
    prod = a.astype(np.float64) @ b.astype(np.float64)
    want = c + (np.arange(warps) + 1)[:, None, None] * prod
    _check_mma(d, want)


@pytest.mark.parametrize("tag", HALF)
@pytest.mark.parametrize("b_kn", [1, 0])
def test_mma_through_ldmatrix(dev: Device, tag: str, b_kn: int) -> None:
    rng = np.random.default_rng(20 + b_kn)
    a_bits, a = _halves(rng, (16, 16), tag)
    b_bits, b = _halves(rng, (16, 8), tag)
    c = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    d = np.full((16, 8), np.nan, np.float32)
    args = (*_bufs("A", "B", "C", "D"), ScalarArg("i32", b_kn))
    dev.run(SOURCE, [_launch(f"mma_ldmatrix_{tag}", 32, *args, smem=2048)],
            {"A": a_bits, "B": b_bits, "C": c, "D": d})  # fmt: skip
    _check_mma(d, c + a.astype(np.float64) @ b.astype(np.float64))


def test_ldmatrix_lane_layout(dev: Device) -> None:
    m = (np.arange(256, dtype=np.uint16) * 37 + 11).reshape(4, 8, 8)  # distinct values
    out = np.zeros((6, 32, 4), np.uint32)
    dev.run(SOURCE, [_launch("ldmatrix_raw", 32, *_bufs("M", "out"), smem=32 * 80)],
            {"M": m, "out": out})  # fmt: skip
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    for v, n in enumerate([1, 2, 4, 1, 2, 4]):
        for k in range(n):
            if v < 3:  # row g, columns 2t and 2t + 1
                lo, hi = m[k, g, 2 * t], m[k, g, 2 * t + 1]
            else:  # transposed: column g, rows 2t and 2t + 1
                lo, hi = m[k, 2 * t, g], m[k, 2 * t + 1, g]
            want = lo.astype(np.uint32) | hi.astype(np.uint32) << 16
            np.testing.assert_array_equal(out[v, :, k], want, err_msg=f"variant {v} matrix {k}")


@pytest.mark.parametrize("wait_all", [0, 1])
def test_cp_async_tile(dev: Device, wait_all: int) -> None:
    n = 64
    src = np.random.default_rng(3).standard_normal(7 * n).astype(np.float32)
    dst = np.zeros(7 * n, np.float32)
    early = np.zeros(n, np.float32)
    args = (*_bufs("src", "dst", "early"), ScalarArg("i32", wait_all))
    dev.run(SOURCE, [_launch("cp_async_tile", n, *args, smem=7 * n * 4)],
            {"src": src, "dst": dst, "early": early})  # fmt: skip
    np.testing.assert_array_equal(dst, src)
    if isinstance(dev, EmuDevice):  # the copies wait for the wait: the race shows the poison
        assert (early.view(np.uint32) == 0xFFFFFFFF).all()


def test_cp_async_groups(dev: Device) -> None:
    src = np.arange(1, 17, dtype=np.float32) * 1.5
    out = np.zeros(64, np.float32)
    dev.run(SOURCE, [_launch("cp_async_groups", 1, *_bufs("src", "out"), smem=64)],
            {"src": src, "out": out})  # fmt: skip
    bits = out.view(np.uint32)
    np.testing.assert_array_equal(out[48:60], src[:12])
    zfill = np.array([src[12].view(np.uint32), src[13].view(np.uint32) & 0xFFFF, 0, 0])
    np.testing.assert_array_equal(bits[60:], zfill)
    if isinstance(dev, EmuDevice):  # what has landed after each wait, exactly
        poison = np.uint32(0xFFFFFFFF)
        landed = [0, 0, 4, 8]  # words of s[0..11] in place: issued, wait<2>, <1>, <0>
        for step, words in enumerate(landed):
            snap, raw = out[12 * step : 12 * step + 12], bits[12 * step : 12 * step + 12]
            np.testing.assert_array_equal(snap[:words], src[:words], err_msg=f"step {step}")
            assert (raw[words:] == poison).all(), f"step {step}: {snap}"


def test_cp_async_queue_overflow(dev: Device) -> None:
    n = 205
    src = np.arange(n, dtype=np.float32) + 0.5
    out = np.zeros(n, np.float32)
    dev.run(SOURCE, [_launch("cp_async_many", 1, *_bufs("src", "out"), ScalarArg("i32", n),
                             smem=4 * n)], {"src": src, "out": out})  # fmt: skip
    np.testing.assert_array_equal(out, src)


def test_pack_unpack(dev: Device) -> None:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(256) * 10.0 ** rng.integers(-3, 4, 256)).astype(np.float32)
    h, b = np.zeros(128, np.uint32), np.zeros(128, np.uint32)
    hx, bx = np.zeros(256, np.float32), np.zeros(256, np.float32)
    dev.run(SOURCE, [_launch("pack", 128, *_bufs("x", "h", "b", "hx", "bx"))],
            {"x": x, "h": h, "b": b, "hx": hx, "bx": bx})  # fmt: skip
    want_h = x.astype(np.float16)
    want_b = bf16_bits(x)
    np.testing.assert_array_equal(h.view(np.uint16), want_h.view(np.uint16))  # lo first
    np.testing.assert_array_equal(b.view(np.uint16), want_b)
    np.testing.assert_array_equal(hx, want_h.astype(np.float32))
    np.testing.assert_array_equal(bx, (want_b.astype(np.uint32) << 16).view(np.float32))


@pytest.mark.parametrize(
    "block, diverge, message",
    [
        (48, 0, "mma_16816 is warp-collective but warp 1 of the block has only 16 threads"),
        (32, 1, "reached different warp collectives or shuffles"),
    ],
)
def test_misuse_is_reported(emu_dev: EmuDevice, block: int, diverge: int, message: str) -> None:
    d = np.zeros(128, np.float32)
    with pytest.raises(KernelLaunchError, match=message):
        emu_dev.run(SOURCE, [_launch("mma_misuse", block, BufferArg("D"), ScalarArg("i32", diverge))],
                    {"D": d})  # fmt: skip
    emu_dev.reset()  # the misuse killed the runner: the context is replaced, as a GPU's would be


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvrtc_compiles_every_kernel(arch: str) -> None:
    nvrtc = pytest.importorskip("emmy.backend.nvrtc")
    compiled = nvrtc.compile_cuda(SOURCE, arch)
    ptx = compiled.ptx
    for insn in (
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "cp.async.cg.shared.global",
        "cp.async.ca.shared.global",
        "cp.async.commit_group",
        "cp.async.wait_group",
        "cp.async.wait_all",
        "cvt.rn.f16x2.f32",
        "cvt.rn.bf16x2.f32",
    ):
        assert insn in ptx, insn
    kernels = {"mma_global_f16", "mma_global_bf16", "mma_ldmatrix_f16", "mma_ldmatrix_bf16",
               "ldmatrix_raw", "cp_async_tile", "cp_async_groups", "cp_async_many", "pack",
               "mma_misuse"}  # fmt: skip
    assert kernels <= set(compiled.resources), sorted(compiled.resources)
