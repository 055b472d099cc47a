// The emulator's platform layer, included by emmy_device.cuh when EMMY_EMU is defined.
//
// Each CUDA thread is a fiber whose stack lives in a (1 << EMMY_EMU_STACK_BITS)-aligned slot;
// the slot's first bytes hold the fiber's ThreadCtx, so finding "the current thread" is one
// mask of the stack pointer: no TLS, no call. Everything that needs the scheduler (barriers,
// shuffles, warp collectives, failures) is an extern "C" function of the runner executable
// (emu_runner.cpp).
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

// A cp_async not yet performed. A GPU lands a copy any time between its issue and the wait
// that retires its group; the emulator takes one end of that window per run. Deferred (the
// default) lands it at the wait, so reading the destination too early sees the shared-memory
// poison instead of racing silently. Eager (ThreadCtx::cp_eager) lands it at issue, so a
// refill of a stage that another warp still reads (a barrier missing before the refill)
// overwrites what that warp reads instead of passing unnoticed.
struct CpAsync {
  void* dst;
  const void* src;
  unsigned short bytes, src_bytes;  // src_bytes read, the rest zero-filled
  unsigned group;                   // equal to ThreadCtx::cp_groups while not committed
};
constexpr unsigned kCpAsyncQueue = 64;

// Must stay the first member of the runner's Fiber struct.
struct ThreadCtx {
  dim3u thread_idx, block_idx, block_dim, grid_dim;
  unsigned linear;
  unsigned char* smem;
  unsigned cp_pending, cp_groups;  // queued copies (oldest first), groups committed so far
  bool cp_eager;                   // the run lands each cp_async at issue; set by the runner
  CpAsync cp[kCpAsyncQueue];
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
// Warp-collective: every lane of the warp passes its `lane_arg`; once all 32 have arrived at
// the same `site`, fn runs once with all of them (indexed by lane), then every lane goes on.
void emmy_emu_collective(void* lane_arg, void (*fn)(void* const* lane_args), const char* what,
                         int site);
// A vector access of n x type at p that is not `align`-byte aligned: faults as a GPU would.
[[noreturn]] void emmy_emu_misaligned(int n, const char* type, const void* p, int store, int align);
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
  if (reinterpret_cast<uintptr_t>(p) % A != 0)
    emmy_emu_misaligned(N, type_name(p), p, store, static_cast<int>(A));
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
inline float exp2(float x) { return exp2f(x); }
inline float log(float x) { return logf(x); }
inline float tanh(float x) { return tanhf(x); }
inline float erf(float x) { return erff(x); }
inline float sqrt(float x) { return sqrtf(x); }
inline float rsqrt(float x) { return 1.0f / sqrtf(x); }
inline float fmax(float a, float b) { return fmaxf(a, b); }
inline float fmin(float a, float b) { return fminf(a, b); }
inline float abs(float x) { return fabsf(x); }
inline float inf() { return __builtin_inff(); }
inline float expm1(float x) { return expm1f(x); }
inline float log1p(float x) { return log1pf(x); }
inline float sin(float x) { return sinf(x); }
inline float cos(float x) { return cosf(x); }
inline float floor(float x) { return floorf(x); }
inline float ceil(float x) { return ceilf(x); }
inline float rint(float x) { return rintf(x); }
inline float trunc(float x) { return truncf(x); }
inline float pow(float x, float y) { return powf(x, y); }

// ---- tensor cores, ldmatrix and cp.async: warp collectives computed once per warp ----
template <class T>
inline unsigned pack_half2(float lo, float hi) {
  static_assert(is_half<T>::value, "pack_half2 takes emmy::f16 or emmy::bf16");
  return static_cast<unsigned>(from_float<T>(lo).bits) |
         static_cast<unsigned>(from_float<T>(hi).bits) << 16;
}

namespace emu {

struct MmaLane {
  frag_c* d;
  const frag_a* a;
  const frag_b* b;
  const frag_c* c;
};
// Gathers the whole warp's A and B per the fragment layouts (see frag_a), then for each element
// d = c + sum over k = 0..15, in that order, of float(a) * float(b), all in float. The products
// are exact in float (barring bf16 overflow), so only the rounding of the sum can differ from
// the tensor cores, which add the products in their own order and precision.
template <class T>
inline void mma_warp(void* const* lanes) {
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const MmaLane& m = *static_cast<const MmaLane*>(lanes[l]);
    const int g = l >> 2, t = l & 3;
    for (int r = 0; r < 4; ++r) {
      const unsigned w = m.a->x[r];
      const int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
      A[row][col] = to_float(T{static_cast<unsigned short>(w & 0xffffu)});
      A[row][col + 1] = to_float(T{static_cast<unsigned short>(w >> 16)});
    }
    for (int r = 0; r < 2; ++r) {
      const unsigned w = m.b->x[r];
      B[2 * t + 8 * r][g] = to_float(T{static_cast<unsigned short>(w & 0xffffu)});
      B[2 * t + 8 * r + 1][g] = to_float(T{static_cast<unsigned short>(w >> 16)});
    }
  }
  for (int l = 0; l < 32; ++l) {
    const MmaLane& m = *static_cast<const MmaLane*>(lanes[l]);
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) {  // each d.x[i] reads only c.x[i], so d may alias c
      const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
      float acc = m.c->x[i];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      m.d->x[i] = acc;
    }
  }
}

struct LdmatrixLane {
  unsigned* r;
  const unsigned char* row;
};
// Every lane's words are read here, at one moment, as the single warp instruction would.
template <int N, bool Trans>
inline void ldmatrix_warp(void* const* lanes) {
  const unsigned char* rows[32];
  for (int l = 0; l < 8 * N; ++l) rows[l] = static_cast<const LdmatrixLane*>(lanes[l])->row;
  for (int l = 0; l < 32; ++l) {
    unsigned* r = static_cast<const LdmatrixLane*>(lanes[l])->r;
    const int g = l >> 2, t = l & 3;
    for (int m = 0; m < N; ++m) {
      if (!Trans) {  // row g, columns 2t, 2t + 1
        __builtin_memcpy(&r[m], rows[8 * m + g] + 4 * t, 4);
      } else {  // column g, rows 2t, 2t + 1
        unsigned short lo, hi;
        __builtin_memcpy(&lo, rows[8 * m + 2 * t] + 2 * g, 2);
        __builtin_memcpy(&hi, rows[8 * m + 2 * t + 1] + 2 * g, 2);
        r[m] = static_cast<unsigned>(lo) | static_cast<unsigned>(hi) << 16;
      }
    }
  }
}

template <int N, bool Trans>
inline void ldmatrix_collective(unsigned (&r)[N], const void* smem_row_ptr, int site) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  // Only the lanes that supply a row address need a valid one.
  if (thread_linear() % warp_size < 8 * N && reinterpret_cast<uintptr_t>(smem_row_ptr) % 16 != 0)
    emmy_emu_misaligned(8, "b16 (ldmatrix row)", smem_row_ptr, 0, 16);
  LdmatrixLane me{r, static_cast<const unsigned char*>(smem_row_ptr)};
  emmy_emu_collective(&me, &ldmatrix_warp<N, Trans>, Trans ? "ldmatrix_trans" : "ldmatrix", site);
}

inline void cp_async_copy(void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
  __builtin_memcpy(dst, src, src_bytes);
  __builtin_memset(static_cast<unsigned char*>(dst) + src_bytes, 0, bytes - src_bytes);
}
// Performs the `n` oldest queued copies and drops them from the queue.
inline void cp_async_perform(ThreadCtx* c, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    const CpAsync& e = c->cp[i];
    cp_async_copy(e.dst, e.src, e.bytes, e.src_bytes);
  }
  for (unsigned i = n; i < c->cp_pending; ++i) c->cp[i - n] = c->cp[i];
  c->cp_pending -= n;
}
// Performs the copies of every group committed more than `keep` groups ago.
inline void cp_async_retire(ThreadCtx* c, unsigned keep) {
  unsigned n = 0;
  while (n < c->cp_pending && c->cp_groups - c->cp[n].group > keep) ++n;
  cp_async_perform(c, n);
}

}  // namespace emu

template <class T>
inline void mma_16816(frag_c& d, const frag_a& a, const frag_b& b, const frag_c& c,
                      int site = __builtin_LINE()) {
  static_assert(is_half<T>::value, "mma_16816 multiplies emmy::f16 or emmy::bf16");
  emu::MmaLane me{&d, &a, &b, &c};
  emmy_emu_collective(&me, &emu::mma_warp<T>, "mma_16816", site);
}

template <int N>
inline void ldmatrix(unsigned (&r)[N], const void* smem_row_ptr, int site = __builtin_LINE()) {
  emu::ldmatrix_collective<N, false>(r, smem_row_ptr, site);
}
template <int N>
inline void ldmatrix_trans(unsigned (&r)[N], const void* smem_row_ptr,
                           int site = __builtin_LINE()) {
  emu::ldmatrix_collective<N, true>(r, smem_row_ptr, site);
}

template <int BYTES>
inline void cp_async(void* smem_dst, const void* gmem_src, int src_bytes = BYTES) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp_async copies 4, 8 or 16 bytes");
  if (reinterpret_cast<uintptr_t>(smem_dst) % BYTES != 0)
    emmy_emu_misaligned(BYTES, "b8 (cp_async destination)", smem_dst, 1, BYTES);
  if (reinterpret_cast<uintptr_t>(gmem_src) % BYTES != 0)
    emmy_emu_misaligned(BYTES, "b8 (cp_async source)", gmem_src, 0, BYTES);
  src_bytes = src_bytes < 0 ? 0 : src_bytes > BYTES ? BYTES : src_bytes;
  emu::ThreadCtx* c = emu::ctx();
  if (c->cp_eager) {
    emu::cp_async_copy(smem_dst, gmem_src, BYTES, src_bytes);
    return;
  }
  // A full queue performs its oldest copy early: a copy may land any time before its wait.
  if (c->cp_pending == emu::kCpAsyncQueue) emu::cp_async_perform(c, 1);
  c->cp[c->cp_pending++] = {smem_dst, gmem_src, static_cast<unsigned short>(BYTES),
                            static_cast<unsigned short>(src_bytes), c->cp_groups};
}
inline void cp_async_commit() { ++emu::ctx()->cp_groups; }
template <int N>
inline void cp_async_wait() {
  static_assert(N >= 0, "cp_async_wait<N> needs N >= 0");
  emu::cp_async_retire(emu::ctx(), N);
}
inline void cp_async_wait_all() {
  cp_async_commit();
  emu::cp_async_retire(emu::ctx(), 0);
}

}  // namespace emmy
