// Softmax "auto" v3 forward of the sub-warp and block classes (softmax.cu's table): the register rows
// of softmax_rows.cuh (same geometry, RowIter / RowSpan / row_reduce, same -inf/NaN rules) with less
// work per element and more bytes in flight:
//   * one exp per element for every dtype: each thread keeps e = exp(x - m) as f32 (m: its own max)
//     and writes y = e * exp(m - M) / S. 16-bit types used to keep raw packs and take a second exp
//     for the output to fit 64 registers; 32 f32 exps per thread now fit (ptxas -v: no spills);
//   * the max is max.NaN (one instruction, was two or three) and the exp is ex2.approx.ftz alone
//     (exp2f adds a subnormal fix-up): per element about 7 instructions (bf16: unpack, max, sub,
//     mul, ex2, add, mul, half a pack-convert, an eighth of a load and a store), was ~17;
//   * f32 prefetches: a thread issues the loads of its next row group before it works on the current
//     one (two register sets of 4 packs), so its 64 bytes stay in flight through the reductions and
//     stores instead of only between them. 16-bit types have no room for a second set.
#pragma once

#include "softmax_rows.cuh"

namespace jm::cuda::smx {

// Whether the v3 register forward loads the next row group while it works on the current one.
template <typename T>
inline constexpr bool kFwdPrefetch = sizeof(T) == 4;

template <typename T, int N, bool kKeepExp, bool kPrefetch>
__global__ void __launch_bounds__(kMaxBlock, 1)
    softmax_fwd_regs_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int tpr) {
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const RowIter<false> it(tpr);

  // The body packs of this thread's row in row group `base` (none past the last row).
  auto load_group = [&](int64_t base, P (&p)[N]) {
    const int64_t row = base + it.group;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, valid);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (it.lane + k * it.rt < sp.body) p[k] = load_stream<V>(xr + sp.head, it.lane + k * it.rt);
    }
  };

  P next[N];
  if constexpr (kPrefetch) {
    if (it.base < rows) load_group(it.base, next);
  }
  int parity = 0;
  for (int64_t base = it.base; base < rows; base += it.step, parity ^= 1) {
    const int64_t row = base + it.group;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, valid);

    P raw[N];
    if constexpr (kPrefetch) {
#pragma unroll
      for (int k = 0; k < N; ++k) raw[k] = next[k];
      if (base + it.step < rows) load_group(base + it.step, next);
    } else {
      load_group(base, raw);
    }

    T* yr = y + (valid ? row : 0) * int64_t{cols};
    if constexpr (kKeepExp) {
      float v[N][V];
      float m = -INFINITY;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          unpack(raw[k], v[k]);
#pragma unroll
          for (int j = 0; j < V; ++j) m = max_nan(m, v[k][j]);
        }
      }
      const float mm = safe_max(m);
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {  // warp-uniform except in one warp per k
#pragma unroll
          for (int j = 0; j < V; ++j) {
            v[k][j] = ex2_ftz((v[k][j] - mm) * kLog2e);
            s += v[k][j];
          }
        }
      }
      const MaxSum row_ms = row_reduce<MergeOp, false>(with_edges(MaxSum{m, s}, xr, sp, cols, it), tpr, parity);
      const float inv_s = 1.0f / row_ms.s;
      const float f = exp_e(m - row_ms.m) * inv_s;  // 0 for a thread of only -inf; NaN rows stay NaN
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(v[k][j] * f);
          store_stream<V>(yr + sp.head, it.lane + k * it.rt, out);
        }
      }
      write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
    } else {
      // Raw packs kept (16-bit: half the registers of floats), converted at each of three uses; the
      // output's exp is taken relative to the row max directly.
      float m = -INFINITY;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          float v[V];
          unpack_fresh(raw[k], v);
#pragma unroll
          for (int j = 0; j < V; ++j) m = max_nan(m, v[j]);
        }
      }
      const float mm = safe_max(m);
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          float v[V];
          unpack_fresh(raw[k], v);
#pragma unroll
          for (int j = 0; j < V; ++j) s += ex2_ftz((v[j] - mm) * kLog2e);
        }
      }
      const MaxSum row_ms = row_reduce<MergeOp, false>(with_edges(MaxSum{m, s}, xr, sp, cols, it), tpr, parity);
      const float inv_s = 1.0f / row_ms.s;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          float v[V];
          unpack_fresh(raw[k], v);
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(ex2_ftz((v[j] - row_ms.m) * kLog2e) * inv_s);
          store_stream<V>(yr + sp.head, it.lane + k * it.rt, out);
        }
      }
      write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
    }
  }
}

}  // namespace jm::cuda::smx
