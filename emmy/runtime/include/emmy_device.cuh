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
template <class T>
struct is_half {
  static constexpr bool value = false;
};
template <>
struct is_half<f16> {
  static constexpr bool value = true;
};
template <>
struct is_half<bf16> {
  static constexpr bool value = true;
};

// One lane's share of the operands of mma.m16n8k16 (A 16x16 row-major, B 16x8 column-major,
// C/D 16x8 f32), laid out as in the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating
// point type"); g = lane / 4, t = lane % 4:
//   A: x[r] holds A[g + 8 * (r & 1)][2t + 8 * (r >> 1) + {0, 1}]
//   B: x[r] holds B[2t + 8r + {0, 1}][g]
//   C: x[i] is C[g + 8 * (i >> 1)][2t + (i & 1)]
// Each unsigned packs two 16-bit values, the lower column (A) or row (B) index in the low half.
struct frag_a {
  unsigned x[4];
};
struct frag_b {
  unsigned x[2];
};
struct frag_c {
  float x[4];
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
// ex2.approx.ftz: 2 ulp, flushes subnormal results to 0 (as the emulator does)
__device__ __forceinline__ float exp2(float x) { return exp2f(x); }
__device__ __forceinline__ float log(float x) { return logf(x); }
__device__ __forceinline__ float tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float erf(float x) { return erff(x); }
__device__ __forceinline__ float sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ float fmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float fmin(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ float abs(float x) { return fabsf(x); }
__device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float expm1(float x) { return expm1f(x); }
__device__ __forceinline__ float log1p(float x) { return log1pf(x); }
__device__ __forceinline__ float sin(float x) { return sinf(x); }
__device__ __forceinline__ float cos(float x) { return cosf(x); }
__device__ __forceinline__ float floor(float x) { return floorf(x); }
__device__ __forceinline__ float ceil(float x) { return ceilf(x); }
__device__ __forceinline__ float rint(float x) { return rintf(x); }
__device__ __forceinline__ float trunc(float x) { return truncf(x); }
__device__ __forceinline__ float pow(float x, float y) { return powf(x, y); }

// ---- tensor cores, ldmatrix and cp.async (sm_80+); layouts at frag_a ----
// Two values rounded to T and packed, lo in the low half: one cvt for both.
template <class T>
__device__ __forceinline__ unsigned pack_half2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack_half2<f16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <>
__device__ __forceinline__ unsigned pack_half2<bf16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// D = A * B + C over the warp (d may be c): every lane must call it, converged.
template <class T>
__device__ __forceinline__ void mma_16816(frag_c& d, const frag_a& a, const frag_b& b,
                                          const frag_c& c) {
  static_assert(is_half<T>::value, "mma_16816 multiplies emmy::f16 or emmy::bf16");
}
// volatile: a .sync.aligned instruction must not be moved into divergent code
#define EMMY_MMA_16816(T, ty)                                                               \
  template <>                                                                               \
  __device__ __forceinline__ void mma_16816<T>(frag_c& d, const frag_a& a, const frag_b& b,  \
                                               const frag_c& c) {                           \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ty "." ty ".f32 "                 \
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"                 \
                 : "=f"(d.x[0]), "=f"(d.x[1]), "=f"(d.x[2]), "=f"(d.x[3])                     \
                 : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[0]),           \
                   "r"(b.x[1]), "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]));         \
  }
EMMY_MMA_16816(f16, "f16")
EMMY_MMA_16816(bf16, "bf16")
#undef EMMY_MMA_16816

__device__ __forceinline__ unsigned smem_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// N 8x8 matrices of 16-bit values from shared memory; lane i gives the address of row i % 8
// of matrix i / 8 (16-byte aligned). r[m] gets row lane / 4, columns 2 * (lane % 4) + {0, 1}
// of matrix m; ldmatrix_trans gets those of the transposed matrix instead.
// The "memory" clobber orders them after the shared stores they read.
#define EMMY_LDMATRIX(name, trans)                                                          \
  template <int N>                                                                          \
  __device__ __forceinline__ void name(unsigned(&r)[N], const void* smem_row_ptr) {         \
    static_assert(N == 1 || N == 2 || N == 4, #name " loads 1, 2 or 4 matrices");           \
    const unsigned p = smem_address(smem_row_ptr);                                          \
    if constexpr (N == 1)                                                                   \
      asm volatile("ldmatrix.sync.aligned.m8n8.x1" trans ".shared.b16 {%0}, [%1];"          \
                   : "=r"(r[0]) : "r"(p) : "memory");                                       \
    else if constexpr (N == 2)                                                              \
      asm volatile("ldmatrix.sync.aligned.m8n8.x2" trans ".shared.b16 {%0,%1}, [%2];"       \
                   : "=r"(r[0]), "=r"(r[1]) : "r"(p) : "memory");                           \
    else                                                                                    \
      asm volatile("ldmatrix.sync.aligned.m8n8.x4" trans ".shared.b16 {%0,%1,%2,%3}, [%4];" \
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(p) : "memory");   \
  }
EMMY_LDMATRIX(ldmatrix, "")
EMMY_LDMATRIX(ldmatrix_trans, ".trans")
#undef EMMY_LDMATRIX

// Asynchronous copy of BYTES (4, 8, 16; both addresses aligned to it) from global to shared
// memory, complete after the cp_async_wait that covers its group. With src_bytes < BYTES only
// that many bytes are read and the rest of the destination is zero-filled (for ragged edges).
// 16-byte copies bypass L1 (.cg), the only cache mode PTX allows the smaller ones is .ca.
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem_dst, const void* gmem_src) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp_async copies 4, 8 or 16 bytes");
  const unsigned d = smem_address(smem_dst);
  const unsigned long long s = __cvta_generic_to_global(gmem_src);
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(s) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(s), "n"(BYTES)
                 : "memory");
}
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem_dst, const void* gmem_src, int src_bytes) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp_async copies 4, 8 or 16 bytes");
  const unsigned d = smem_address(smem_dst);
  const unsigned long long s = __cvta_generic_to_global(gmem_src);
  if constexpr (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(s),
                 "r"(src_bytes) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d), "l"(s), "n"(BYTES),
                 "r"(src_bytes) : "memory");
}
// Closes the group of this thread's cp_asyncs issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight. It orders only
// this thread's copies: other threads see them after a sync_threads() that follows the wait.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// Commits and waits for everything this thread has in flight.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

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

// ---- pointwise ops: one function per op of emmy/base/pointwise_ops.py ----
// Each is torch's definition of the op. Floats arrive as f32 (every float storage type
// computes in f32), integers as int or long long (exact, in their own width), bools as bool.
#define EMMY_PW __device__ __forceinline__
EMMY_PW bool is_nan(float x) { return x != x; }
EMMY_PW float pw_abs(float x) { return abs(x); }
template <class I>
EMMY_PW I pw_abs(I x) { return x < 0 ? -x : x; }
EMMY_PW float pw_sqrt(float x) { return sqrt(x); }
EMMY_PW float pw_rsqrt(float x) { return 1.0f / sqrt(x); }
EMMY_PW float pw_log(float x) { return log(x); }
EMMY_PW float pw_log1p(float x) { return log1p(x); }
EMMY_PW float pw_expm1(float x) { return expm1(x); }
EMMY_PW float pw_sin(float x) { return sin(x); }
EMMY_PW float pw_cos(float x) { return cos(x); }
EMMY_PW float pw_erf(float x) { return erf(x); }
EMMY_PW float pw_reciprocal(float x) { return 1.0f / x; }
// sign(nan) is 0, as torch's (0 < x) - (x < 0)
template <class T>
EMMY_PW T pw_sign(T x) { return static_cast<T>((T(0) < x) - (x < T(0))); }
// rounding: integers are already whole; round() is half to even, as torch's
EMMY_PW float pw_floor(float x) { return floor(x); }
EMMY_PW float pw_ceil(float x) { return ceil(x); }
EMMY_PW float pw_round(float x) { return rint(x); }
EMMY_PW float pw_trunc(float x) { return trunc(x); }
template <class I>
EMMY_PW I pw_floor(I x) { return x; }
template <class I>
EMMY_PW I pw_ceil(I x) { return x; }
template <class I>
EMMY_PW I pw_round(I x) { return x; }
template <class I>
EMMY_PW I pw_trunc(I x) { return x; }
EMMY_PW float pw_pow(float x, float y) { return pow(x, y); }
// an integer power by squaring; a negative exponent leaves 1, -1 or 0, as torch's
template <class I>
EMMY_PW I pw_pow(I x, I y) {
  if (y < 0) return x == 1 ? I(1) : x == -1 ? ((y & 1) ? I(-1) : I(1)) : I(0);
  I r = 1;
  for (; y; y >>= 1, x *= x)
    if (y & 1) r *= x;
  return r;
}
// clamps and extrema propagate a NaN of x (and maximum/minimum one of either side)
EMMY_PW float pw_clamp_min(float x, float lo) { return is_nan(x) ? x : fmax(x, lo); }
EMMY_PW float pw_clamp_max(float x, float hi) { return is_nan(x) ? x : fmin(x, hi); }
EMMY_PW float pw_clamp(float x, float lo, float hi) { return pw_clamp_max(pw_clamp_min(x, lo), hi); }
template <class I>
EMMY_PW I pw_clamp_min(I x, I lo) { return x < lo ? lo : x; }
template <class I>
EMMY_PW I pw_clamp_max(I x, I hi) { return x > hi ? hi : x; }
template <class I>
EMMY_PW I pw_clamp(I x, I lo, I hi) { return pw_clamp_max(pw_clamp_min(x, lo), hi); }
// floor division as torch's div_floor_floating: from fmod, so a quotient that a / b
// rounds up to a whole number is not floored past it
EMMY_PW float pw_floor_divide(float a, float b) {
  if (b == 0.0f) return a / b;
  float mod = fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0.0f && (b < 0.0f) != (mod < 0.0f)) div -= 1.0f;
  if (div == 0.0f) return copysign(0.0f, a / b);
  float floored = floor(div);
  return div - floored > 0.5f ? floored + 1.0f : floored;
}
// integers round toward -inf; a zero divisor (torch raises) gives 0, no trap
template <class I>
EMMY_PW I pw_floor_divide(I a, I b) {
  if (b == 0) return 0;
  I q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
EMMY_PW float pw_maximum(float a, float b) { return is_nan(a) || is_nan(b) ? a + b : fmax(a, b); }
EMMY_PW float pw_minimum(float a, float b) { return is_nan(a) || is_nan(b) ? a + b : fmin(a, b); }
template <class I>
EMMY_PW I pw_maximum(I a, I b) { return a > b ? a : b; }
template <class I>
EMMY_PW I pw_minimum(I a, I b) { return a < b ? a : b; }
// activations
EMMY_PW float pw_softplus(float x, float beta, float threshold) {
  return x * beta > threshold ? x : log1p(exp(x * beta)) / beta;
}
EMMY_PW float pw_hardsigmoid(float x) { return fmin(fmax(x + 3.0f, 0.0f), 6.0f) / 6.0f; }
EMMY_PW float pw_hardswish(float x) { return x * fmin(fmax(x + 3.0f, 0.0f), 6.0f) / 6.0f; }
EMMY_PW float pw_elu(float x, float alpha, float scale, float input_scale) {
  return x > 0.0f ? x * scale : alpha * scale * expm1(x * input_scale);
}
EMMY_PW float pw_leaky_relu(float x, float slope) { return x > 0.0f ? x : x * slope; }
EMMY_PW float pw_mish(float x) { return x * tanh(pw_softplus(x, 1.0f, 20.0f)); }
// comparisons, logic and bits
template <class T>
EMMY_PW bool pw_eq(T a, T b) { return a == b; }
template <class T>
EMMY_PW bool pw_ne(T a, T b) { return a != b; }
template <class T>
EMMY_PW bool pw_lt(T a, T b) { return a < b; }
template <class T>
EMMY_PW bool pw_le(T a, T b) { return a <= b; }
template <class T>
EMMY_PW bool pw_gt(T a, T b) { return a > b; }
template <class T>
EMMY_PW bool pw_ge(T a, T b) { return a >= b; }
EMMY_PW bool pw_isnan(float x) { return is_nan(x); }
EMMY_PW bool pw_isinf(float x) { return abs(x) == inf(); }
template <class I>
EMMY_PW bool pw_isnan(I) { return false; }
template <class I>
EMMY_PW bool pw_isinf(I) { return false; }
EMMY_PW bool pw_logical_and(bool a, bool b) { return a && b; }
EMMY_PW bool pw_logical_or(bool a, bool b) { return a || b; }
EMMY_PW bool pw_logical_xor(bool a, bool b) { return a != b; }
EMMY_PW bool pw_logical_not(bool a) { return !a; }
template <class I>
EMMY_PW I pw_bitwise_and(I a, I b) { return a & b; }
template <class I>
EMMY_PW I pw_bitwise_or(I a, I b) { return a | b; }
template <class I>
EMMY_PW I pw_bitwise_xor(I a, I b) { return a ^ b; }
template <class I>
EMMY_PW I pw_bitwise_not(I a) { return ~a; }
EMMY_PW bool pw_bitwise_not(bool a) { return !a; }
// selection and fused arithmetic
template <class T>
EMMY_PW T pw_where(bool c, T a, T b) { return c ? a : b; }
EMMY_PW float pw_lerp(float a, float b, float w) {
  return abs(w) < 0.5f ? a + w * (b - a) : b - (b - a) * (1.0f - w);
}
template <class T>
EMMY_PW T pw_addcmul(T x, T a, T b, T value) { return x + value * a * b; }
EMMY_PW float pw_addcdiv(float x, float a, float b, float value) { return x + value * a / b; }
// conversions: to a float storage type rounds to it (the value stays an f32); to an
// integer truncates; to bool is x != 0
template <class X>
EMMY_PW float pw_to_f32(X x) { return static_cast<float>(x); }
template <class X>
EMMY_PW float pw_to_f16(X x) { return to_float(from_float<f16>(static_cast<float>(x))); }
template <class X>
EMMY_PW float pw_to_bf16(X x) { return to_float(from_float<bf16>(static_cast<float>(x))); }
template <class X>
EMMY_PW int pw_to_i32(X x) { return static_cast<int>(x); }
template <class X>
EMMY_PW long long pw_to_i64(X x) { return static_cast<long long>(x); }
template <class X>
EMMY_PW bool pw_to_bool(X x) { return x != X(0); }
#undef EMMY_PW

// The two values of a word packed as pack_half2<T> makes it (lo in the low half), as floats.
template <class T>
__device__ __forceinline__ void unpack(unsigned w, float& lo, float& hi) {
  static_assert(is_half<T>::value, "unpack takes emmy::f16 or emmy::bf16");
  lo = to_float(T{static_cast<unsigned short>(w & 0xffffu)});
  hi = to_float(T{static_cast<unsigned short>(w >> 16)});
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
struct op_min {
  __device__ __forceinline__ static float identity() { return inf(); }
  __device__ __forceinline__ float operator()(float a, float b) const { return fmin(a, b); }
};
struct op_prod {
  __device__ __forceinline__ static float identity() { return 1.0f; }
  __device__ __forceinline__ float operator()(float a, float b) const { return a * b; }
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
