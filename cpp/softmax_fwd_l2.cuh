// Softmax "auto" forward v14 for 16-bit rows just beyond the block class (32768 < C, while two rows per
// SM fit a share of L2; softmax_fwd.cu's launch_fwd_l2): one row per CTA of NT threads, two passes with L2
// as the row buffer. Pass 1 reads the row from HBM (default caching, so the lines stay in L2) and merges
// (max, sum) per batch of B packs; one block reduction; pass 2 re-reads the row, from L2, with
// evict-first hints and writes y (streaming stores). HBM traffic stays one read and one write per
// element while the rows in flight fit L2 (ncu, f32 50257 at 26 MB in flight: 273 MB read for 268);
// nothing else bounds the CTAs per SM (no shared memory, cluster or DSMEM), so 512-thread CTAs keep
// two independent rows per SM, one loading while the other reduces or stores. Measured on the H200
// (RESULTS.md, "v14"): 16-bit 40000-55000 +2 to +17% over the bulk-copy cluster, 65536 -3 to +7%; f32
// (rows twice the bytes: two per SM overflow L2), longer 16-bit rows and clusters of such CTAs lose;
// so does f32 with each row's first ~111 KB in shared memory (RESULTS.md, "v15 and v16": a reserve
// that large leaves pass 1's loads too little L1, and a bulk copy into it still loses 12%).
#pragma once

#include "softmax_rows.cuh"

namespace jm::cuda::smx {

constexpr int kL2Block = 512;  // CTA size: 2 per SM under the 64-register bound
constexpr int kL2Batch = 8;    // packs per thread in flight in pass 1 (pass 2, from L2: half)

// One batch's (max, sum) term: the packs p[b] at i0 + b * NT below `body`, their max (NaN-propagating) and the sum of
// their exps about it (safe_max: an all -inf batch sums 0). Also benchmarks/softmax_long_ab.cu's pipelined kernel.
template <int NT, int B, typename T, int V>
__device__ __forceinline__ MaxSum batch_max_sum(const Pack<T, V> (&p)[B], int i0, int body) {
  float bm = -INFINITY;
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (i0 + b * NT < body) bm = pack_max_nan(p[b], bm);
  }
  const float ref = safe_max(bm);
  float s = 0.0f;
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (i0 + b * NT < body) {
      float v[V];
      unpack_fresh(p[b], v);
#pragma unroll
      for (int j = 0; j < V; ++j) s += ex2_ftz((v[j] - ref) * kLog2e);
    }
  }
  return MaxSum{bm, s};
}

// NT is a compile-time stride, so a batch's addresses are one base plus immediates and the 64-register
// bound holds B = 8 packs without spills. The same -inf / NaN rules as the register rows (a NaN makes
// the row NaN, an all -inf row is NaN, other -inf entries give 0).
template <typename T, int NT = kL2Block, int B = kL2Batch>
__global__ void __launch_bounds__(NT, kMaxBlock / NT)
    softmax_fwd_l2_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  constexpr int V = kVec<T>;
  constexpr int B2 = B > 4 ? B / 2 : B;  // pass 2's batch: L2's shorter latency needs fewer in flight
  using P = Pack<T, V>;
  const int tid = static_cast<int>(threadIdx.x);
  const RowIter<false> it(NT);  // the edge loops' place: lane tid of NT
  trace_exit(0);
  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T* xr = x + row * int64_t{cols};
    T* yr = y + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const T* xb = xr + sp.head;
    T* yb = yr + sp.head;

    MaxSum acc = MergeOp::identity();
    for (int i0 = tid; i0 < sp.body; i0 += B * NT) {
      P p[B];
#pragma unroll
      for (int b = 0; b < B; ++b) {
        if (i0 + b * NT < sp.body) p[b] = load_raw<V>(xb, i0 + b * NT);
      }
      acc = MergeOp()(acc, batch_max_sum<NT>(p, i0, sp.body));
    }
    const MaxSum ms = block_reduce_rows<MergeOp>(with_edges(acc, xr, sp, cols, it), parity);
    const float inv = 1.0f / ms.s;

    for (int i0 = tid; i0 < sp.body; i0 += B2 * NT) {
      P p[B2];
#pragma unroll
      for (int b = 0; b < B2; ++b) {
        if (i0 + b * NT < sp.body) p[b] = load_stream<V>(xb, i0 + b * NT);
      }
#pragma unroll
      for (int b = 0; b < B2; ++b) {
        if (i0 + b * NT < sp.body) {
          float v[V];
          unpack_fresh(p[b], v);
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(ex2_ftz((v[j] - ms.m) * kLog2e) * inv);
          store_stream<V>(yb, i0 + b * NT, out);
        }
      }
    }
    write_edges(ms, inv, xr, yr, sp, cols, it);
  }
  trace_exit(1);
}

}  // namespace jm::cuda::smx
