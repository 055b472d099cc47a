"""The emu device: hand-written kernels against the header API, run on CPU fibers.

All kernels live in one source so the whole module costs a single g++ invocation.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import torch

from emmy.base.errors import KernelCompileError, KernelLaunchError
from emmy.runtime import emu, emu_memory
from emmy.runtime.device import BufferArg, Launch, ScalarArg, VendorMatmul
from emmy.runtime.emu import EmuDevice, compile_emu

GROUPS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
BLOCKS = [32, 64, 128, 256, 512, 1024]
VEC_TYPES = {"f32": "float", "f16": "emmy::f16", "bf16": "emmy::bf16"}
VEC_NS = [1, 2, 4, 8, 16]


def _kernels() -> str:
    parts = [
        r"""
#include "emmy_device.cuh"

template <int N, class T>
__device__ void vadd(const T* a, const T* b, T* c, int n) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * N;
  if (i >= n) return;
  float x[N], y[N];
  emmy::load_vec<N>(a + i, x);
  emmy::load_vec<N>(b + i, y);
  for (int k = 0; k < N; ++k) x[k] += y[k];
  emmy::store_vec<N>(c + i, x);
}

// Two reductions back to back over the same scratch: relies on the trailing barrier.
template <int G, emmy::Reduce S>
__device__ void reduce(const float* x, float* sum, float* max) {
  const unsigned t = emmy::thread_linear(), n = blockDim.x * blockDim.y * blockDim.z;
  const unsigned i = blockIdx.x * n + t;
  const float s = emmy::group_reduce<G, S>(x[i], emmy::op_sum{}, emmy::smem());
  const float m = emmy::group_reduce<G, S>(x[i], emmy::op_max{}, emmy::smem());
  sum[i] = s;
  max[i] = m;
}

template <int G, emmy::Reduce S>
__device__ void online(const float* m_in, const float* s_in, float* m_out, float* s_out) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  float m = m_in[i], s = s_in[i];
  emmy::group_reduce_online<G, S>(m, s, emmy::smem());
  m_out[i] = m;
  s_out[i] = s;
}

EMMY_KERNEL void shuffles(float* out) {
  const int kWidths[6] = {1, 2, 4, 8, 16, 32}, kOffsets[6] = {0, 1, 3, 5, 16, 31};
  const unsigned t = threadIdx.x, n = blockDim.x;
  const float v = 100.0f + t;
  for (int w = 0; w < 6; ++w)
    for (int o = 0; o < 6; ++o) {
      const int base = (w * 6 + o) * 3;
      out[(base + 0) * n + t] = emmy::shfl_xor(v, kOffsets[o], kWidths[w]);
      out[(base + 1) * n + t] = emmy::shfl_down(v, kOffsets[o], kWidths[w]);
      out[(base + 2) * n + t] = emmy::shfl_idx(v, kOffsets[o], kWidths[w]);
    }
}
EMMY_EMU_ENTRY(shuffles)

EMMY_KERNEL void convert(const float* x, emmy::f16* h, emmy::bf16* b, const emmy::f16* hb,
                         const emmy::bf16* bb, float* hf, float* bf, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  emmy::store(h + i, x[i]);
  emmy::store(b + i, x[i]);
  hf[i] = emmy::load(hb + i);
  bf[i] = emmy::load(bb + i);
}
EMMY_EMU_ENTRY(convert)

EMMY_KERNEL void racy(float* out, int barrier) {
  float* s = reinterpret_cast<float*>(emmy::smem());
  s[threadIdx.x] = threadIdx.x;
  if (barrier) emmy::sync_threads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
EMMY_EMU_ENTRY(racy)

EMMY_KERNEL void early_exit(float* out) {
  if (threadIdx.x < 16) return;
  emmy::sync_threads();
  out[threadIdx.x] = 1.0f;
}
EMMY_EMU_ENTRY(early_exit)

EMMY_KERNEL void partial_shuffle(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x < 16) v = emmy::shfl_xor(v, 1);
  out[threadIdx.x] = v;
}
EMMY_EMU_ENTRY(partial_shuffle)

EMMY_KERNEL void diverged_shuffle(float* out) {
  float v = threadIdx.x;
  if (threadIdx.x % 2) v = emmy::shfl_xor(v, 1);
  else v = emmy::shfl_xor(v, 2);
  out[threadIdx.x] = v;
}
EMMY_EMU_ENTRY(diverged_shuffle)

EMMY_KERNEL void null_write(float* out, long long address) {
  if (threadIdx.x == 3) *reinterpret_cast<float*>(address) = out[0];
}
EMMY_EMU_ENTRY(null_write)

EMMY_KERNEL void out_of_bounds(float* out, int n) { out[n + threadIdx.x] = 1.0f; }
EMMY_EMU_ENTRY(out_of_bounds)

EMMY_KERNEL void misaligned(float* out, const float* x) {
  float v[4];
  emmy::load_vec<4>(x + 1, v);
  out[threadIdx.x] = v[0];
}
EMMY_EMU_ENTRY(misaligned)

EMMY_KERNEL void spin(const int* flag) {
  while (*reinterpret_cast<const volatile int*>(flag) == 0) {
  }
}
EMMY_EMU_ENTRY(spin)

EMMY_KERNEL void geometry(unsigned* out) {
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned i = b * blockDim.x * blockDim.y * blockDim.z + emmy::thread_linear();
  out[4 * i + 0] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
  out[4 * i + 1] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;
  out[4 * i + 2] = emmy::lane_id();
  out[4 * i + 3] = emmy::warp_id();
}
EMMY_EMU_ENTRY(geometry)
"""
    ]
    for tag, ctype in VEC_TYPES.items():
        for n in VEC_NS:
            parts.append(
                f"EMMY_KERNEL void vadd_{tag}_{n}(const {ctype}* a, const {ctype}* b, {ctype}* c,"
                f" int n) {{ vadd<{n}>(a, b, c, n); }}\nEMMY_EMU_ENTRY(vadd_{tag}_{n})\n"
            )
    for g in GROUPS:
        for s in ("shuffle", "smem"):
            parts.append(
                f"EMMY_KERNEL void reduce_{s}_{g}(const float* x, float* sum, float* max)"
                f" {{ reduce<{g}, emmy::Reduce::{s}>(x, sum, max); }}\n"
                f"EMMY_EMU_ENTRY(reduce_{s}_{g})\n"
                f"EMMY_KERNEL void online_{s}_{g}(const float* mi, const float* si, float* mo,"
                f" float* so) {{ online<{g}, emmy::Reduce::{s}>(mi, si, mo, so); }}\n"
                f"EMMY_EMU_ENTRY(online_{s}_{g})\n"
            )
    return "".join(parts)


SOURCE = _kernels()


@pytest.fixture(scope="module")
def dev() -> EmuDevice:
    compile_emu(SOURCE)
    return EmuDevice(workers=2)


def _launch(kernel: str, grid: int | tuple, block: int | tuple, *args, smem: int = 0) -> Launch:
    g = (grid, 1, 1) if isinstance(grid, int) else grid
    b = (block, 1, 1) if isinstance(block, int) else block
    return Launch(kernel, g, b, smem, tuple(args))


def _buf(name: str) -> BufferArg:
    return BufferArg(name)


def _i32(v: int) -> ScalarArg:
    return ScalarArg("i32", v)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """Reference float32 -> bf16 round-to-nearest-even, NaN kept quiet, as uint16 bits."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("tag", list(VEC_TYPES))
def test_vector_add(dev: EmuDevice, tag: str) -> None:
    rng = np.random.default_rng(0)
    n, threads = 2048, 64
    a32 = rng.standard_normal(n).astype(np.float32)
    b32 = rng.standard_normal(n).astype(np.float32)
    if tag == "f32":
        a, b, want = a32, b32, a32 + b32
    elif tag == "f16":
        a, b = a32.astype(np.float16), b32.astype(np.float16)
        want = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    else:
        a, b = bf16_bits(a32), bf16_bits(b32)
        want = bf16_bits(bf16_to_f32(a) + bf16_to_f32(b))
    buffers = {"a": a, "b": b}
    launches = []
    for vn in VEC_NS:
        out = (
            np.full(n, np.nan, np.float32).astype(a.dtype)
            if tag != "bf16"
            else np.full(n, 0x7FC0, np.uint16)
        )
        buffers[f"c{vn}"] = out
        grid = -(-n // (vn * threads))
        launches.append(
            _launch(
                f"vadd_{tag}_{vn}", grid, threads, _buf("a"), _buf("b"), _buf(f"c{vn}"), _i32(n)
            )
        )
    dev.run(SOURCE, launches, buffers)
    for vn in VEC_NS:
        np.testing.assert_array_equal(buffers[f"c{vn}"], want, err_msg=f"{tag} x {vn}")


@pytest.mark.parametrize("strategy", ["shuffle", "smem"])
@pytest.mark.parametrize("schedule", ["forward", "reverse"])
def test_group_reduce(dev: EmuDevice, strategy: str, schedule: str) -> None:
    rng = np.random.default_rng(1)
    blocks = 2
    buffers: dict[str, np.ndarray] = {}
    launches, checks = [], []
    shapes = [(b, 1, 1) for b in BLOCKS] + [(16, 4, 2)]  # a 3-d block uses the linear index
    for shape in shapes:
        bs = int(np.prod(shape))
        # Small integers: every summation order is exact, so results compare bit for bit.
        x = rng.integers(-8, 9, blocks * bs).astype(np.float32)
        buffers[f"x{bs}_{shape[1]}"] = x
        for g in (g for g in GROUPS if g <= bs):
            tag = f"{bs}_{shape[1]}_{g}"
            buffers[f"s{tag}"] = np.full_like(x, np.nan)
            buffers[f"m{tag}"] = np.full_like(x, np.nan)
            launches.append(
                _launch(
                    f"reduce_{strategy}_{g}",
                    blocks,
                    shape,
                    _buf(f"x{bs}_{shape[1]}"),
                    _buf(f"s{tag}"),
                    _buf(f"m{tag}"),
                    smem=8 * bs,
                )
            )
            groups = x.reshape(-1, g)
            want_s = np.repeat(groups.sum(1), g)
            want_m = np.repeat(groups.max(1), g)
            checks.append((tag, want_s, want_m))
    dev.run(SOURCE, launches, buffers, schedule=schedule)
    for tag, want_s, want_m in checks:
        np.testing.assert_array_equal(buffers[f"s{tag}"], want_s, err_msg=f"sum {tag}")
        np.testing.assert_array_equal(buffers[f"m{tag}"], want_m, err_msg=f"max {tag}")


@pytest.mark.parametrize("strategy", ["shuffle", "smem"])
def test_group_reduce_online(dev: EmuDevice, strategy: str) -> None:
    rng = np.random.default_rng(2)
    bs = 256
    m = rng.standard_normal(bs).astype(np.float32) * 4
    s = rng.random(bs).astype(np.float32)
    empty = rng.random(bs) < 0.3
    m[empty], s[empty] = -np.inf, 0.0
    m[:8], s[:8] = -np.inf, 0.0  # a whole group of 8 (and more) empty: must stay (-inf, 0)
    buffers = {"m": m, "s": s}
    launches, groups = [], [1, 2, 8, 32, 64, 256]
    for g in groups:
        buffers[f"mo{g}"] = np.full_like(m, np.nan)
        buffers[f"so{g}"] = np.full_like(m, np.nan)
        args = (_buf("m"), _buf("s"), _buf(f"mo{g}"), _buf(f"so{g}"))
        launches.append(_launch(f"online_{strategy}_{g}", 1, bs, *args, smem=8 * bs))
    dev.run(SOURCE, launches, buffers)
    for g in groups:
        mg, sg = m.reshape(-1, g).astype(np.float64), s.reshape(-1, g).astype(np.float64)
        big = mg.max(1, keepdims=True)
        with np.errstate(invalid="ignore"):
            terms = np.where(np.isneginf(mg), 0.0, sg * np.exp(mg - big))
        np.testing.assert_array_equal(buffers[f"mo{g}"], np.repeat(big[:, 0], g).astype(np.float32))
        np.testing.assert_allclose(buffers[f"so{g}"], np.repeat(terms.sum(1), g), rtol=2e-6)
        assert not np.isnan(buffers[f"so{g}"]).any()


@pytest.mark.parametrize("threads", [64, 48])  # 48: the second warp has only 16 lanes
def test_shuffles(dev: EmuDevice, threads: int) -> None:
    out = np.full(6 * 6 * 3 * threads, np.nan, np.float32)
    dev.run(SOURCE, [_launch("shuffles", 1, threads, _buf("out"))], {"out": out})
    got = out.reshape(6, 6, 3, threads)
    for wi, w in enumerate([1, 2, 4, 8, 16, 32]):
        for oi, o in enumerate([0, 1, 3, 5, 16, 31]):
            for t in range(threads):
                lane, base = t % 32, t - t % 32
                seg = lane // w * w
                xor = lane ^ o if (lane ^ o) < seg + w else lane  # earlier segments are visible
                down = lane + o if lane % w + o < w else lane
                idx = seg + o % w
                for k, src in enumerate((xor, down, idx)):
                    want = 100.0 + base + src if base + src < threads else np.nan
                    np.testing.assert_equal(got[wi, oi, k, t], want, err_msg=f"w{w} o{o} k{k} t{t}")


def test_conversions(dev: EmuDevice) -> None:
    rng = np.random.default_rng(3)
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 1e-8, 2.9802322e-08,
         2.9802326e-08, 6.1035156e-05, 6.097555e-05, 3.4028235e38, 1.0 + 2**-8, 1.0 + 3 * 2**-8,
         1.0 + 2**-11, 1.0 + 3 * 2**-11, 1e-40, -1e-45],
        dtype=np.float32,
    )  # fmt: skip
    x = np.concatenate(
        [
            specials,
            (rng.standard_normal(30000) * 10.0 ** rng.integers(-9, 6, 30000)).astype(np.float32),
            rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    ).astype(np.float32)
    x = np.resize(x, 65536)
    all_bits = np.arange(65536, dtype=np.uint16)
    buffers = {
        "x": x,
        "h": np.zeros(65536, np.uint16),
        "b": np.zeros(65536, np.uint16),
        "hb": all_bits,
        "bb": all_bits,
        "hf": np.zeros(65536, np.float32),
        "bf": np.zeros(65536, np.float32),
    }
    args = tuple(_buf(k) for k in ("x", "h", "b", "hb", "bb", "hf", "bf")) + (_i32(65536),)
    with np.errstate(over="ignore"):
        want_h = x.astype(np.float16)
    dev.run(SOURCE, [_launch("convert", 256, 256, *args)], buffers)
    got_h = buffers["h"].view(np.float16)
    nan = np.isnan(want_h)
    np.testing.assert_array_equal(np.isnan(got_h), nan)
    np.testing.assert_array_equal(buffers["h"][~nan], want_h.view(np.uint16)[~nan])
    np.testing.assert_array_equal(buffers["b"], bf16_bits(x))
    np.testing.assert_array_equal(buffers["hf"], all_bits.view(np.float16).astype(np.float32))
    np.testing.assert_array_equal(buffers["bf"], bf16_to_f32(all_bits))


def test_geometry(dev: EmuDevice) -> None:
    grid, block = (3, 2, 2), (8, 6, 3)
    nb, nt = 12, 144
    out = np.zeros(4 * nb * nt, np.uint32)
    dev.run(SOURCE, [_launch("geometry", grid, block, _buf("out"))], {"out": out})
    got = out.reshape(nb, nt, 4)
    t = np.arange(nt)
    tx, ty, tz = t % 8, t // 8 % 6, t // 48
    np.testing.assert_array_equal(got[5, :, 0], tx + 10 * ty + 100 * tz)
    b = np.arange(nb)
    np.testing.assert_array_equal(got[:, 0, 1], b % 3 + 10 * (b // 3 % 2) + 100 * (b // 6))
    np.testing.assert_array_equal(got[7, :, 2], t % 32)
    np.testing.assert_array_equal(got[7, :, 3], t // 32)


def test_race_shows_under_different_schedules(dev: EmuDevice) -> None:
    def run(schedule: str, barrier: int) -> np.ndarray:
        out = np.zeros(64, np.float32)
        launch = _launch("racy", 1, 64, _buf("out"), _i32(barrier), smem=256)
        dev.run(SOURCE, [launch], {"out": out}, schedule=schedule)
        return out

    fwd, rev = run("forward", 0), run("reverse", 0)
    assert not np.array_equal(fwd, rev, equal_nan=True)
    assert np.isnan(fwd[:63]).all()  # unwritten shared memory reads as the NaN poison
    np.testing.assert_array_equal(run("shuffle:7", 0), run("shuffle:7", 0))
    want = (np.arange(64) + 1) % 64
    for schedule in ("forward", "reverse", "shuffle:3"):
        np.testing.assert_array_equal(run(schedule, 1), want)


@pytest.mark.parametrize(
    "kernel, args, message",
    [
        ("early_exit", (), r"barrier divergence in kernel 'early_exit', block \([01],0,0\): 48 of"),
        ("partial_shuffle", (), "deadlock .* 16 at a warp shuffle"),
        ("diverged_shuffle", (), "reached different warp shuffles"),
        (
            "null_write",
            (ScalarArg("i64", 0),),
            r"'null_write', block \([01],0,0\), thread \(3,0,0\) crashed with SIGSEGV",
        ),
        ("out_of_bounds", (_i32(64),), "SIGSEGV"),
        (
            "misaligned",
            (_buf("x"),),
            "CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address: vector load of 4 x f32 at "
            r"address 0x[0-9a-f]+, not 16-byte aligned \(kernel 'misaligned', block",
        ),
    ],
)
def test_launch_errors(dev: EmuDevice, kernel: str, args: tuple, message: str) -> None:
    buffers = {"out": np.zeros(64, np.float32), "x": np.zeros(64, np.float32)}
    launch = _launch(kernel, (2, 1, 1), 64, _buf("out"), *args)
    with pytest.raises(KernelLaunchError, match=message):
        dev.run(SOURCE, [launch], buffers, schedule="reverse")
    # each of these kills the runner: the context stays faulted until it is replaced
    assert dev.fault() is not None
    with pytest.raises(KernelLaunchError, match="unusable after a fault"):
        dev.run(SOURCE, [_launch("racy", 1, 64, _buf("out"), _i32(1))], buffers)
    dev.reset()


def test_resource_limits(dev: EmuDevice) -> None:
    out = {"out": np.zeros(64, np.float32)}
    with pytest.raises(KernelLaunchError, match="dynamic shared memory"):
        dev.run(SOURCE, [_launch("racy", 1, 64, _buf("out"), _i32(1), smem=227 * 1024 + 16)], out)
    with pytest.raises(KernelLaunchError, match="1024"):
        dev.run(SOURCE, [_launch("racy", 1, 1056, _buf("out"), _i32(1))], out)
    with pytest.raises(KernelLaunchError, match="sizes"):  # i64 where the kernel takes int
        dev.run(SOURCE, [_launch("racy", 1, 64, _buf("out"), ScalarArg("i64", 1))], out)
    with pytest.raises(KernelLaunchError, match="not in the compiled source"):
        dev.run(SOURCE, [_launch("nope", 1, 64, _buf("out"))], out)


def test_timeout(dev: EmuDevice) -> None:
    flag = {"flag": np.zeros(1, np.int32)}
    with pytest.raises(KernelLaunchError, match="timed out after 0.5s"):
        dev.run(SOURCE, [_launch("spin", 1, 32, _buf("flag"))], flag, timeout=0.5)
    dev.reset()  # a kernel that never ended leaves the context unusable, as on a GPU


def test_time(dev: EmuDevice) -> None:
    out = {"out": np.zeros(64, np.float32)}
    times = dev.time(SOURCE, [_launch("racy", 4, 64, _buf("out"), _i32(1), smem=256)], out,
                     warmup=1, repetitions=10).seconds  # fmt: skip
    # spread over emu.TIMING_PROCESSES runners, exactly as asked for
    assert len(times) == 10 and all(t > 0 for t in times)


def test_compile_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EMMY_CACHE_DIR", str(tmp_path))
    calls: list[list[str]] = []
    real = emu._run_gxx

    def counting(args: list[str]):
        calls.append(args)
        return real(args)

    monkeypatch.setattr(emu, "_run_gxx", counting)
    source = '#include "emmy_device.cuh"\nEMMY_KERNEL void k(float* x) { x[0] = 1; }\n'
    first = compile_emu(source + "EMMY_EMU_ENTRY(k)\n")
    builds = [c for c in calls if "--version" not in c]
    assert len(builds) == 1 and first.parent == tmp_path / "emu"
    assert compile_emu(source + "EMMY_EMU_ENTRY(k)\n") == first
    assert [c for c in calls if "--version" not in c] == builds  # a hit: g++ not called again
    with pytest.raises(KernelCompileError, match="error"):
        compile_emu(source + "EMMY_EMU_ENTRY(k) oops\n")


def test_address_sanitizer() -> None:
    """Best effort: skipped where g++ has no libasan."""
    try:
        asan = EmuDevice(workers=1, sanitize="address")
        emu.build_runner("address")
    except KernelCompileError as e:
        pytest.skip(f"no AddressSanitizer here: {str(e)[:200]}")
    source = r"""
#include "emmy_device.cuh"
EMMY_KERNEL void twice(float* x, int i) {
  float local[8];
  for (int k = 0; k < 8; ++k) local[k] = x[k];
  emmy::sync_threads();
  x[threadIdx.x] = 2.0f * local[i + threadIdx.x % 2];
}
EMMY_EMU_ENTRY(twice)
"""
    x = np.arange(64, dtype=np.float32)
    asan.run(source, [_launch("twice", 1, 64, _buf("x"), _i32(0))], {"x": x})
    np.testing.assert_array_equal(x, 2.0 * (np.arange(64) % 2))
    with pytest.raises(KernelLaunchError, match="stack-buffer-overflow"):
        asan.run(source, [_launch("twice", 1, 64, _buf("x"), _i32(7))], {"x": x})


# ---- the persistent runner: executables on torch tensors in device memory ----

N = 64


def _vadd(a: str, b: str, c: str) -> Launch:
    return _launch("vadd_f32_1", 1, N, _buf(a), _buf(b), _buf(c), _i32(N))


CHAIN = [_vadd("a", "b", "c"), _vadd("c", "b", "d"), _vadd("d", "a", "e")]  # e = 2a + 2b


@pytest.fixture
def fresh() -> EmuDevice:
    """A device of its own, so that its counters start at zero (SOURCE is compiled already)."""
    compile_emu(SOURCE)
    device = EmuDevice(workers=2)
    yield device
    device.close()


def _inputs(device: EmuDevice) -> dict[str, torch.Tensor]:
    tensors = {name: device.empty((N,), torch.float32) for name in "abcde"}
    tensors["a"].copy_(torch.arange(N, dtype=torch.float32))
    tensors["b"].fill_(0.5)
    return tensors


def test_a_call_on_device_memory_is_one_request_and_copies_nothing(fresh: EmuDevice) -> None:
    tensors = _inputs(fresh)
    program = fresh.load(SOURCE, CHAIN, list(tensors))
    program(tensors)
    torch.testing.assert_close(tensors["e"], 2 * tensors["a"] + 1.0, rtol=0, atol=0)
    before = dataclasses.replace(fresh.counters)
    for k in range(5):
        tensors["a"].fill_(k)
        program(tensors)
        assert tensors["e"].eq(2 * k + 1.0).all()
    after = fresh.counters
    assert after.requests - before.requests == 5  # one per call: the program is defined
    # the second call captured the launches as a graph (counted once), the others replay it
    assert after.allocations == before.allocations and after.launches - before.launches == 3
    assert after.replays - before.replays == 5
    assert after.uploads == after.host_copies == 0
    assert after.runner_starts == 1
    driver = fresh.driver
    start, end = driver.event(), driver.event()
    driver.record(start)
    program(tensors)
    driver.record(end)
    assert driver.elapsed(start, end) > 0  # events time the runner's own time of the kernels


def test_plain_tensors_are_staged_and_written_back(fresh: EmuDevice) -> None:
    tensors = _inputs(fresh)
    tensors["a"] = torch.arange(N, dtype=torch.float32)  # not device memory
    tensors["e"] = torch.full((N,), float("nan"))
    strided = torch.zeros(N, 2)[:, 0]  # not contiguous: staged too
    tensors["d"] = strided
    program = fresh.load(SOURCE, CHAIN, list(tensors), outputs={"c", "e"}, mutated={"d"})
    program(tensors)
    torch.testing.assert_close(tensors["e"], 2 * torch.arange(N, dtype=torch.float32) + 1.0)
    torch.testing.assert_close(strided, torch.arange(N, dtype=torch.float32) + 1.0)
    assert fresh.counters.uploads == 3  # a, d, e staged in
    assert fresh.counters.host_copies == 2  # d, e back out (a is only read)
    program(tensors)  # captures a graph, with static buffers for the slots not in place
    allocated = fresh.counters.allocations
    tensors["a"].fill_(2.0)
    program(tensors)
    assert fresh.counters.allocations == allocated  # staging and static buffers are kept
    torch.testing.assert_close(tensors["e"], torch.full((N,), 5.0))


def test_host_calls_run_between_the_launches_on_the_tensors(fresh: EmuDevice) -> None:
    tensors = _inputs(fresh)
    matmul = VendorMatmul((_buf("c"), _buf("b"), _buf("d")), ((8, 8),) * 3, "f32")
    program = fresh.load(SOURCE, [CHAIN[0], matmul, CHAIN[2]], list(tensors))
    program(tensors)
    c = tensors["a"] + 0.5
    want = (c.view(8, 8) @ tensors["b"].view(8, 8)).reshape(-1) + tensors["a"]
    torch.testing.assert_close(tensors["e"], want)
    assert fresh.counters.requests >= 2 and fresh.counters.uploads == 0


def test_a_crash_or_hang_faults_the_context_until_it_is_replaced(fresh: EmuDevice) -> None:
    tensors = _inputs(fresh)
    good = fresh.load(SOURCE, CHAIN, list(tensors))
    good(tensors)
    crash = fresh.load(
        SOURCE, [_launch("null_write", 2, 64, _buf("c"), ScalarArg("i64", 0))], ["c"]
    )
    with pytest.raises(KernelLaunchError, match=r"thread \(3,0,0\) crashed with SIGSEGV"):
        crash({"c": tensors["c"]})
    with pytest.raises(KernelLaunchError, match="unusable after a fault: .*SIGSEGV"):
        good(tensors)  # sticky, as a GPU's context after a fault
    fresh.reset()
    good(tensors)  # defined again in the fresh runner
    assert tensors["e"].eq(2 * tensors["a"] + 1.0).all()
    assert fresh.counters.runner_starts == 2
    spin = fresh.load(SOURCE, [_launch("spin", 1, 32, _buf("flag"))], ["flag"])
    flag = fresh.empty((1,), torch.int32).zero_()
    with pytest.raises(KernelLaunchError, match="timed out after 0.5s"):
        spin({"flag": flag}, timeout=0.5)
    fresh.reset()
    flag.fill_(1)  # written here, seen there: the same memory
    spin({"flag": flag})
    assert fresh.counters.runner_starts == 3


def test_bad_bindings_are_one_line_errors(fresh: EmuDevice) -> None:
    tensors = _inputs(fresh)
    with pytest.raises(KernelLaunchError, match="'c', which is not a slot"):
        fresh.load(SOURCE, CHAIN, ["a", "b"])
    program = fresh.load(SOURCE, CHAIN, list(tensors))
    with pytest.raises(KernelLaunchError, match="no tensor for slot 'e'"):
        program({k: v for k, v in tensors.items() if k != "e"})
    wrong = fresh.load(SOURCE, [_launch("racy", 1, 64, _buf("c"), ScalarArg("i64", 1))], ["c"])
    with pytest.raises(KernelLaunchError, match="sizes"):  # refused: the runner lives on
        wrong({"c": tensors["c"]})
    assert fresh.fault() is None
    program(tensors)
    assert fresh.counters.runner_starts == 1


def test_device_memory_is_reused_and_resolved(fresh: EmuDevice) -> None:
    x = fresh.empty((3, 5), torch.float16)
    place = fresh.memory.resolve(x.data_ptr(), x.numel() * 2)
    assert place is not None and place[1] % 256 == 0
    assert fresh.memory.resolve(x[1].data_ptr(), 10) == (place[0], place[1] + 10)
    assert fresh.memory.resolve(torch.zeros(4).data_ptr(), 16) is None
    region = place[0]
    del x
    y = fresh.empty((30,), torch.uint8)
    assert fresh.memory.resolve(y.data_ptr(), 30)[0] == region  # freed, then reused
    assert fresh.counters.allocations == 2 and fresh.counters.allocated_bytes == 60


def test_a_region_whose_file_went_first_is_removed_all_the_same(fresh: EmuDevice, monkeypatch):
    """At exit the device's files go first (emu_memory._remove_files), then the tensors that
    die with the interpreter release their regions: each is still removed, and told."""
    monkeypatch.setattr(emu_memory, "FREE_BYTES_CACHED", 0)  # a freed region goes at once
    x = fresh.empty((N,), torch.float32)
    region = fresh.memory.locate(x)[0]
    os.unlink(fresh.memory.regions[region].path)
    fresh.memory.take_removed()
    del x
    assert region not in fresh.memory.regions
    assert fresh.memory.take_removed() == [region]


def test_removed_regions_are_unmapped_in_the_runner(fresh: EmuDevice, monkeypatch) -> None:
    monkeypatch.setattr(emu_memory, "FREE_BYTES_CACHED", 0)  # a freed region goes at once
    program = fresh.load(SOURCE, [_vadd("x", "x", "x")], ["x"])
    x = fresh.empty((N,), torch.float32).fill_(1)
    program({"x": x})
    path = fresh.memory.regions[fresh.memory.locate(x)[0]].path
    del x
    assert not os.path.exists(path)
    y = fresh.empty((N,), torch.float32).fill_(3)
    requests = fresh.counters.requests
    program({"x": y})
    assert y.eq(6).all()
    assert fresh.counters.requests - requests == 3  # unmap the old region, map y's, run
