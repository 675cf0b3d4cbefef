// Softmax "auto" v4 forward for long rows (sm_90): the bulk-copy cluster of softmax_fwd_tma.cuh (v3),
// software-pipelined across rows so that the cluster barrier of one row overlaps the reduction of the
// next, with one pass over shared memory for (max, sum) and three row buffers per CTA.
//
// Why (H200, v3 at 512 x 131072 f32: 51% of DRAM peak, SMs active 81% of the time, 0.35 issued warps
// per scheduler-cycle): v3's per-row chain in each CTA was wait for the stage -> max pass -> sum pass
// -> block barrier -> cluster barrier (the slowest of k CTAs) + DSMEM read -> output pass, all serial,
// and 3 CTAs per SM overlapped only 3 such chains (one 512-thread CTA with 7 stages, i.e. more bytes in
// flight but one chain, ran at 0.72-0.81x). v4 per CTA, row i being the cluster's i-th row:
//
//   ... -> [arrive(i)] -> wait stage(i+1), partial (m, s) of row i+1 (one smem pass, online merge)
//       -> [wait(i)] -> read row i's cluster (M, S) by DSMEM -> output pass of row i (smem, exp,
//       16-byte streaming stores) -> block reduce of row i+1 (its __syncthreads also frees stage(i))
//       -> thread 0: bulk copy of row i+3 into stage(i); publish row i+1's block (m, s) -> [arrive(i+1)]
//
// arrive/wait are the split cluster barrier (barrier.cluster.arrive.release / wait.acquire): the
// other CTAs' progress to row i's barrier is awaited only after a half row of useful work. A CTA holds
// three rows' shares: row i (until its output pass), row i + 1 (being reduced) and row i + 2 (loading);
// row i + 3's copy is issued after row i's output pass, about one row period before it is needed (the
// lookahead v3 had with two stages). The local (m, s) is one pass over shared memory (v3: two).
//
// Synchronization proof (k CTAs, every CTA walks the same rows, so every barrier count below is
// cluster-uniform; each thread alternates arrive(j), wait(j) for j = 0, 1, ...: arrive(0) in the
// prologue, wait(j) and arrive(j + 1) in iteration j, then one more full barrier before exit).
//  * Cluster slots, slot[j & 1] holds row j's block (m, s). CTA c writes it (thread 0) before its
//    arrive(j) (release); CTA d reads it (DSMEM) after its wait(j) (acquire): the write is visible.
//    The next write of the same slot is row j + 2's, made by c in iteration j + 1 after c's wait(j + 1).
//    d reads row j's slots in iteration j, before d's arrive(j + 1) (release), and c's wait(j + 1)
//    (acquire) returns only after every thread's arrive(j + 1): the reads happen before the rewrite.
//    So two slots suffice. The final cluster barrier keeps every CTA's slots alive until the last
//    reads are done (no CTA exits, freeing its shared memory, while another may read it).
//  * Block partials (block_reduce_rows, parity j & 1 for row j): one __syncthreads per row (in that
//    reduction). A warp writes partial[j & 1] for row j + 2 only after the block barrier of row j + 1,
//    which every warp reaches after reading row j's partials: two buffers suffice (as in v3).
//  * Stages: stage(j) = j mod 3, refilled with row j + 3 by thread 0 after the block barrier of row
//    j + 1's reduction, which every thread reaches after its output pass of row j (the last generic
//    read of the stage), with fence.proxy.async before the copy. Every thread waited on stage(j)'s
//    previous phase (in row j's reduction) before that barrier, so no thread can miss a phase; each
//    thread flips its own parity bit per stage at each wait.
//
// Per element: one smem read + ex2 for (m, s), one smem read + ex2 + a multiply for y (v3: three reads,
// two ex2). The online merge rescales the running sum once per two packs, unconditionally (no branch,
// no divergence): ex2((m_old - safe_max(m_new)) log2 e), i.e. 1 MUFU per 8 (f32) or 16 (16-bit)
// elements, against a data-dependent branch taken by some lane of a warp on most early packs anyway.
// NaN / inf rules are v3's (MergeOp, safe_max): a NaN makes m NaN (max.NaN) and then s NaN; a +inf
// makes s NaN (exp(inf - inf)); a share of only -inf has (m, s) = (-inf, 0) (safe_max keeps
// exp(-inf - -inf) out); an all -inf row gives M = -inf, S = 0 and y = NaN, as jax.nn.softmax.
#pragma once

#include "softmax_fwd_tma.cuh"

namespace jm::cuda::smx {

constexpr int kTmaPipeStages = 3;    // row buffers per CTA: output pending, being reduced, loading
constexpr int kTmaPipeCtasPerSm = 4; // the host's target of resident CTAs (row chains) per SM

// The partial (m, s) of the packs p = tid, tid + nt, ... < n of buf in one pass: two packs at a time,
// their max merged into the running max m, the running sum rescaled to it, then their exps added. s is
// relative to safe_max(m), as MergeOp's partials are.
template <typename T, int V>
__device__ __forceinline__ MaxSum online_max_sum(const Pack<T, V>* buf, int n, int tid, int nt) {
  float m = -INFINITY;
  float s = 0.0f;
#pragma unroll 2
  for (int p = tid; p < n; p += 2 * nt) {
    const bool has_b = p + nt < n;  // false only in a thread's last step
    const Pack<T, V> a = load_shared(buf + p);
    const Pack<T, V> b = load_shared(buf + (has_b ? p + nt : p));  // a again: harmless for the max
    const float pm = max_nan(m, max_nan(pack_max_nan(a, -INFINITY), pack_max_nan(b, -INFINITY)));
    const float mm = safe_max(pm);
    // m = -inf: 0 (s is 0 then); pm = m finite: exactly 1; NaN stays NaN.
    const float scale = ex2_ftz((m - mm) * kLog2e);
    float va[V], vb[V];
    unpack(a, va);
    unpack(b, vb);
    float ta = 0.0f, tb = 0.0f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      ta += ex2_ftz((va[j] - mm) * kLog2e);
      tb += ex2_ftz((vb[j] - mm) * kLog2e);
    }
    s = s * scale + (has_b ? ta + tb : ta);
    m = pm;
  }
  return {m, s};
}

template <typename T>
__global__ void __launch_bounds__(kTmaBlock, kTmaPipeCtasPerSm)
    softmax_fwd_tma_pipe_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int chunk) {
#if JM_BULK_COPY
  constexpr int V = kVec<T>;
  constexpr int S = kTmaPipeStages;
  using P = Pack<T, V>;
  __shared__ uint64_t bar[S];
  __shared__ MaxSum slot[2];  // this CTA's block (m, s) of rows j with parity j & 1, read by the cluster
  P* stages = reinterpret_cast<P*>(dynamic_smem());  // [S][chunk]
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
    if (bytes > 0) bulk_load(stages + st * chunk, xr + sp.head + int64_t{share.lo} * V, bytes, &bar[st]);
  };
  // This thread's partial (m, s) of `row`, in stage st: its packs and, in the cluster's first lanes,
  // the row's scalar edges. `phases` bit st: the parity of stage st's next phase (flipped here).
  uint32_t phases = 0;
  auto partial = [&](int64_t row, int st) {
    const T* xr = x + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    mbar_wait(&bar[st], (phases >> st) & 1u);
    phases ^= 1u << st;
    return with_edges(online_max_sum(stages + st * chunk, share.n, tid, nt), xr, sp, cols, it);
  };
  // y of this CTA's share of `row` (in stage st) and of the row's edges, given the row's (M, S).
  auto output = [&](int64_t row, int st, MaxSum row_ms) {
    const T* xr = x + row * int64_t{cols};
    T* yr = y + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    const P* buf = stages + st * chunk;
    const float inv_s = 1.0f / row_ms.s;
    T* yb = yr + sp.head + int64_t{share.lo} * V;
#pragma unroll 4
    for (int p = tid; p < share.n; p += nt) {
      float v[V];
      unpack(load_shared(buf + p), v);
      P out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(ex2_ftz((v[j] - row_ms.m) * kLog2e) * inv_s);
      store_stream<V>(yb, p, out);
    }
    write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
  };

  if (tid == 0) {
    for (int st = 0; st < S; ++st) mbar_init(&bar[st]);
    for (int st = 0; st < S; ++st) {
      if (it.base + st * it.step < rows) issue(it.base + st * it.step, st);
    }
  }
  __syncthreads();  // the barriers are initialized before anyone waits on them
  if (it.base < rows) {  // row 0 of this cluster: reduced and published ahead of the loop
    const MaxSum v = block_reduce_rows<MergeOp>(partial(it.base, 0), 0);
    if (tid == 0) slot[0] = v;
    cluster_arrive();
  }
  int st = 0;      // stage of `row`
  int parity = 0;  // slot and block-partial buffer of `row`
  for (int64_t row = it.base; row < rows; row += it.step) {
    const bool has_next = row + it.step < rows;  // uniform over the cluster
    const int st_next = st + 1 == S ? 0 : st + 1;
    MaxSum part = MergeOp::identity();
    if (has_next) part = partial(row + it.step, st_next);  // overlaps the cluster barrier of `row`
    cluster_wait();
    const MaxSum row_ms = cluster_gather<MergeOp>(&slot[parity]);
    output(row, st, row_ms);
    if (has_next) {
      // Its __syncthreads: every thread is done with stage st (the output pass above).
      const MaxSum v = block_reduce_rows<MergeOp>(part, parity ^ 1);
      if (tid == 0) {
        const int64_t refill = row + int64_t{S} * it.step;
        if (refill < rows) {
          fence_proxy_async_smem();
          issue(refill, st);
        }
        slot[parity ^ 1] = v;
      }
      cluster_arrive();
    }
    st = st_next;
    parity ^= 1;
  }
  cluster_sync();  // keep this CTA's shared memory (the slots) alive for the others' last reads
#else
  __trap();  // sm_80 builds: the host launches this kernel only on sm_90+
#endif
}

}  // namespace jm::cuda::smx
