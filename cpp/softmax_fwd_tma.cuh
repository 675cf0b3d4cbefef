// Softmax "auto" v3 forward for long rows (sm_90): the cluster class with the row in shared memory,
// filled by bulk copies (cp.async.bulk + mbarrier) one row ahead, so that the loads of a cluster's
// next row run while it reduces and writes the current one. (The v2 register cluster class of
// softmax_rows.cuh issued a row's loads only after the previous row's cluster barrier and stores:
// 53-71% of the copy on the H200.)
//
// A cluster of k CTAs (k = 1..16) owns one row at a time and walks rows base, base + step, ... (a
// persistent grid of clusters). CTA r of the cluster holds packs [r * chunk, (r + 1) * chunk) of the
// row's 16-byte-aligned body in one of S shared-memory stages (S x chunk x 16 bytes, S = 2..8); the
// row's scalar head and tail (misaligned C) are read from global memory by the cluster's first lanes,
// as in the register classes. Per row i, in each CTA:
//   barrier (every thread is done with row i - 1's stage) -> thread 0 issues the bulk copy of row
//   i + S - 1 into that stage -> wait for row i's stage -> per-thread max, then sum of exp(x - max)
//   (two reads of shared memory) -> (max, sum) merged over the block, then the cluster (DSMEM, as
//   v2) -> y = exp(x - M) / S from shared memory, 16-byte streaming stores.
// So S - 1 rows' chunks are in flight while a row is reduced and written. The host (launch_fwd_tma)
// takes the smallest k whose chunk is <= 56 KB (k = 16 beyond), one 512-thread CTA per SM and as many
// stages as its shared memory holds (H200, 227 KB: chunks of 32-56 KB, 4-7 stages, 96-192 KB of
// reads in flight per SM). Measured on the H200 (benchmarks/RESULTS.md): the first version, S = 2 with
// up to three 256-thread CTAs per SM (one row ahead, <= 96 KB in flight per SM, less whenever a CTA's
// next row has landed), ran at 51% of the DRAM peak at f32 C = 131072 (ncu; the copy 86%) with every
// cluster barrier exposed; it stays as an A/B option (JAX_MEMOPS_SOFTMAX_FWD=v3-2stage).
// Two exps per element (sum and output) and three reads of shared memory cost ~10 instructions per
// element, ~1/3 of the issue slots the SM has at the copy's bandwidth (f32: 1.8 elements per SM-cycle
// read; bf16 3.6), and 2 MUFU.EX2 per element use ~1/4-1/2 of the 16 per SM-cycle.
#pragma once

#include "softmax_rows.cuh"

namespace jm::cuda::smx {

constexpr int kTmaMaxBlock = 512;        // threads per CTA: 512 (one CTA per SM) or 256 (the 2-stage A/B)
constexpr int kTmaMaxStages = 8;         // row buffers per CTA

// The packs [lo, lo + n) of a row's body that cluster rank `rank` holds.
struct TmaShare {
  int lo, n;
  __device__ TmaShare(int body, int rank, int chunk) : lo(rank * chunk), n(max(0, min(chunk, body - lo))) {}
};

template <typename T>
__global__ void __launch_bounds__(kTmaMaxBlock, 1)
    softmax_fwd_tma_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int chunk,
                           int stages) {
#if JM_BULK_COPY
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  __shared__ uint64_t bar[kTmaMaxStages];
  P* bufs = reinterpret_cast<P*>(dynamic_smem());  // [stages][chunk]
  const RowIter<true> it(0);
  const int tid = static_cast<int>(threadIdx.x);
  const int nt = static_cast<int>(blockDim.x);
  const int rank = cluster_rank();

  // Thread 0: the bulk copy of this CTA's share of `row` into stage st (0 bytes: the phase completes).
  auto issue = [&](int64_t row, int st) {
    const T* xr = x + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    const uint32_t bytes = static_cast<uint32_t>(share.n) * sizeof(P);
    mbar_arrive_expect(&bar[st], bytes);
    if (bytes > 0) bulk_load(bufs + st * chunk, xr + sp.head + int64_t{share.lo} * V, bytes, &bar[st]);
  };

  if (tid == 0) {  // rows 0 .. S - 2 of this cluster into stages 0 .. S - 2
    for (int st = 0; st < stages; ++st) mbar_init(&bar[st]);
    for (int st = 0; st + 1 < stages && it.base + st * it.step < rows; ++st) issue(it.base + st * it.step, st);
  }
  __syncthreads();  // the barriers are initialized before anyone waits on them
  int i = 0;
  for (int64_t row = it.base; row < rows; row += it.step, ++i) {
    const int st = i % stages;
    const int ahead = (i + stages - 1) % stages;  // row i - 1's stage, refilled with row i + S - 1
    __syncthreads();  // every thread is done reading stage `ahead` (the previous row's output pass)
    if (tid == 0 && row + (stages - 1) * it.step < rows) {
      fence_proxy_async_smem();
      issue(row + (stages - 1) * it.step, ahead);
    }
    const T* xr = x + row * int64_t{cols};
    T* yr = y + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    const P* buf = bufs + st * chunk;
    mbar_wait(&bar[st], static_cast<uint32_t>(i / stages) & 1u);  // stage st's (i / S)-th phase

    float m = -INFINITY;
#pragma unroll 4
    for (int p = tid; p < share.n; p += nt) m = pack_max_nan(load_shared(buf + p), m);
    const float mm = safe_max(m);
    float s = 0.0f;
#pragma unroll 4
    for (int p = tid; p < share.n; p += nt) {
      float v[V];
      unpack(buf[p], v);
#pragma unroll
      for (int j = 0; j < V; ++j) s += ex2_ftz((v[j] - mm) * kLog2e);
    }
    const MaxSum row_ms = row_reduce<MergeOp, true>(with_edges(MaxSum{m, s}, xr, sp, cols, it), 0, i & 1);
    const float inv_s = 1.0f / row_ms.s;
    T* yb = yr + sp.head + int64_t{share.lo} * V;
#pragma unroll 4
    for (int p = tid; p < share.n; p += nt) {
      float v[V];
      unpack(buf[p], v);
      P out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(ex2_ftz((v[j] - row_ms.m) * kLog2e) * inv_s);
      store_stream<V>(yb, p, out);
    }
    write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
  }
  cluster_sync();  // keep this CTA's shared memory (the reduction slots) alive for the others' reads
#else
  __trap();  // sm_80 builds: the host launches this kernel only on sm_90+
#endif
}

}  // namespace jm::cuda::smx
