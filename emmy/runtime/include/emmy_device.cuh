// emmy's device header: the one file every emitted kernel includes.
//
// On the GPU (NVRTC, where no system or CUDA headers are available) everything is defined here
// from builtins and inline PTX. With EMMY_EMU defined, the platform layer comes from
// emmy_device_emu.h instead and the same kernel source runs on CPU fibers.
// The part after the platform layer (loads, reductions) is shared by both.
#pragma once

namespace emmy {

// Half-precision storage types; arithmetic always goes through float.
struct f16 {
  unsigned short bits;
};
struct bf16 {
  unsigned short bits;
};

}  // namespace emmy

#ifdef EMMY_EMU
#include "emmy_device_emu.h"
#else

#define EMMY_KERNEL extern "C" __global__
#define EMMY_EMU_ENTRY(name)
#define EMMY_UNROLL _Pragma("unroll")

namespace emmy {

constexpr int warp_size = 32;

__device__ __forceinline__ void sync_threads() { __syncthreads(); }

__device__ __forceinline__ unsigned char* smem() {
  extern __shared__ __align__(16) unsigned char emmy_dynamic_smem[];
  return emmy_dynamic_smem;
}

__device__ __forceinline__ unsigned thread_linear() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// ---- conversions (PTX, because NVRTC has no cuda_fp16.h here) ----
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
// bf16 -> f32 is exact: the bf16 bits are the high half of the float.
__device__ __forceinline__ float to_float(bf16 x) {
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ f16 from_float<f16>(float v) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));  // sm_80+
  return r;
}

// ---- vector memory access: one machine access per 16 bytes ----
template <int B>
struct vec_word;
template <>
struct vec_word<16> {
  using type = uint4;
};
template <>
struct vec_word<8> {
  using type = uint2;
};
template <>
struct vec_word<4> {
  using type = unsigned int;
};
template <>
struct vec_word<2> {
  using type = unsigned short;
};

template <int N, class T>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[N]) {
  constexpr int B = N * static_cast<int>(sizeof(T));
  constexpr int W = B < 16 ? B : 16;
  using Word = typename vec_word<W>::type;
  union {
    Word w[B / W];
    T t[N];
  } u;
EMMY_UNROLL
  for (int i = 0; i < B / W; ++i) u.w[i] = reinterpret_cast<const Word*>(p)[i];
EMMY_UNROLL
  for (int i = 0; i < N; ++i) out[i] = to_float(u.t[i]);
}

template <int N, class T>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[N]) {
  constexpr int B = N * static_cast<int>(sizeof(T));
  constexpr int W = B < 16 ? B : 16;
  using Word = typename vec_word<W>::type;
  union {
    Word w[B / W];
    T t[N];
  } u;
EMMY_UNROLL
  for (int i = 0; i < N; ++i) u.t[i] = from_float<T>(in[i]);
EMMY_UNROLL
  for (int i = 0; i < B / W; ++i) reinterpret_cast<Word*>(p)[i] = u.w[i];
}

// ---- warp shuffles over the full warp ----
__device__ __forceinline__ float shfl_xor(float v, int lane_mask, int width = 32) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}
__device__ __forceinline__ float shfl_down(float v, int delta, int width = 32) {
  return __shfl_down_sync(0xffffffffu, v, delta, width);
}
__device__ __forceinline__ float shfl_idx(float v, int src_lane, int width = 32) {
  return __shfl_sync(0xffffffffu, v, src_lane, width);
}

// ---- math ----
__device__ __forceinline__ float exp(float x) { return expf(x); }
__device__ __forceinline__ float fast_exp(float x) { return __expf(x); }
__device__ __forceinline__ float log(float x) { return logf(x); }
__device__ __forceinline__ float tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float erf(float x) { return erff(x); }
__device__ __forceinline__ float sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ float fmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float fmin(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float abs(float x) { return fabsf(x); }
__device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }

}  // namespace emmy

#endif  // EMMY_EMU

// ===================== shared by GPU and emulator =====================
namespace emmy {

__device__ __forceinline__ unsigned lane_id() { return thread_linear() % warp_size; }
__device__ __forceinline__ unsigned warp_id() { return thread_linear() / warp_size; }

template <class T>
__device__ __forceinline__ float load(const T* p) {
  return to_float(*p);
}
template <class T>
__device__ __forceinline__ void store(T* p, float v) {
  *p = from_float<T>(v);
}

enum class Reduce { shuffle, smem };

struct op_sum {
  __device__ __forceinline__ static float identity() { return 0.0f; }
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct op_max {
  __device__ __forceinline__ static float identity() { return -inf(); }
  __device__ __forceinline__ float operator()(float a, float b) const { return fmax(a, b); }
};

// Reduces v over each aligned group of GROUP consecutive threads (by linear index) and returns
// the group's result to all its threads. Call from every thread of the block. Whenever scratch
// (>= 8 * blockDim bytes of shared memory) is used, a final barrier makes it reusable at once;
// a shuffle reduction with GROUP <= 32 touches no scratch and has no barrier.
// The combination order is fixed, so the result is deterministic.
template <int GROUP, Reduce S, class Op>
__device__ __forceinline__ float group_reduce(float v, Op op, unsigned char* scratch) {
  static_assert(GROUP >= 1 && GROUP <= 1024 && (GROUP & (GROUP - 1)) == 0,
                "GROUP must be a power of two in [1, 1024]");
  if constexpr (GROUP == 1) {
    return v;
  } else if constexpr (S == Reduce::shuffle) {
    constexpr int W = GROUP < warp_size ? GROUP : warp_size;
EMMY_UNROLL
    for (int o = W / 2; o > 0; o /= 2) v = op(v, shfl_xor(v, o, W));
    if constexpr (GROUP > warp_size) {
      constexpr int NW = GROUP / warp_size;
      float* part = reinterpret_cast<float*>(scratch);
      const unsigned w = warp_id();
      if (lane_id() == 0) part[w] = v;
      sync_threads();
      const unsigned base = w / NW * NW;
      v = part[base];
EMMY_UNROLL
      for (int i = 1; i < NW; ++i) v = op(v, part[base + i]);
      sync_threads();
    }
    return v;
  } else {
    float* s = reinterpret_cast<float*>(scratch);
    const unsigned t = thread_linear();
    const unsigned base = t & ~static_cast<unsigned>(GROUP - 1);
    s[t] = v;
    sync_threads();
EMMY_UNROLL
    for (unsigned h = GROUP / 2; h > 0; h /= 2) {
      if (t - base < h) s[t] = op(s[t], s[t + h]);
      sync_threads();
    }
    v = s[base];
    sync_threads();
    return v;
  }
}

// (m1, s1) + (m2, s2) for online softmax; a side with m == -inf contributes nothing, so two
// empty sides give (-inf, 0) and never NaN. Symmetric, hence deterministic under the butterfly.
__device__ __forceinline__ void online_combine(float& m, float& s, float m2, float s2) {
  const float M = fmax(m, m2);
  const float a = m == -inf() ? 0.0f : s * exp(m - M);
  const float b = m2 == -inf() ? 0.0f : s2 * exp(m2 - M);
  m = M;
  s = a + b;
}

// group_reduce for online-softmax pairs (m, s); same contract as group_reduce.
template <int GROUP, Reduce S>
__device__ __forceinline__ void group_reduce_online(float& m, float& s, unsigned char* scratch) {
  static_assert(GROUP >= 1 && GROUP <= 1024 && (GROUP & (GROUP - 1)) == 0,
                "GROUP must be a power of two in [1, 1024]");
  if constexpr (GROUP == 1) {
    return;
  } else if constexpr (S == Reduce::shuffle) {
    constexpr int W = GROUP < warp_size ? GROUP : warp_size;
EMMY_UNROLL
    for (int o = W / 2; o > 0; o /= 2) {
      const float m2 = shfl_xor(m, o, W);
      const float s2 = shfl_xor(s, o, W);
      online_combine(m, s, m2, s2);
    }
    if constexpr (GROUP > warp_size) {
      constexpr int NW = GROUP / warp_size;
      float* part = reinterpret_cast<float*>(scratch);
      const unsigned w = warp_id();
      if (lane_id() == 0) {
        part[2 * w] = m;
        part[2 * w + 1] = s;
      }
      sync_threads();
      const unsigned base = w / NW * NW;
      m = part[2 * base];
      s = part[2 * base + 1];
EMMY_UNROLL
      for (int i = 1; i < NW; ++i) online_combine(m, s, part[2 * (base + i)], part[2 * (base + i) + 1]);
      sync_threads();
    }
  } else {
    float* p = reinterpret_cast<float*>(scratch);
    const unsigned t = thread_linear();
    const unsigned base = t & ~static_cast<unsigned>(GROUP - 1);
    p[2 * t] = m;
    p[2 * t + 1] = s;
    sync_threads();
EMMY_UNROLL
    for (unsigned h = GROUP / 2; h > 0; h /= 2) {
      if (t - base < h) {
        float mm = p[2 * t], ss = p[2 * t + 1];
        online_combine(mm, ss, p[2 * (t + h)], p[2 * (t + h) + 1]);
        p[2 * t] = mm;
        p[2 * t + 1] = ss;
      }
      sync_threads();
    }
    m = p[2 * base];
    s = p[2 * base + 1];
    sync_threads();
  }
}

}  // namespace emmy
