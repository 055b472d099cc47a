// The emulator's platform layer, included by emmy_device.cuh when EMMY_EMU is defined.
//
// Each CUDA thread is a fiber whose stack lives in a (1 << EMMY_EMU_STACK_BITS)-aligned slot;
// the slot's first bytes hold the fiber's ThreadCtx, so finding "the current thread" is one
// mask of the stack pointer: no TLS, no call. Everything that needs the scheduler (barriers,
// shuffles, failures) is an extern "C" function of the runner executable (emu_runner.cpp).
// Kept deliberately small: g++ compiles this once per kernel source.
#pragma once

#include <math.h>
#include <stdint.h>

#ifndef EMMY_EMU_STACK_BITS
#define EMMY_EMU_STACK_BITS 16
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define EMMY_KERNEL extern "C"
#define EMMY_UNROLL  // g++ unrolls what pays off at -O2; forcing it only costs compile time

namespace emmy {
namespace emu {

struct dim3u {
  unsigned x, y, z;
};

// Must stay the first member of the runner's Fiber struct.
struct ThreadCtx {
  dim3u thread_idx, block_idx, block_dim, grid_dim;
  unsigned linear;
  unsigned char* smem;
};

inline ThreadCtx* ctx() {
  uintptr_t sp;
#if defined(__x86_64__)
  // Not volatile: a fiber never leaves its stack, so the compiler may reuse the value.
  asm("mov %%rsp, %0" : "=r"(sp));
#else
  sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
#endif
  return reinterpret_cast<ThreadCtx*>(sp & ~((uintptr_t(1) << EMMY_EMU_STACK_BITS) - 1));
}

// ---- EMMY_EMU_ENTRY: call a kernel with cuLaunchKernel-style kernelParams ----
template <int... I>
struct idx_seq {};
template <int N, int... I>
struct make_idx : make_idx<N - 1, N - 1, I...> {};
template <int... I>
struct make_idx<0, I...> {
  using type = idx_seq<I...>;
};
template <class... P, int... I>
inline void call(void (*k)(P...), void** args, idx_seq<I...>) {
  k(*static_cast<P*>(args[I])...);
}
template <class... P>
inline void call(void (*k)(P...), void** args) {
  call(k, args, typename make_idx<sizeof...(P)>::type{});
}
// Parameter sizes, 0-terminated, exported so the runner can reject a mismatched launch.
template <class F>
struct sig;
template <class... P>
struct sig<void(P...)> {
  static constexpr unsigned char sizes[sizeof...(P) + 1] = {sizeof(P)..., 0};
};

}  // namespace emu
}  // namespace emmy

extern "C" {
void emmy_emu_sync();
float emmy_emu_shfl(float v, int mode, int b, int width, int site);
[[noreturn]] void emmy_emu_misaligned(int n, const char* type, const void* p, int store);
}

#define threadIdx (::emmy::emu::ctx()->thread_idx)
#define blockIdx (::emmy::emu::ctx()->block_idx)
#define blockDim (::emmy::emu::ctx()->block_dim)
#define gridDim (::emmy::emu::ctx()->grid_dim)

#define EMMY_EMU_ENTRY(name)                                                                \
  extern "C" void name##__emmy_entry(void** args) { ::emmy::emu::call(&name, args); }       \
  extern "C" const unsigned char* const name##__emmy_params = ::emmy::emu::sig<decltype(name)>::sizes;

namespace emmy {

constexpr int warp_size = 32;

inline void sync_threads() { emmy_emu_sync(); }
inline unsigned char* smem() { return emu::ctx()->smem; }
inline unsigned thread_linear() { return emu::ctx()->linear; }

// ---- conversions: bit-exact with the PTX cvt.rn instructions ----
inline unsigned f2u(float f) {
  unsigned u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
inline float u2f(unsigned u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline float to_float(float x) { return x; }
inline float to_float(bf16 x) { return u2f(static_cast<unsigned>(x.bits) << 16); }
inline float to_float(f16 x) {
  const unsigned sign = (x.bits & 0x8000u) << 16, e = (x.bits >> 10) & 0x1f, m = x.bits & 0x3ff;
  if (e == 0) {  // zero or subnormal: m * 2^-24 is exact in float
    const float f = static_cast<float>(m) * 5.9604644775390625e-8f;
    return u2f(f2u(f) | sign);
  }
  if (e == 31) return u2f(sign | 0x7f800000u | (m << 13));
  return u2f(sign | ((e + 112) << 23) | (m << 13));
}

template <class T>
T from_float(float v);
template <>
inline float from_float<float>(float v) {
  return v;
}
template <>
inline bf16 from_float<bf16>(float v) {
  const unsigned u = f2u(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<unsigned short>((u >> 16) | 0x40)};
  return bf16{static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1)) >> 16)};
}
template <>
inline f16 from_float<f16>(float v) {
  const unsigned u = f2u(v), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{static_cast<unsigned short>(sign | 0x7e00u | ((a >> 13) & 0x3ff))};
  if (a >= 0x477ff000u) return f16{static_cast<unsigned short>(sign | 0x7c00u)};  // >= 65520
  if (a < 0x38800000u) {  // below 2^-14: subnormal result; scale, then round half-even
    const float s = u2f(a) * 16777216.0f;
    const unsigned m = static_cast<unsigned>((s + 8388608.0f) - 8388608.0f);
    return f16{static_cast<unsigned short>(sign | m)};
  }
  unsigned h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ff);
  const unsigned rest = a & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;
  return f16{static_cast<unsigned short>(sign | h)};
}

// ---- vector access: element loop, but fault like the GPU would on misalignment ----
inline const char* type_name(const float*) { return "f32"; }
inline const char* type_name(const f16*) { return "f16"; }
inline const char* type_name(const bf16*) { return "bf16"; }
template <int N, class T>
inline void check_vec(const T* p, int store) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16, "N must be 1, 2, 4, 8 or 16");
  constexpr uintptr_t B = N * sizeof(T), A = B < 16 ? B : 16;
  if (reinterpret_cast<uintptr_t>(p) % A != 0) emmy_emu_misaligned(N, type_name(p), p, store);
}
template <int N, class T>
inline void load_vec(const T* p, float (&out)[N]) {
  check_vec<N>(p, 0);
  for (int i = 0; i < N; ++i) out[i] = to_float(p[i]);
}
template <int N, class T>
inline void store_vec(T* p, const float (&in)[N]) {
  check_vec<N>(p, 1);
  for (int i = 0; i < N; ++i) p[i] = from_float<T>(in[i]);
}

// ---- warp shuffles: modes as in PTX shfl.sync (0 idx, 1 up, 2 down, 3 bfly) ----
// `site` is the source line of the call: lanes of a warp must meet at the same one. A code
// address would not do, since g++ may duplicate one shuffle into several code paths.
inline float shfl_xor(float v, int lane_mask, int width = 32, int site = __builtin_LINE()) {
  return emmy_emu_shfl(v, 3, lane_mask, width, site);
}
inline float shfl_down(float v, int delta, int width = 32, int site = __builtin_LINE()) {
  return emmy_emu_shfl(v, 2, delta, width, site);
}
inline float shfl_idx(float v, int src_lane, int width = 32, int site = __builtin_LINE()) {
  return emmy_emu_shfl(v, 0, src_lane, width, site);
}

// ---- math: fast_exp is exact here; the GPU's __expf is the approximate one ----
inline float exp(float x) { return expf(x); }
inline float fast_exp(float x) { return expf(x); }
inline float log(float x) { return logf(x); }
inline float tanh(float x) { return tanhf(x); }
inline float erf(float x) { return erff(x); }
inline float sqrt(float x) { return sqrtf(x); }
inline float rsqrt(float x) { return 1.0f / sqrtf(x); }
inline float fmax(float a, float b) { return fmaxf(a, b); }
inline float fmin(float a, float b) { return fminf(a, b); }
inline float abs(float x) { return fabsf(x); }
inline float inf() { return __builtin_inff(); }

}  // namespace emmy
