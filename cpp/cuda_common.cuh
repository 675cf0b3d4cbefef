// CUDA helpers shared by the jax_memops kernels (softmax.cu, norms.cu, gelu.cu): element types and
// packed (16-byte) accesses, warp/block reductions, error checks, launch geometry of the row and
// elementwise kernels, and the deterministic per-column reduction used for parameter gradients.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

// The XLA FFI headers trip two EDG front-end warnings under nvcc (#940: no return after an exhaustive
// switch, #2473: always_inline on a non-inline function) and, with -Wall -Wextra, host-compiler
// ones; silence them for those headers only.
#pragma nv_diag_suppress 940
#pragma nv_diag_suppress 2473
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wreturn-type"
#endif
#include "ffi_common.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#pragma nv_diag_default 940
#pragma nv_diag_default 2473

namespace jm::cuda {

namespace ffi = xla::ffi;

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- Element types ------------------------------------------------------------------------------

template <ffi::DataType D>
struct ElemOf;
template <>
struct ElemOf<ffi::DataType::F32> {
  using type = float;
};
template <>
struct ElemOf<ffi::DataType::BF16> {
  using type = __nv_bfloat16;
};
template <>
struct ElemOf<ffi::DataType::F16> {
  using type = __half;
};

// The CUDA element type of a dispatch_float tag: `using T = elem_t<decltype(tag)>;`.
template <typename Tag>
using elem_t = typename ElemOf<Tag::value>::type;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// float -> T with round-to-nearest-even.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// ---- Packed accesses ------------------------------------------------------------------------------

// Elements per 16-byte access; kernels take V = kVec<T> when C % V == 0 and every buffer is 16-byte
// aligned (then every row and every pack is aligned too), else V = 1.
template <typename T>
inline constexpr int kVec = static_cast<int>(16 / sizeof(T));

template <typename T, int V>
struct alignas(sizeof(T) * V < 16 ? sizeof(T) * V : 16) Pack {
  T v[V];
};

template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_raw(const T* base, int64_t pack) {
  return reinterpret_cast<const Pack<T, V>*>(base)[pack];
}
template <int V, typename T>
__device__ __forceinline__ void store_raw(T* base, int64_t pack, const Pack<T, V>& p) {
  reinterpret_cast<Pack<T, V>*>(base)[pack] = p;
}
template <int V, typename T>
__device__ __forceinline__ void unpack(const Pack<T, V>& p, float (&out)[V]) {
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = to_float(p.v[j]);
}
template <int V, typename T>
__device__ __forceinline__ void load_pack(const T* base, int64_t pack, float (&out)[V]) {
  unpack(load_raw<V>(base, pack), out);
}
template <int V, typename T>
__device__ __forceinline__ void store_pack(T* base, int64_t pack, const float (&in)[V]) {
  Pack<T, V> p;
#pragma unroll
  for (int j = 0; j < V; ++j) p.v[j] = from_float<T>(in[j]);
  store_raw<V>(base, pack, p);
}

// Named barrier `id` (1..15; 0 is __syncthreads') of `threads` threads (a multiple of 32): the warps of one team.
__device__ __forceinline__ void team_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// The two 16-bit elements of word w (element 0 in its low half), converted anew (see unpack_fresh).
template <typename T>
__device__ __forceinline__ void unpack_word_fresh(uint32_t w, float& lo, float& hi) {
  static_assert(sizeof(T) == 2);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // a bf16 is the top half of its float
    uint32_t l, h;
    asm volatile("shl.b32 %0, %1, 16;" : "=r"(l) : "r"(w));
    asm volatile("and.b32 %0, %1, 0xffff0000;" : "=r"(h) : "r"(w));
    lo = __uint_as_float(l);
    hi = __uint_as_float(h);
  } else {
    asm volatile("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
                 : "=f"(lo), "=f"(hi)
                 : "r"(w));
  }
}

// The floats of a pack, converted anew at each call: for 16-bit types volatile asm, which the compiler
// neither merges with an earlier identical conversion nor hoists, so a kernel that keeps packs in
// registers across several passes keeps them raw (half the registers), not as floats. f32 (or an odd
// V): unpack.
template <int V, typename T>
__device__ __forceinline__ void unpack_fresh(const Pack<T, V>& p, float (&out)[V]) {
  if constexpr (sizeof(T) == 4 || V % 2 != 0) {
    unpack(p, out);
  } else {
    uint32_t w[V / 2];
    memcpy(w, &p, sizeof(w));
#pragma unroll
    for (int i = 0; i < V / 2; ++i) unpack_word_fresh<T>(w[i], out[2 * i], out[2 * i + 1]);
  }
}

// unpack_fresh of a 16-byte pack held as one word vector (kernels that keep rows as uint4: a Pack of
// 16-bit elements copied from a load is moved around by halves, PRMT per pair); f32: the words' bits.
template <typename T>
__device__ __forceinline__ void unpack_words_fresh(const uint4& u, float (&out)[kVec<T>]) {
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(u.x), out[1] = __uint_as_float(u.y);
    out[2] = __uint_as_float(u.z), out[3] = __uint_as_float(u.w);
  } else {
    unpack_word_fresh<T>(u.x, out[0], out[1]);
    unpack_word_fresh<T>(u.y, out[2], out[3]);
    unpack_word_fresh<T>(u.z, out[4], out[5]);
    unpack_word_fresh<T>(u.w, out[6], out[7]);
  }
}

// A 16-byte read-only load (__ldg, LDG.E.128.CONSTANT; load_raw compiles to a plain LDG.E.128 for 16-bit
// packs). With store_raw, against the streaming pair below, measured faster for the softmax forward's
// register rows, not for the norms' rows (RESULTS.md "v20").
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_nc(const T* base, int64_t pack) {
  static_assert(sizeof(Pack<T, V>) == 16);
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(base) + pack);
  Pack<T, V> out;
  memcpy(&out, &u, sizeof(u));
  return out;
}

// Streaming (evict-first) 16-byte accesses for data read or written once (__ldcs / __stcs); packs
// smaller than 16 bytes (V = 1) fall back to plain accesses.
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_stream(const T* base, int64_t pack) {
  const Pack<T, V>* p = reinterpret_cast<const Pack<T, V>*>(base) + pack;
  if constexpr (sizeof(Pack<T, V>) == 16) {
    const uint4 u = __ldcs(reinterpret_cast<const uint4*>(p));
    Pack<T, V> out;
    static_assert(sizeof(out) == sizeof(u));
    memcpy(&out, &u, sizeof(u));
    return out;
  } else {
    return *p;
  }
}
// A 16-byte pack where `in`, else 4 words of `fill` (e.g. 0: zeros of every type): streaming (__ldcs,
// kStream) or read-only (__ldg, load_nc's). The choice is made on whole 32-bit words: a per-element select
// (`in ? load_stream(...) : Pack{...}`) compiles to two byte permutes per 16-bit pair.
template <bool kStream, int V, typename T>
__device__ __forceinline__ Pack<T, V> load_or(const T* base, int64_t pack, bool in, uint32_t fill) {
  static_assert(sizeof(Pack<T, V>) == 16);
  uint4 u = make_uint4(fill, fill, fill, fill);
  if (in) {
    if constexpr (kStream) {
      u = __ldcs(reinterpret_cast<const uint4*>(base) + pack);
    } else {
      u = __ldg(reinterpret_cast<const uint4*>(base) + pack);
    }
  }
  Pack<T, V> out;
  memcpy(&out, &u, sizeof(u));
  return out;
}
// A 16-byte pack of shared memory in one access (ld.shared.v4). A plain `*p` whose elements are used
// one by one (pack_max_nan's f32 branch) compiles to four 4-byte loads.
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_shared(const Pack<T, V>* p) {
  if constexpr (sizeof(Pack<T, V>) == 16) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    Pack<T, V> out;
    memcpy(&out, &u, sizeof(u));
    return out;
  } else {
    return *p;
  }
}
template <int V, typename T>
__device__ __forceinline__ void store_stream(T* base, int64_t pack, const Pack<T, V>& v) {
  Pack<T, V>* p = reinterpret_cast<Pack<T, V>*>(base) + pack;
  if constexpr (sizeof(Pack<T, V>) == 16) {
    uint4 u;
    memcpy(&u, &v, sizeof(u));
    __stcs(reinterpret_cast<uint4*>(p), u);
  } else {
    *p = v;
  }
}

// Packs each thread loads before using any, K arrays at a time: memory-bound loops need several loads
// in flight, which the compiler won't arrange across the branches of a loop body on its own. About kRegs
// registers of loaded data per thread (default 8 per array; a 2-byte element still takes one), at most
// 8 packs: sized so that every kernel fits 64 registers without spills (ptxas -v).
template <typename T, int V, int K, int kRegs>
inline constexpr int kBatch = std::clamp(
    (kRegs > 0 ? kRegs : 8 * K) / (K * static_cast<int>((sizeof(T) * V + 3) / 4)), 1, 8);

// Batched-load budget (registers, see kBatch) where the loop body loads scale/bias too.
constexpr int kParamBatchRegs = 8;

// Indices i = first, first + step, ... < n in batches of B: each batch's loads (load(i): a pack, or a
// struct of packs) all issued before any is used (use(packs, i)).
template <int B, class Load, class Use>
__device__ __forceinline__ void walk_batches(int64_t n, int64_t first, int64_t step, Load&& load, Use&& use) {
  for (int64_t i0 = first; i0 < n; i0 += B * step) {
    decltype(load(i0)) p[B];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (i0 + b * step < n) p[b] = load(i0 + b * step);
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (i0 + b * step < n) use(p[b], i0 + b * step);
    }
  }
}

// The packs of K arrays at one index.
template <typename T, int V, int K>
struct PackSet {
  Pack<T, V> p[K];
};

// Row pass: packs i = lane, lane + tpr, ... < n of the K arrays `rows` (same row of each), kBatch
// packs loaded before f(i, packs) runs on each; `packs` is `const Pack<T, V> (&)[K]`.
template <int V, int kRegs = 0, int K, typename T, typename F>
__device__ __forceinline__ void for_row_packs(const T* const (&rows)[K], int64_t n, int lane, int tpr,
                                              F&& f) {
  walk_batches<kBatch<T, V, K, kRegs>>(
      n, lane, tpr,
      [&](int64_t i) {
        PackSet<T, V, K> set;
#pragma unroll
        for (int k = 0; k < K; ++k) set.p[k] = load_raw<V>(rows[k], i);
        return set;
      },
      [&](const PackSet<T, V, K>& set, int64_t i) { f(i, set.p); });
}

inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Whether the 16-byte path applies: C % kVec == 0 and all (non-null) buffers 16-byte aligned.
template <typename T>
bool vectorizable(int64_t cols, std::initializer_list<const void*> buffers) {
  if (cols % kVec<T> != 0) return false;
  for (const void* p : buffers) {
    if (p != nullptr && !aligned16(p)) return false;
  }
  return true;
}

// Calls f(std::integral_constant<int, V>{}) with V = kVec<T> or 1.
template <typename T, typename F>
ffi::Error with_vec(bool vectorized, F&& f) {
  if (vectorized) return f(std::integral_constant<int, kVec<T>>{});
  return f(std::integral_constant<int, 1>{});
}

// A row's split for 16-byte accesses when rows need not start on a 16-byte boundary (C not a multiple
// of V, or an offset buffer): a scalar head up to the first boundary, `body` aligned V-packs, a scalar
// tail. The head and tail together are the row's `edges()` (< 2V elements): edge e is column e (head)
// or cols - edges() + e (tail). An invalid row (past the last) is empty. Another buffer with the same
// address modulo 16 (y for x) splits the same way.
template <typename T, int V>
struct RowSpan {
  int head = 0, body = 0, tail = 0;
  __device__ RowSpan(const T* row, int cols, bool valid) {
    if (!valid) return;
    const int misaligned = static_cast<int>((reinterpret_cast<std::uintptr_t>(row) / sizeof(T)) % V);
    head = min((V - misaligned) % V, cols);
    body = (cols - head) / V;
    tail = cols - head - body * V;
  }
  __device__ int edges() const { return head + tail; }
  __device__ int edge_col(int e, int cols) const { return e < head ? e : cols - edges() + e; }
};

// The row of a parameter (ParamView: f32, absent or split in contiguous row groups) used by row r;
// nullptr when absent. The division is skipped in the common single-group case.
__device__ __forceinline__ const float* param_row(const ParamView& p, int64_t r, int64_t cols) {
  if (p.data == nullptr) return nullptr;
  const int64_t group = r < p.rows_per_group ? 0 : r / p.rows_per_group;
  return p.data + group * cols;
}

// Pack `pack` of a parameter row, or `absent` everywhere when the parameter is absent.
template <int V>
__device__ __forceinline__ void load_param(const float* prow, int64_t pack, float absent,
                                           float (&out)[V]) {
  if (prow != nullptr) {
    load_pack<V>(prow, pack, out);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = absent;
  }
}

// Columns col .. col + V - 1 of a parameter row (V a multiple of 4), `absent` when prow is nullptr, by
// one of four load plans:
//   kAny: float4 loads where `vec` (prow + col 16-byte aligned), else scalar loads (a misaligned row's
//     packs), tested per call. ptxas if-converts those two small branches, so every call issues both
//     plans' loads and the `absent` moves, most predicated off (ncu, bf16 LayerNorm C = 768: 2 scalar
//     LDG and 1.8 MOV per element, of 30 instructions; RESULTS.md, "v7").
//   kDense: the caller knows prow != nullptr and vec: float4 loads and nothing else.
//   kVector: the caller knows vec: absent or float4 loads (a row with one parameter absent).
//   kScalar: absent or scalar loads (misaligned rows).
// with_param_plan picks kDense, kVector or kScalar once per row, around a whole unrolled pass.
enum class ParamLoad { kAny, kDense, kVector, kScalar };

template <int V, ParamLoad kPlan = ParamLoad::kAny>
__device__ __forceinline__ void load_param_cols(const float* prow, int col, bool vec, float absent,
                                                float (&out)[V]) {
  static_assert(V % 4 == 0);
  if (kPlan != ParamLoad::kDense && prow == nullptr) {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = absent;
  } else if (kPlan == ParamLoad::kDense || kPlan == ParamLoad::kVector || (kPlan == ParamLoad::kAny && vec)) {
#pragma unroll
    for (int q = 0; q < V / 4; ++q) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(prow + col) + q);
      out[4 * q] = f.x;
      out[4 * q + 1] = f.y;
      out[4 * q + 2] = f.z;
      out[4 * q + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = __ldg(prow + col + j);
  }
}

template <ParamLoad kPlan>
using ParamPlan = std::integral_constant<ParamLoad, kPlan>;

// Runs pass(ParamPlan<kDense>) when `dense` (every parameter row the pass reads is present and 16-byte
// aligned at its packs), else pass(ParamPlan<kVector>) when `vec` (those present aligned: LayerNorm without a bias
// keeps 16-byte loads of its scale; v28 measured kScalar's element loads there at 0.73-0.75x the speed with both,
// bf16 C >= 2048), else pass(ParamPlan<kScalar>): uniform branches per row.
template <class F>
__device__ __forceinline__ void with_param_plan(bool dense, bool vec, F&& pass) {
  if (dense) {
    pass(ParamPlan<ParamLoad::kDense>{});
  } else if (vec) {
    pass(ParamPlan<ParamLoad::kVector>{});
  } else {
    pass(ParamPlan<ParamLoad::kScalar>{});
  }
}

// ---- Reductions ------------------------------------------------------------------------------------

struct SumOp {
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Max that propagates NaN (fmaxf drops it), so a NaN anywhere makes a softmax row's max NaN.
struct MaxOp {
  static constexpr float kIdentity = -INFINITY;
  __device__ float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};

// MaxOp in one instruction (max.NaN.f32, sm_80+; MaxOp's select takes two or three): the result is
// NaN when either input is, else the larger.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return MaxOp()(a, b);
#endif
}

// max_nan of m and a pack's elements. 16-bit packs compare in pairs, as they are (one HMNMX2 per two
// elements, exact; no conversion), and convert the pair's result once.
template <int V, typename T>
__device__ __forceinline__ float pack_max_nan(const Pack<T, V>& p, float m) {
  if constexpr (sizeof(T) == 2 && V % 2 == 0) {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    T2 pair[V / 2];
    memcpy(pair, &p, sizeof(pair));
    T2 acc = pair[0];
#pragma unroll
    for (int i = 1; i < V / 2; ++i) acc = __hmax2_nan(acc, pair[i]);
    return max_nan(m, max_nan(to_float(acc.x), to_float(acc.y)));
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) m = max_nan(m, to_float(p.v[j]));
    return m;
  }
}

// 2^a by the hardware's ex2 alone (exp2f adds a subnormal-result fix-up of 2-3 instructions): results
// below 2^-126 flush to 0; -inf gives 0, +inf gives +inf, NaN gives NaN.
__device__ __forceinline__ float ex2_ftz(float a) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}

// Butterfly (xor) reduction within aligned groups of `width` lanes (a power of two <= 32). Every lane
// of a group ends with the bitwise-same result (the ops are commutative). All 32 lanes must call it.
template <class Op, int N>
__device__ __forceinline__ void warp_reduce(float (&v)[N], Op op, int width = 32) {
  for (int offset = width / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int n = 0; n < N; ++n) v[n] = op(v[n], __shfl_xor_sync(0xffffffffu, v[n], offset));
  }
}

// Reduction over the whole block (blockDim.x a multiple of 32; every thread calls it and gets the
// result). Warp partials go through shared memory; the order is fixed, so results are deterministic.
template <class Op, int N>
__device__ __forceinline__ void block_reduce(float (&v)[N], Op op) {
  __shared__ float partial[N][32];
  warp_reduce(v, op);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  __syncthreads();  // the previous call's readers are done with `partial`
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) partial[n][warp] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = lane < warps ? partial[n][lane] : Op::kIdentity;
  warp_reduce(v, op);
}

__device__ __forceinline__ float warp_reduce_sum(float v, int width = 32) {
  float a[1] = {v};
  warp_reduce(a, SumOp{}, width);
  return a[0];
}
__device__ __forceinline__ float warp_reduce_max(float v, int width = 32) {
  float a[1] = {v};
  warp_reduce(a, MaxOp{}, width);
  return a[0];
}
__device__ __forceinline__ float block_reduce_sum(float v) {
  float a[1] = {v};
  block_reduce(a, SumOp{});
  return a[0];
}
__device__ __forceinline__ float block_reduce_max(float v) {
  float a[1] = {v};
  block_reduce(a, MaxOp{});
  return a[0];
}

// Reduction over the `tpr` threads that share a row (see RowPlan): shuffles when tpr <= 32, else the
// whole block. Uniform across the block, as its callers' row loops are.
template <class Op, int N>
__device__ __forceinline__ void row_reduce(float (&v)[N], int tpr, Op op) {
  if (tpr > 32) {
    block_reduce(v, op);
  } else {
    warp_reduce(v, op, tpr);
  }
}
__device__ __forceinline__ float row_sum(float v, int tpr) {
  return tpr > 32 ? block_reduce_sum(v) : warp_reduce_sum(v, tpr);
}
__device__ __forceinline__ float row_max(float v, int tpr) {
  return tpr > 32 ? block_reduce_max(v) : warp_reduce_max(v, tpr);
}

// ---- Bulk copies into shared memory (sm_90: cp.async.bulk + mbarrier; elsewhere they trap) ----------
// One thread issues a 1-D bulk copy global -> its CTA's shared memory and announces its byte count on
// an mbarrier (arrive + expect_tx); the copy engine completes the transaction; any thread waits for the
// barrier's phase. Addresses and sizes must be multiples of 16 bytes; one phase takes < 2^20 bytes.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define JM_BULK_COPY 1
#else
#define JM_BULK_COPY 0
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Initializes an mbarrier for one arrival per phase, visible to the async proxy and the cluster
// (call from one thread, then a block barrier). Both fences: fence.mbarrier_init (CUTLASS's
// fence_barrier_init) releases the init at cluster scope; fence.proxy.async.shared::cta is the CUDA
// programming guide's "make the initialized barrier visible in the async proxy" (the bulk copies'
// complete_tx is an async-proxy access of the barrier). Once per kernel: their cost does not matter.
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
#if JM_BULK_COPY
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// Orders this thread's earlier generic-proxy accesses of shared memory (after a block barrier: the
// block's) before later bulk copies into it.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if JM_BULK_COPY
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// The one arrival of bar's current phase, expecting `bytes` of bulk copies (0: the phase completes now).
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
#if JM_BULK_COPY
  asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}"
               ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Bulk copy of `bytes` from global `src` to shared `dst`, completing on `bar`; evict-first in L2 (the
// data is read once).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if JM_BULK_COPY
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
      ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

// An asynchronous prefetch of the 16-byte words inside [p, p + bytes) from HBM into L2 (sm_90:
// cp.async.bulk.prefetch.L2, in pieces of at most 64 KB; nothing on older targets). A hint that holds no registers or
// shared memory and that nothing waits for: the loads that later read those bytes hit L2. kKeep: the lines arrive with
// L2's evict_last priority (the softmax forward's since v50, RESULTS.md "v50"): kept ahead of the streaming lines until
// a read with another policy (bulk_load's evict_first) takes them.
template <bool kKeep = false>
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
#if JM_BULK_COPY
  if (bytes <= 0) return;
  constexpr uint64_t kPiece = 64 * 1024;
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  const uint64_t end = (a + static_cast<uint64_t>(bytes)) & ~uint64_t{15};
  uint64_t policy = 0;
  if constexpr (kKeep) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  for (uint64_t s = (a + 15) & ~uint64_t{15}; s < end; s += kPiece) {
    const uint32_t n = static_cast<uint32_t>(end - s < kPiece ? end - s : kPiece);
    if constexpr (kKeep) {
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(s), "r"(n), "l"(policy)
                   : "memory");
    } else {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s), "r"(n) : "memory");
    }
  }
#endif
}

// This CTA's shared-memory address `local` (smem_addr) as the address of the same variable in cluster
// CTA `rank`'s shared memory.
__device__ __forceinline__ uint32_t cluster_map(uint32_t local, int rank) {
#if JM_BULK_COPY
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
#else
  __trap();
  return 0;
#endif
}

// Writes the two floats (a, b) (or the one float a) to `remote` (cluster_map: another CTA's shared
// memory, or this one's), completing 8 (4) bytes of transactions on that CTA's mbarrier `remote_bar`
// (cluster_map too): a one-way message, no round trip and no barrier with the receiver.
__device__ __forceinline__ void push_pair(uint32_t remote, float a, float b, uint32_t remote_bar) {
#if JM_BULK_COPY
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
               ::"r"(remote), "f"(a), "f"(b), "r"(remote_bar)
               : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void push_one(uint32_t remote, float a, uint32_t remote_bar) {
#if JM_BULK_COPY
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
               ::"r"(remote), "r"(__float_as_uint(a)), "r"(remote_bar)
               : "memory");
#else
  __trap();
#endif
}

// Blocks until bar has completed the phase of parity `parity` (0 for its 1st, 3rd, ... phase). A wait
// of over 2^35 cycles (~17 s at 1.98 GHz; generous for sanitizers and time slicing) traps: a protocol
// error becomes a launch failure, not a hung GPU.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if JM_BULK_COPY
  uint32_t done = 0;
  const long long start = clock64();
  do {
    if (clock64() - start > (1LL << 35)) __trap();
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
#else
  __trap();
#endif
}

// ---- Errors and device properties -----------------------------------------------------------------

// Environment variable `name`, "" when unset: the kernels' A/B switches, each read once per process.
inline std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The value that `choices` pairs with environment variable `name`'s value, `otherwise` when it is unset or
// names none of them (the A/B switches' parsing; each caller keeps the result in a function-local static).
template <typename E>
E env_choice(const char* name, std::initializer_list<std::pair<std::string_view, E>> choices, E otherwise) {
  const std::string v = env_value(name);
  for (const auto& [key, value] : choices) {
    if (v == key) return value;
  }
  return otherwise;
}

// The start of every CUDA handler's FFI binding: the stream context; each op's buffers and attributes
// follow from cpp/bindings.h (returned as a prvalue: the builder is never copied or moved).
inline auto cuda_binding() { return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>(); }

inline ffi::Error check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

// The error of the last kernel launch, if any.
inline ffi::Error check_launch(const char* what) { return check_cuda(cudaGetLastError(), what); }

// The first failure among checks evaluated in order (braced lists evaluate left to right).
inline ffi::Error first_error(std::initializer_list<ffi::Error> errors) {
  for (const ffi::Error& err : errors) {
    if (err.failure()) return err;
  }
  return ffi::Error::Success();
}

struct DeviceInfo {
  int device = 0;          // the current device's index (cudaGetDevice)
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of shared memory a block may use after opting in
  int cc_major = 0;        // compute capability (9: Hopper, thread-block clusters)
  int l2_bytes = 0;        // L2 cache size
};

// Properties of the current device, queried once per device (host-side only, no stream work).
inline ffi::Error device_info(DeviceInfo* out) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> sm_counts[kMaxDevices];
  static std::atomic<int> smem_sizes[kMaxDevices];
  static std::atomic<int> cc_majors[kMaxDevices];
  static std::atomic<int> l2_sizes[kMaxDevices];
  int dev = 0;
  if (auto err = check_cuda(cudaGetDevice(&dev), "cudaGetDevice"); err.failure()) return err;
  out->device = dev;
  const bool cacheable = dev >= 0 && dev < kMaxDevices;
  if (cacheable) {
    out->sm_count = sm_counts[dev].load(std::memory_order_relaxed);
    out->max_smem_optin = smem_sizes[dev].load(std::memory_order_relaxed);
    out->cc_major = cc_majors[dev].load(std::memory_order_relaxed);
    out->l2_bytes = l2_sizes[dev].load(std::memory_order_relaxed);
    if (out->sm_count > 0 && out->max_smem_optin > 0 && out->cc_major > 0) return ffi::Error::Success();
  }
  if (auto err = first_error(
          {check_cuda(cudaDeviceGetAttribute(&out->sm_count, cudaDevAttrMultiProcessorCount, dev),
                      "cudaDeviceGetAttribute(MultiProcessorCount)"),
           check_cuda(cudaDeviceGetAttribute(&out->max_smem_optin,
                                             cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                      "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)"),
           check_cuda(cudaDeviceGetAttribute(&out->cc_major, cudaDevAttrComputeCapabilityMajor, dev),
                      "cudaDeviceGetAttribute(ComputeCapabilityMajor)"),
           check_cuda(cudaDeviceGetAttribute(&out->l2_bytes, cudaDevAttrL2CacheSize, dev),
                      "cudaDeviceGetAttribute(L2CacheSize)")});
      err.failure()) {
    return err;
  }
  if (cacheable) {
    sm_counts[dev].store(out->sm_count, std::memory_order_relaxed);
    smem_sizes[dev].store(out->max_smem_optin, std::memory_order_relaxed);
    cc_majors[dev].store(out->cc_major, std::memory_order_relaxed);
    l2_sizes[dev].store(out->l2_bytes, std::memory_order_relaxed);
  }
  return ffi::Error::Success();
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) and checks the launch. Static plus dynamic
// shared memory above 48 KiB needs an opt-in; our kernels' static part is under 1 KiB.
template <typename... P, typename... A>
ffi::Error launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                  const char* what, A... args) {
  if (smem > 47 * 1024) {
    if (auto err = check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(smem)),
                              what);
        err.failure()) {
      return err;
    }
  }
  kernel<<<grid, block, smem, stream>>>(args...);
  return check_launch(what);
}

// The grid of a row kernel whose CTAs loop over row groups. kPersistent: at most the CTAs resident at
// once (no partial last wave). kFull: one CTA per row group, so a CTA that finishes its rows frees its
// slot for a fresh one whose loads start at once, while the others still drain their stores. Measured
// on the H200 (RESULTS.md, "v6", "v7"), full / persistent for the register kernels (softmax forward
// C <= 8192 / 16384 and backward C <= 8192, the norms' forward): 1.02-1.13 in f32, median 1.02-1.05 in
// bf16; they take it by default, the cluster, stream and norm backward kernels stay persistent.
// JAX_MEMOPS_GRID=persistent|full (read once per process; A/B benchmarks and tests) overrides every
// kernel's default.
enum class Grid { kPersistent, kFull };
inline Grid grid_mode(Grid preferred) {
  static const std::optional<Grid> forced = env_choice<std::optional<Grid>>(
      "JAX_MEMOPS_GRID", {{"full", Grid::kFull}, {"persistent", Grid::kPersistent}}, std::nullopt);
  return forced.value_or(preferred);
}
inline int64_t grid_for(int64_t groups, int64_t resident, Grid preferred) {
  constexpr int64_t kMaxGrid = 0x7fffffff;  // the row loops take any rows beyond
  const int64_t want = grid_mode(preferred) == Grid::kFull ? groups : std::min(groups, resident);
  return std::max<int64_t>(1, std::min(want, kMaxGrid));
}

// Blocks of `block` threads (with `smem` dynamic shared memory) of `kernel` that the whole GPU holds at
// once: the grid of a persistent kernel (no partial last wave). Host-side query, no stream work.
template <typename... P>
ffi::Error resident_blocks(void (*kernel)(P...), int block, size_t smem, const char* what, int64_t* out) {
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  int per_sm = 0;
  if (auto err = check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, smem), what);
      err.failure()) {
    return err;
  }
  *out = int64_t{std::max(per_sm, 1)} * dev.sm_count;
  return ffi::Error::Success();
}

// ---- Row kernels: geometry ----------------------------------------------------------------------------

// Row kernels use blocks of at most kMaxRowThreads threads and are declared
// __launch_bounds__(kMaxRowThreads, 2): up to 64 registers, so two one-row blocks (whose load and compute
// phases overlap) still fit an SM. Fewer registers would cost spills; the lost occupancy is made up by
// batched loads (several in flight per thread).
constexpr int kMaxRowThreads = 512;

// A row kernel's geometry, as the kernel sees it. `tpr` threads (a power of two) share a row: when
// tpr <= 32 a block of kSmallRowBlock threads holds several rows and reduces with shuffles, when
// tpr > 32 the block is one row (blockDim.x == tpr). The grid strides over rows a block at a time.
struct RowPlan {
  int tpr = 1;
  bool cached = false;  // the first pass copies each row into dynamic shared memory
};

__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char jm_dynamic_smem[];
  return jm_dynamic_smem;
}

// This thread's place in a row kernel's geometry.
struct RowSlot {
  int lane;            // index among the tpr threads of its row
  int group;           // which of the block's rows
  int rows_per_block;

  __device__ explicit RowSlot(const RowPlan& p)
      : lane(static_cast<int>(threadIdx.x) & (p.tpr - 1)),
        group(static_cast<int>(threadIdx.x) / p.tpr),
        rows_per_block(static_cast<int>(blockDim.x) / p.tpr) {}

  // This row's slice (`elems` elements) of the shared-memory row cache; nullptr when not cached.
  // A thread only reads back the packs it wrote itself, so the cache needs no barrier.
  template <typename T>
  __device__ T* cache(const RowPlan& p, int64_t elems) const {
    return p.cached ? reinterpret_cast<T*>(dynamic_smem()) + group * elems : nullptr;
  }
};

struct RowLaunch {
  RowPlan plan;
  dim3 grid;
  dim3 block;
  size_t smem = 0;
};

// About kPacksPerThread packs per thread, up to a 512-thread block per row. The row cache is used only
// when it costs no occupancy: the blocks that an SM's registers hold (1024 threads at 64 registers)
// must fit its shared memory too, else one long row per SM would alternate between loading and
// computing with nothing overlapping. Otherwise later passes re-read the row from global memory
// (mostly L2 hits). At most 32 blocks per SM (the residency limit), then the grid strides.
inline RowLaunch plan_rows(const DeviceInfo& dev, RowShape s, int vec, int64_t cache_bytes_per_row) {
  constexpr int64_t kPacksPerThread = 4;
  constexpr int kSmallRowBlock = 128;
  constexpr int kThreadsPerSm = 1024;           // what 64 registers per thread allow
  constexpr int64_t kStaticSmemReserve = 1024;  // block_reduce partials (see launch)
  RowLaunch l;
  const int64_t packs = s.cols / vec;
  while (l.plan.tpr < kMaxRowThreads && int64_t{l.plan.tpr} * kPacksPerThread < packs) l.plan.tpr *= 2;
  const int block = l.plan.tpr > 32 ? l.plan.tpr : kSmallRowBlock;
  const int rows_per_block = block / l.plan.tpr;
  const int64_t smem = rows_per_block * cache_bytes_per_row;
  l.plan.cached = (smem + kStaticSmemReserve) * (kThreadsPerSm / block) <= dev.max_smem_optin;
  l.smem = l.plan.cached ? static_cast<size_t>(smem) : 0;
  const int64_t blocks = std::min(ceil_div(s.rows, rows_per_block), int64_t{dev.sm_count} * 32);
  l.grid = dim3(static_cast<unsigned>(blocks));
  l.block = dim3(static_cast<unsigned>(block));
  return l;
}

// Plans and launches a row kernel kernel(args..., plan); `cache_bytes_per_row` is what its row cache
// holds per row.
template <typename... P, typename... A>
ffi::Error launch_rows(void (*kernel)(P...), cudaStream_t stream, RowShape s, int vec,
                       int64_t cache_bytes_per_row, const char* what, A... args) {
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  const RowLaunch l = plan_rows(dev, s, vec, cache_bytes_per_row);
  return launch(kernel, l.grid, l.block, l.smem, stream, what, args..., l.plan);
}

// ---- Elementwise kernels ------------------------------------------------------------------------------

constexpr int kElemBlock = 256;

// One block per kElemBlock * batch packs (kFull, the default since v7): each thread loads its one batch
// (for_grid_packs's kBatch) and exits, as the row kernels' full grids do; measured on the H200 against
// the former grid (JAX_MEMOPS_GRID=persistent: up to 32 blocks per SM, the residency limit, striding):
// GELU forward f32 1.03-1.07, the rest 0.99-1.06 (RESULTS.md, "v7").
inline dim3 elementwise_grid(const DeviceInfo& dev, int64_t packs, int batch) {
  const int64_t capped = std::min(ceil_div(packs, kElemBlock), int64_t{dev.sm_count} * 32);
  const int64_t full = ceil_div(packs, int64_t{kElemBlock} * batch);
  const int64_t grid = grid_mode(Grid::kFull) == Grid::kFull ? full : capped;
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(grid, 0x7fffffff))));
}

// (row, column) of element `first`, advanced by `step` elements at a time without dividing per step.
struct RowColCursor {
  int64_t r, c, dr, dc, cols;
  __device__ RowColCursor(int64_t first, int64_t step, int64_t cols_)
      : r(first / cols_), c(first % cols_), dr(step / cols_), dc(step % cols_), cols(cols_) {}
  __device__ void advance() {
    r += dr;
    c += dc;
    if (c >= cols) {
      c -= cols;
      ++r;
    }
  }
};

// Grid-stride loop over the `packs` V-element packs of the K flat arrays `src` (rows of `cols`
// elements), kBatch packs loaded before f(p, at, packs) runs on each; `at` is pack p's (row, column).
template <int V, int kRegs = 0, int K, typename T, typename F>
__device__ __forceinline__ void for_grid_packs(const T* const (&src)[K], int64_t packs, int64_t cols,
                                               F&& f) {
  constexpr int B = kBatch<T, V, K, kRegs>;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  RowColCursor at(first * V, stride * V, cols);
  for (int64_t p0 = first; p0 < packs; p0 += B * stride) {
    Pack<T, V> p[B][K];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int64_t q = p0 + b * stride;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (q < packs) p[b][k] = load_raw<V>(src[k], q);
      }
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int64_t q = p0 + b * stride;
      if (q < packs) f(q, at, p[b]);
      at.advance();
    }
  }
}

// How an elementwise kernel finds a pack's scale and bias, fixed per launch (param_mode, host):
//   kScalars: both are attributes (the *_value arguments): no (row, column) is needed, and the tensor
//     is one flat run of packs;
//   kRows: each parameter one row of C floats (or an attribute): the pack's column only;
//   kGroups: rows in contiguous groups (vmap over the parameters): param_row's group of the pack's row.
// Why: with the test per pack (absent? grouped?) and the cursor, the bf16 GELU forward issued ~33
// instructions per element (SASS, one 8-element pack), where its math takes 13, and ran at 84-88% of
// the copy (RESULTS.md, "v8").
enum class ParamMode { kScalars, kRows, kGroups };

template <ParamMode M>
using ParamModeTag = std::integral_constant<ParamMode, M>;

inline ParamMode param_mode(const ParamView& scale, const ParamView& bias, int64_t rows) {
  if (scale.data == nullptr && bias.data == nullptr) return ParamMode::kScalars;
  const auto one_row = [rows](const ParamView& p) { return p.data == nullptr || p.rows_per_group >= rows; };
  return one_row(scale) && one_row(bias) ? ParamMode::kRows : ParamMode::kGroups;
}

// Calls f(ParamModeTag<m>{}).
template <typename F>
ffi::Error with_param_mode(ParamMode m, F&& f) {
  switch (m) {
    case ParamMode::kScalars:
      return f(ParamModeTag<ParamMode::kScalars>{});
    case ParamMode::kRows:
      return f(ParamModeTag<ParamMode::kRows>{});
    default:
      return f(ParamModeTag<ParamMode::kGroups>{});
  }
}

// The V parameter values of the pack at `at` (a column multiple of V) under mode M; `value` where the
// parameter is an attribute.
template <ParamMode M, int V>
__device__ __forceinline__ void load_param_at(const ParamView& p, const RowColCursor& at, int64_t cols,
                                              float value, float (&out)[V]) {
  if constexpr (M == ParamMode::kScalars) {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = value;
  } else {
    load_param<V>(M == ParamMode::kRows ? p.data : param_row(p, at.r, cols), at.c / V, value, out);
  }
}

// Calls f(ParamModeTag<M>{}, std::integral_constant<int, V>{}) with the launch's parameter mode M and
// pack width V: kVec<T> where the packs are aligned — a flat run of packs under kScalars, each row's
// otherwise — and every buffer is 16-byte aligned, else 1.
template <typename T, typename F>
ffi::Error with_param_mode_and_vec(const ParamView& scale, const ParamView& bias, const RowShape& s,
                                   std::initializer_list<const void*> buffers, F&& f) {
  return with_param_mode(param_mode(scale, bias, s.rows), [&](auto mode) {
    constexpr bool kFlat = decltype(mode)::value == ParamMode::kScalars;
    return with_vec<T>(vectorizable<T>(kFlat ? s.size() : s.cols, buffers), [&](auto vec) { return f(mode, vec); });
  });
}

// ---- Deterministic column sums (parameter gradients) -------------------------------------------------

constexpr int kColTile = 32;  // columns per block (threadIdx.x)
constexpr int kColRows = 32;  // threads per column (threadIdx.y)

// Per-column sums over contiguous row groups: one block per (32-column tile, group), grid-striding
// over both. Thread (x, y) sums rows y, y+32, ... of its group in order, then a fixed shared-memory
// tree over y. No atomics: every run gives the same bits. elem(r, c, a, b) yields element (r, c)'s
// contributions to out_a and out_b (either may be nullptr) and may write side outputs.
template <class Elem>
__global__ void __launch_bounds__(kColTile* kColRows, 1)
    column_sums_kernel(Elem elem, int64_t cols, int64_t groups, int64_t rows_per_group, float* out_a,
                       float* out_b) {
  __shared__ float sum_a[kColRows][kColTile];
  __shared__ float sum_b[kColRows][kColTile];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t tiles = ceil_div(cols, kColTile);
  for (int64_t g = blockIdx.y; g < groups; g += gridDim.y) {
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int64_t c = t * kColTile + tx;
      float a = 0.0f;
      float b = 0.0f;
      if (c < cols) {
        const int64_t end = (g + 1) * rows_per_group;
#pragma unroll 4
        for (int64_t r = g * rows_per_group + ty; r < end; r += kColRows) {
          float ea, eb;
          elem(r, c, ea, eb);
          a += ea;
          b += eb;
        }
      }
      sum_a[ty][tx] = a;
      sum_b[ty][tx] = b;
      __syncthreads();
      for (int half = kColRows / 2; half > 0; half /= 2) {
        if (ty < half) {
          sum_a[ty][tx] += sum_a[ty + half][tx];
          sum_b[ty][tx] += sum_b[ty + half][tx];
        }
        __syncthreads();
      }
      if (ty == 0 && c < cols) {
        if (out_a != nullptr) out_a[g * cols + c] = sum_a[0][tx];
        if (out_b != nullptr) out_b[g * cols + c] = sum_b[0][tx];
      }
      __syncthreads();  // the next tile rewrites sum_a / sum_b
    }
  }
}

// Column sums of elem's contributions a into ga and b into gb (each wanted when data != nullptr). One
// launch when both share a row grouping; otherwise one launch each, so elem then runs twice per element
// (any side output it writes is written twice, with the same value).
template <class Elem>
ffi::Error launch_column_sums(cudaStream_t stream, const Elem& elem, int64_t cols, const GradView& ga,
                              const GradView& gb, const char* what) {
  auto run = [&](const GradView& grouping, float* a, float* b) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(cols, kColTile), INT_MAX)),
                    static_cast<unsigned>(std::min<int64_t>(grouping.groups, 65535)));
    return launch(column_sums_kernel<Elem>, grid, dim3(kColTile, kColRows), 0, stream, what, elem, cols,
                  grouping.groups, grouping.rows_per_group, a, b);
  };
  const bool fused = ga.data != nullptr && gb.data != nullptr && ga.groups == gb.groups;
  if (ga.data != nullptr) {
    if (auto err = run(ga, ga.data, fused ? gb.data : nullptr); err.failure()) return err;
  }
  if (gb.data != nullptr && !fused) return run(gb, nullptr, gb.data);
  return ffi::Error::Success();
}

// Zero-fills a wanted parameter gradient (the sum over zero rows).
inline ffi::Error zero_grad(cudaStream_t stream, const GradView& g, int64_t cols, const char* what) {
  if (g.data == nullptr) return ffi::Error::Success();
  return check_cuda(
      cudaMemsetAsync(g.data, 0, static_cast<size_t>(g.groups * cols) * sizeof(float), stream), what);
}

}  // namespace jm::cuda
