// Softmax "auto" backward for long rows (sm_90; an A/B option, JAX_MEMOPS_SOFTMAX_BWD=tma in softmax.cu):
// dx = y * (dy - sum(dy * y)) per row with the row's y and dy in shared memory, filled by bulk copies
// (cp.async.bulk + mbarrier), the backward twin of softmax_fwd_tma.cuh's one-buffer f32 variant (v5-s1).
// (The register cluster class of softmax_rows.cuh issues a row's loads only after the previous row's
// cluster barrier and stores: 79-80% of the copy-equivalent bandwidth at f32 C = 50257 and 131072 on the
// H200, 0.91-1.0x elsewhere.)
//
// A cluster of k CTAs (k = 1..16) owns one row at a time and walks rows base, base + step, ... (a
// persistent grid of clusters). CTA r of the cluster holds packs [r * chunk, (r + 1) * chunk) of the
// row's 16-byte-aligned body of y and of dy: one shared-memory buffer per tensor ([y share | dy share],
// 2 x chunk x 16 bytes), both bulk copies completing on one mbarrier (expect_tx = both byte counts). The
// row's scalar head and tail (misaligned C) are read from global memory by the cluster's first lanes, as
// in the register classes. Per row, in each CTA: a block barrier (every thread is done with the previous
// row's buffers), thread 0 refills them with this row -> wait -> partial dot = sum(dy * y) (f32) from
// 16-byte shared loads -> merged over the block, then the cluster (DSMEM, one cluster barrier) ->
// dx = y * (dy - dot) from the buffers again, 16-byte streaming stores. One buffer per tensor, refilled
// only after the row's output pass: a CTA has no row in flight while it reduces and stores, the other
// CTAs of its SM hide that (the forward's measured lesson: one buffer and a smaller cluster beat two
// buffers; the cluster size k is what costs). A second variant (NP > 0, below) copies the buffers into
// registers and refills them at once, with 1024-thread CTAs and half the k. Arithmetic as the register backward (f32 accumulation,
// y * (dy - dot) per element), so the -inf/NaN rules are the same: a NaN in y or dy makes dot NaN and
// the whole row's dx NaN (NaN rows of the forward have y all NaN); a y = 0 entry (a -inf logit of a
// finite row) gives dx = 0 * (dy - dot) = +-0.
#pragma once

#include "softmax_fwd_tma.cuh"

namespace jm::cuda::smx {

// Variants (template parameter NP; JAX_MEMOPS_SOFTMAX_BWD picks, cpp/softmax.cu):
//   NP = 0 ("tma"): kTmaBlock threads; the buffers are read in both passes (dot, output) and refilled
//     only after the row's output pass.
//   NP > 0 ("tma-reg"): kMaxBlock threads; each thread copies its <= NP packs of each buffer into
//     registers right after they land, a block barrier, and the next row's copies are issued at once:
//     they are in flight through the whole reduction, cluster barrier and output pass (the forward's
//     16-bit v5-reg protocol). NP = 4 (32 registers of data, as the register cluster class) holds 4096
//     packs per tensor per CTA, so k is half of NP = 0's (whose 2-3 CTAs per SM take 64-99 KB each):
//     f32 32768 / 50257 / 131072 at k = 2 / 4 / 8, 16-bit at k = 1 / 2 / 4; one CTA per SM (registers).
// chunk: packs of each tensor's buffer per CTA (the dynamic shared memory holds 2 x chunk packs).
template <typename T, int NP>
__global__ void __launch_bounds__(NP == 0 ? kTmaBlock : kMaxBlock, 1)
    softmax_bwd_tma_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                           int cols, int chunk) {
#if JM_BULK_COPY
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  __shared__ uint64_t bar;
  P* buf_y = reinterpret_cast<P*>(dynamic_smem());  // [chunk] packs of y, then [chunk] of dy
  P* buf_dy = buf_y + chunk;
  const RowIter<true> it(0);
  const int tid = static_cast<int>(threadIdx.x);
  const int nt = static_cast<int>(blockDim.x);
  const int rank = cluster_rank();
  if (NP > 0 && chunk > NP * nt) __trap();  // the host's plan bounds the share by the registers

  // Thread 0: the bulk copies of this CTA's shares of `row` of y and dy into the buffers, both on one
  // phase of bar (0 bytes, a CTA past the body's end: the phase completes at the arrival). y, dy and dx
  // have the same address modulo 16 (the host checks), so one split serves all three.
  auto issue = [&](int64_t row) {
    const int64_t offset = row * int64_t{cols};
    const RowSpan<T, V, int> sp(y + offset, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    const int64_t first = offset + sp.head + int64_t{share.lo} * V;
    const uint32_t bytes = static_cast<uint32_t>(share.n) * sizeof(P);
    mbar_arrive_expect(&bar, 2 * bytes);
    if (bytes > 0) {
      bulk_load(buf_y, y + first, bytes, &bar);
      bulk_load(buf_dy, dy + first, bytes, &bar);
    }
  };

  if (tid == 0) {
    mbar_init(&bar);
    if (NP > 0 && it.base < rows) issue(it.base);  // in flight across the loop's top
  }
  __syncthreads();  // the barrier is initialized before anyone waits on it
  int i = 0;
  for (int64_t row = it.base; row < rows; row += it.step, ++i) {
    if constexpr (NP == 0) {
      // Every thread is done reading the buffers (the previous row's output pass): thread 0 refills
      // them. The proxy fence orders those generic reads before the async proxy's writes.
      __syncthreads();
      if (tid == 0) {
        fence_proxy_async_smem();
        issue(row);
      }
    }
    const int64_t offset = row * int64_t{cols};
    const T* yr = y + offset;
    const T* dyr = dy + offset;
    T* dxr = dx + offset;
    const RowSpan<T, V, int> sp(yr, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    T* dxb = dxr + sp.head + int64_t{share.lo} * V;
    mbar_wait(&bar, static_cast<uint32_t>(i) & 1u);  // row i is the buffers' i-th fill

    P ry[NP > 0 ? NP : 1], rd[NP > 0 ? NP : 1];  // NP > 0: this thread's packs tid, tid + nt, ...
    if constexpr (NP > 0) {
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        if (tid + j * nt < share.n) {
          ry[j] = load_shared(buf_y + tid + j * nt);
          rd[j] = load_shared(buf_dy + tid + j * nt);
        }
      }
      __syncthreads();  // every thread holds its packs: the buffers take the next row now
      if (tid == 0 && row + it.step < rows) {
        fence_proxy_async_smem();
        issue(row + it.step);
      }
    }
    // f(q, y pack, dy pack) for each of this thread's packs q of the share, from registers (NP > 0) or
    // the buffers (16-byte shared loads; unpack_fresh keeps 16-bit packs raw in registers).
    const auto for_packs = [&](auto&& f) {
      if constexpr (NP > 0) {
#pragma unroll
        for (int j = 0; j < NP; ++j) {
          if (tid + j * nt < share.n) f(tid + j * nt, ry[j], rd[j]);
        }
      } else {
#pragma unroll 4
        for (int q = tid; q < share.n; q += nt) f(q, load_shared(buf_y + q), load_shared(buf_dy + q));
      }
    };
    float dot = 0.0f;
    for_packs([&](int, const P& py, const P& pd) {
      float yv[V], dv[V];
      unpack_fresh(py, yv);
      unpack_fresh(pd, dv);
#pragma unroll
      for (int e = 0; e < V; ++e) dot += yv[e] * dv[e];
    });
    dot = row_reduce<AddOp, true>(edges_dot(dot, yr, dyr, sp, cols, it), 0, i & 1);
    for_packs([&](int q, const P& py, const P& pd) {
      float yv[V], dv[V];
      unpack_fresh(py, yv);
      unpack_fresh(pd, dv);
      P out;
#pragma unroll
      for (int e = 0; e < V; ++e) out.v[e] = from_float<T>(yv[e] * (dv[e] - dot));
      store_stream<V>(dxb, q, out);
    });
    write_edges_dx(dot, yr, dyr, dxr, sp, cols, it);
  }
  cluster_sync();  // keep this CTA's shared memory (the reduction slots) alive for the others' reads
#else
  __trap();  // sm_80 builds: the host launches this kernel only on sm_90+
#endif
}

}  // namespace jm::cuda::smx
