// Packed (16-byte) accesses: packs of V elements, their loads and stores with and without cache hints,
// batched loads, the head/body/tail split of unaligned rows, and the float parameters' loads.
#pragma once

#include "cuda_base.cuh"

namespace jm::cuda {

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
// Packs of several 16-byte words (a norm's f32 y of a 16-bit x's pack: 8 floats) as that many streaming stores.
template <int V, typename T>
__device__ __forceinline__ void store_stream(T* base, int64_t pack, const Pack<T, V>& v) {
  Pack<T, V>* p = reinterpret_cast<Pack<T, V>*>(base) + pack;
  if constexpr (sizeof(Pack<T, V>) == 16) {
    uint4 u;
    memcpy(&u, &v, sizeof(u));
    __stcs(reinterpret_cast<uint4*>(p), u);
  } else if constexpr (sizeof(Pack<T, V>) % 16 == 0) {
    constexpr int kWords = sizeof(Pack<T, V>) / 16;
    uint4 u[kWords];
    memcpy(u, &v, sizeof(u));
#pragma unroll
    for (int w = 0; w < kWords; ++w) __stcs(reinterpret_cast<uint4*>(p) + w, u[w]);
  } else {
    *p = v;
  }
}

// Whole-sector stores of a 16-bit x's pack into f32 (8 floats of y, one 32-byte sector): where each lane stores its
// pack's y as two 16-byte words, each store instruction of a warp half-fills 32 sectors (RESULTS.md "v61", "v62").
// Lane pairs (lane ^ 1) holding adjacent packs of x, the even lane pack i and the odd one pack i + 1, swap half a pack
// instead (two shuffles of one word each): each lane then holds its half of both packs, the even lane their columns
// 0..3, the odd one 4..7, and storing the first pack's halves, then the second's, writes whole sectors. `own`: this
// lane's pack of x; `mask`: the lanes that execute the shuffles (the pair at least, `odd` their parity); halves[h]:
// the two words of x in this lane's half of the pair's pack h (0: the even lane's, 1: the odd one's).
__device__ __forceinline__ void sector_halves(const uint4& own, int odd, unsigned mask, uint2 (&halves)[2]) {
  const uint2 lo = make_uint2(own.x, own.y), hi = make_uint2(own.z, own.w);
  const uint2 send = odd ? lo : hi;  // the even lane gives its high half, the odd one its low half
  const uint2 got = make_uint2(__shfl_xor_sync(mask, send.x, 1), __shfl_xor_sync(mask, send.y, 1));
  halves[0] = odd ? got : lo;
  halves[1] = odd ? hi : got;
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

// for_row_packs over two arrays whose types may differ (a norm's x and dy of another dtype): f(i, pa, pb), with
// pa a Pack<A, V> and pb a Pack<B, V>, batched by kBatch's register budget for the pair.
template <int V, int kRegs = 0, typename A, typename B, typename F>
__device__ __forceinline__ void for_row_pack_pair(const A* a, const B* b, int64_t n, int lane, int tpr, F&& f) {
  if constexpr (std::is_same_v<A, B>) {
    for_row_packs<V, kRegs>({a, b}, n, lane, tpr, [&](int64_t i, const auto& p) { f(i, p[0], p[1]); });
  } else {
    struct Two {
      Pack<A, V> a;
      Pack<B, V> b;
    };
    constexpr int kWords = static_cast<int>((sizeof(A) * V + 3) / 4 + (sizeof(B) * V + 3) / 4);
    walk_batches<std::clamp((kRegs > 0 ? kRegs : 16) / kWords, 1, 8)>(
        n, lane, tpr, [&](int64_t i) { return Two{load_raw<V>(a, i), load_raw<V>(b, i)}; },
        [&](const Two& t, int64_t i) { f(i, t.a, t.b); });
  }
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

}  // namespace jm::cuda
