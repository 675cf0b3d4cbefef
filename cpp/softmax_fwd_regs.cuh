// Softmax "auto" v3 forward of the sub-warp and block classes (softmax_launch.cuh's table): the register rows
// of softmax_rows.cuh (same geometry, RowIter / RowSpan / row_reduce, same -inf/NaN rules) with more
// bytes in flight and fewer instructions per element:
//   * prefetch (kPrefetch; an A/B option: measured 1-10% slower than kKeepExp / one raw set at
//     C = 512..8192 on the H200): a thread issues the loads of its next row group before it
//     works on the current one, into a second set of N = 4 raw packs, so 64 bytes per thread stay in
//     flight through the reductions, barrier and stores (v2: only between them). Two raw sets (32
//     registers) fit 64 registers (ptxas -v: 59-64, no spills) where raw + f32 exps do not (f32
//     exps of 32 bf16 elements spill by 124 bytes, exps + a second set for f32 by 12), so the
//     prefetching kernel keeps raw packs for every dtype and takes two exps per element (sum, output);
//   * max.NaN (one instruction; MaxOp's select takes two or three; 16-bit packs: max.NaN on raw
//     pairs, half an instruction per element, no conversion) and ex2.approx.ftz alone (exp2f adds a
//     2-3 instruction subnormal fix-up): per element about 11 instructions for bf16 in the
//     prefetching kernel (half a pair max, 2 x (unpack, sub, mul, ex2), add, mul, half a convert, 1/8
//     load and store), was ~17; at the copy's bandwidth an H200 SM must retire 3.25 bf16 (1.8 f32)
//     elements per cycle: ~36 of its 128 thread-instruction issue slots (28%) and 6.5 of its 16
//     MUFU.EX2 per cycle (40%), so with loads in flight throughout it is memory-bound;
//   * sub-warp rows reduce by a max butterfly and then a sum butterfly (2 shuffles and 2 operations
//     per step) instead of a butterfly of (max, sum) pairs (2 shuffles, a compare-select and an exp
//     per step); block rows keep the one-barrier (max, sum) merge.
// The default: one row group in flight; f32 keeps its exps (kKeepExp: one exp per element), 16-bit
// types one raw set (two exps), as v2 but with the instructions above.
#pragma once

#include "softmax_rows.cuh"

namespace jm::cuda::smx {

// Max that propagates NaN, as a butterfly operation.
struct MaxNanOp {
  using P = float;
  __device__ static P identity() { return -INFINITY; }
  __device__ P operator()(P a, P b) const { return max_nan(a, b); }
};

// kKeepExp: keep the exps as floats (one exp per element; f32 only fits 64 registers), else the raw
// packs (exp again at the output); kPrefetch: two register sets of N packs, the next row group's
// loads issued before the current one is worked on; kCluster: one row per thread-block cluster (the
// (max, sum) merge through DSMEM, softmax_rows.cuh), else sub-warp or block rows.
// kCachedIo: x read by __ldg (load_nc) and y written by plain stores (store_raw) — v20, the sub-warp and
// block rows' default: over the streaming hints in three rounds f32 +3 to +7% at C = 128, 1024, 2048 (512:
// +4, +1, -4%), bf16 -1 to +12%, RESULTS.md "v20"; since v21 the 8-pack rows' default too (f32 32768 +5 to
// +7%, RESULTS.md "v21") — else streaming (evict-first) loads and stores, __ldcs / __stcs (v14, v20's
// 8-pack rows and the A/B variants).
// kMinBlocks > 1: sub-warp rows only (blocks of at most kSubWarpBlock), at least that many blocks of kSubWarpBlock
// resident per SM (registers capped to fit). v24's 16-bit 4-pack rows take 6 (40 registers; 64 left 4 blocks, 50%
// occupancy, where XLA's Triton kernel runs at 100%): bf16 C = 128 +2.3 / +2.6%, C = 64 +12% in one process
// (RESULTS.md "v24"); v25 / v26's 2-pack rows 8 (16-bit, launched in blocks of 128: 32 registers) or 6 (f32).
template <typename T, int N, bool kKeepExp, bool kPrefetch, bool kCluster = false, bool kCachedIo = false,
          int kMinBlocks = 1>
__global__ void __launch_bounds__(kMinBlocks > 1 ? kSubWarpBlock : kMaxBlock, kMinBlocks)
    softmax_fwd_regs_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int tpr) {
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const RowIter<kCluster> it(tpr);

  // The body packs of this thread's row in row group `base` (none past the last row).
  auto load_group = [&](int64_t base, P (&p)[N]) {
    const int64_t row = base + it.group;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, valid);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (it.lane + k * it.rt < sp.body) {
        p[k] = kCachedIo ? load_nc<V>(xr + sp.head, it.lane + k * it.rt)
                         : load_stream<V>(xr + sp.head, it.lane + k * it.rt);
      }
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
    T* yb = yr + sp.head;
    const bool sub_warp = !kCluster && tpr <= 32;  // uniform over the grid

    // The thread's max m over its packs and edges (edges: re-read from L1 at each use, not kept).
    float v[kKeepExp ? N : 1][V];  // kKeepExp: the packs as floats, then their exps
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (it.lane + k * it.rt < sp.body) {
        if constexpr (kKeepExp) {
          unpack(raw[k], v[k]);
#pragma unroll
          for (int j = 0; j < V; ++j) m = max_nan(m, v[k][j]);
        } else {
          m = pack_max_nan(raw[k], m);  // 16-bit: in pairs, unconverted
        }
      }
    }
    for (int e = it.lane; e < sp.edges(); e += it.rt) m = max_nan(m, to_float(xr[sp.edge_col(e, cols)]));

    // Exps relative to `ref`: sub-warp rows take the row max first (a max butterfly, then a sum
    // butterfly: 2 shuffles and 2 ops per step, no rescaling exp as in MergeOp's butterfly); block rows
    // the thread's own max (one MergeOp reduction: one barrier). safe_max: a row (thread) of only
    // -inf gets exps exp(-inf - 0) = 0, not NaN.
    const float row_max = sub_warp ? butterfly<MaxNanOp>(m, tpr) : m;
    const float ref = safe_max(row_max);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (it.lane + k * it.rt < sp.body) {  // warp-uniform except in one warp per k
        if constexpr (kKeepExp) {
#pragma unroll
          for (int j = 0; j < V; ++j) {
            v[k][j] = ex2_ftz((v[k][j] - ref) * kLog2e);
            s += v[k][j];
          }
        } else {
          unpack_fresh(raw[k], v[0]);
#pragma unroll
          for (int j = 0; j < V; ++j) s += ex2_ftz((v[0][j] - ref) * kLog2e);
        }
      }
    }
    for (int e = it.lane; e < sp.edges(); e += it.rt) {
      s += ex2_ftz((to_float(xr[sp.edge_col(e, cols)]) - ref) * kLog2e);
    }
    const MaxSum row_ms = sub_warp ? MaxSum{row_max, butterfly<AddOp>(s, tpr)}
                                   : row_reduce<MergeOp, kCluster>(MaxSum{m, s}, tpr, parity);
    const float inv_s = 1.0f / row_ms.s;

    // y = exp(x - M) / S. Kept exps: e * inv_s (sub-warp: e is relative to M already) or
    // e * exp(m - M) * inv_s (block: 0 for a thread of only -inf); an all -inf row (M = -inf, S = 0)
    // gives 0 * inf = NaN or exp(-inf + inf) = NaN, as jax.nn.softmax.
    const float f = kKeepExp && !sub_warp ? exp_e(m - row_ms.m) * inv_s : inv_s;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (it.lane + k * it.rt < sp.body) {
        P out;
        if constexpr (kKeepExp) {
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(v[k][j] * f);
        } else {
          unpack_fresh(raw[k], v[0]);
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(ex2_ftz((v[0][j] - row_ms.m) * kLog2e) * f);
        }
        if constexpr (kCachedIo) {
          store_raw<V>(yb, it.lane + k * it.rt, out);
        } else {
          store_stream<V>(yb, it.lane + k * it.rt, out);
        }
      }
    }
    write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
  }
  if constexpr (kCluster) cluster_sync();  // keep this CTA's shared memory alive for the others' reads
}

}  // namespace jm::cuda::smx
