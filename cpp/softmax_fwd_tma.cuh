// Softmax "auto" forward for long rows (sm_90): the cluster class with the row in shared memory, filled
// by bulk copies (cp.async.bulk + mbarrier). (The v2 register cluster class of softmax_rows.cuh issued a
// row's loads only after the previous row's cluster barrier and stores: 53-71% of the copy on the H200.)
//
// A cluster of k CTAs (k = 1..16) owns one row at a time and walks rows base, base + step, ... (a
// persistent grid of clusters). CTA r of the cluster holds packs [r * chunk, (r + 1) * chunk) of the
// row's 16-byte-aligned body in a shared-memory buffer; the row's scalar head and tail (misaligned C) are
// read from global memory by the cluster's first lanes, as in the register classes. Per row, in each
// CTA: wait for the row's buffer -> per-thread max, then sum of exp(x - max) -> (max, sum) merged over
// the block, then the cluster (DSMEM and one cluster barrier; v11, k >= 4: messages, kPush below) ->
// y = exp(x - M) / S, 16-byte streaming stores. Three variants (template parameters S, NP; the host's
// plan in softmax_fwd.cu picks k and the variant):
//   v3 (S = 2): two buffers; the next row's copy is issued at the top of each row into the other one.
//   v5, f32 (S = 1): one buffer, refilled at the top of the next row (after this row's output pass), so
//     a CTA has no row in flight while it reduces and stores: the other CTAs of the SM hide that, and
//     half the shared memory per CTA lets k be half as large (H200: f32 32768 -> k = 2, 3 CTAs of 64 KB
//     per SM; 50257 -> 2, 2 x 99 KB; 131072 -> 8, ~2.7 x 64 KB; v3 took k = 4, 8 and 16).
//   v5, 16-bit (S = 1, NP = 8 or 16): one buffer, copied into registers (NP packs per thread) right
//     after it lands; a block barrier, and the next row's copy is issued at once, so it is in flight
//     through the whole reduction and output pass with one buffer; shared memory is read once per
//     element instead of three times. The registers cap a CTA's share, so where one buffer read from
//     shared memory plans a smaller cluster (H200: 50257 k = 1 against 2, 131072 k = 4 against 8), 16-bit
//     rows take that (v6).
// Measured on the H200 (benchmarks/RESULTS.md, v5): the cluster size is what costs (each doubling of k
// at the same bytes per CTA lost 5-45%: a cluster barrier over more CTAs per row, fewer resident
// clusters), not the bytes in flight (a three-buffer pipelined kernel at k = 8 x 16 KB ran 0.62-0.88x of
// v3): v5 is 1.05-1.23x of v3 in f32 and 0.98-1.06x in bf16 at C = 32768..131072; v6's spill-free 16-bit
// registers added 6-18% in bf16.
#pragma once

#include "softmax_rows.cuh"

namespace jm::cuda::smx {

// Tickets (f32 since v75, the default, since v77 at twice the rule's k, since v79 on the register kernels; every one
// buffer under v76, every dtype under v73, A/B versions; RESULTS.md "v69 measured", "v73 and v74", "v75", "v76 and
// v77", "v78 and v79"): a persistent grid whose clusters
// take their rows past the first two from a counter, so that clusters that run faster take more rows (with fixed
// shares the SMs finished up to a third of the span apart). The counters: a ring of kTicketSlots pairs per device,
// zero at load; the host gives each launch the next slot (ticket_slot; -1: fixed
// shares), and each launch's last CTA to exit zeroes its pair for the slot's next launch. [0]: draws (the next row is 2
// * clusters + its value); [1]: CTAs exited. Launches that share a slot must not overlap: they would be kTicketSlots
// launches apart, so that would take two streams running at once, a thousand ticket launches on one during a single
// launch on the other (in order on one stream, as XLA launches a computation's kernels and replays a command buffer,
// they never overlap). Rank 0 draws row i + 2 at the top of row i and sends it to every CTA of its cluster after row
// i's merge (st.async into tk_inbox[i & 1], completing tk_bar[i & 1]); each CTA takes row i + 1 at the top of row i.
// Reuse of a slot: rank 0 rewrites tk_inbox[i & 1] only after row i's merge, which needs every CTA's row i value,
// computed after that CTA took row i (at the top of row i - 1).
constexpr int kTicketSlots = 1024;
__device__ unsigned g_ticket_ring[kTicketSlots][2];

constexpr int kTmaBlock = 256;           // threads per CTA

// The packs [lo, lo + n) of a row's body that cluster rank `rank` holds.
struct TmaShare {
  int lo, n;
  __device__ TmaShare(int body, int rank, int chunk) : lo(rank * chunk), n(max(0, min(chunk, body - lo))) {}
};

// Variants (template parameters; JAX_MEMOPS_SOFTMAX_FWD picks, cpp/softmax_fwd.cu):
//   S = 2, NP = 0 (v3): two stages, the next row's copy issued at the top of each row, three reads of the
//     stage per row (max, sum, output).
//   S = 1, NP = 0 (v5-s1): one stage, refilled only after the row's output pass: no row in flight within
//     a CTA, half the shared memory per CTA (so smaller clusters or more CTAs per SM hide the loads).
//   S = 1, NP > 0 (v5-reg): each thread copies its <= NP packs of the stage into registers once, a block
//     barrier, and the next row's copy is issued at once: the stage is free for the whole reduction and
//     output pass (v3's overlap with one stage), and one read of shared memory per element.
//   B: threads per CTA (256; 512 is JAX_MEMOPS_SOFTMAX_FWD=v7-512, an A/B option: 0.92-1.13x). The register variants
//     are bounded to 64 (NP <= 8) or 128 (NP = 16) registers per thread at 1024 threads per SM.
//   kPush (v11): the cluster's merge of (max, sum) by messages (mail_merge, softmax_rows.cuh) instead of
//     a cluster barrier and DSMEM reads (softmax_fwd.cu takes it for k >= 4).
// ahead (v49, an argument; 0: none): once a row's share has landed, thread 0 prefetches the first `ahead` packs of
//   its share of the CTA's next row (S = 2: the row after next, whose copy is not yet in flight; an A/B variant) from
//   HBM into L2 (prefetch_l2), so that HBM keeps reading for this SM through the row's reduction, merge and output
//   pass, and the next row's bulk copy is served mostly by L2. softmax_fwd.cu takes 75% of the share (the whole share
//   measured 1-2 points slower; issued beside the row's own bulk copy, the prefetch competes with it for HBM: at 100%
//   no gain; RESULTS.md "v49").
// kTickets, ticket_slot (v73): rows by tickets (above) where ticket_slot >= 0 and S = 1.
// kKeepAhead (v50; JAX_MEMOPS_SOFTMAX_FWD=v49 runs without): those prefetches at L2's evict_last priority
//   (prefetch_l2's kKeep), so that the streaming lines (x's bulk copies, y's stores) are evicted before them: v49's
//   prefetch left 2% of x to be read from HBM twice; in one process the hint read 2-5% faster than v49 in f32 and 0-2%
//   in bf16 (RESULTS.md "v50", "v51").
template <typename T, int S, int NP, int B = kTmaBlock, bool kPush = false, bool kKeepAhead = false,
          bool kTickets = false>
__global__ void __launch_bounds__(B, NP == 0 ? 1 : (NP <= 8 ? 1024 : 512) / B)
    softmax_fwd_tma_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int chunk, int ahead,
                           int ticket_slot) {
  static_assert(S == 1 || S == 2, "one or two stages");
  static_assert(NP == 0 || S == 1, "the register variant needs one stage");
#if JM_BULK_COPY
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  __shared__ uint64_t bar[S];
  P* stages = reinterpret_cast<P*>(dynamic_smem());  // [S][chunk]
  const RowIter<true> it(0);
  const int tid = static_cast<int>(threadIdx.x);
  const int nt = static_cast<int>(blockDim.x);
  const int rank = cluster_rank();
  trace_exit(0);

  // Thread 0: the bulk copy of this CTA's share of `row` into stage st (0 bytes: the phase completes).
  auto issue = [&](int64_t row, int st) {
    const T* xr = x + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    const uint32_t bytes = static_cast<uint32_t>(share.n) * sizeof(P);
    mbar_arrive_expect(&bar[st], bytes);
    if (bytes > 0) bulk_load(stages + st * chunk, xr + sp.head + int64_t{share.lo} * V, bytes, &bar[st]);
  };

  __shared__ ClusterMail<MaxSum> mail;  // kPush: the (max, sum) messages (softmax_rows.cuh)
  if constexpr (kPush) mail_init(mail);
  __shared__ uint32_t tk_inbox[2];
  __shared__ uint64_t tk_bar[2];
  // (a template parameter, so that the kernels without keep their registers: the ticket code spills 4-28 bytes at
  // the register kernels' bounds)
  unsigned* const tk = kTickets && S == 1 && ticket_slot >= 0 ? g_ticket_ring[ticket_slot] : nullptr;
  const bool tickets = kTickets && tk != nullptr;
  if (tickets && tid == 0) {
    mbar_init(&tk_bar[0]);
    mbar_init(&tk_bar[1]);
  }
  if (tid == 0) {
    for (int st = 0; st < S; ++st) mbar_init(&bar[st]);
    // The first row ahead of the loop where a copy is in flight across the loop's top (not S = 1, NP = 0).
    if ((S == 2 || NP > 0) && it.base < rows) issue(it.base, 0);
  }
  __syncthreads();  // the barriers are initialized before anyone waits on them
  if (kPush || tickets) cluster_sync();  // ... and before any CTA of the cluster sends to them
  int i = 0;
  int64_t row_next = it.base + it.step;  // the row after `row` (tickets: from rank 0's message)
  unsigned drawn = 0;                    // tickets, rank 0's thread 0: the ticket drawn at the top of this row
  for (int64_t row = it.base; row < rows; row = row_next, ++i) {
    row_next = row + it.step;
    if (tickets) {
      if (i >= 1) {  // row i + 1, sent by rank 0 at the top of row i - 1
        const int p = (i - 1) & 1;
        if (tid == 0) mbar_arrive_expect(&tk_bar[p], 4u);
        mbar_wait(&tk_bar[p], static_cast<uint32_t>((i - 1) >> 1) & 1u);
        row_next = tk_inbox[p];
      }
      // Row i + 2, which every CTA takes at the top of row i + 1: drawn here, sent after this row's merge (the
      // atomic's round trip, ~1 us, then overlaps the row's loads and reductions; drawn and sent here, it held rank 0
      // and with it the cluster's merge: f32 131072 -4%, bf16 131072 -7.6% against v50 on the H200; RESULTS.md "v73
      // and v74").
      if (rank == 0 && tid == 0 && row_next < rows) drawn = atomicAdd(&tk[0], 1u);
    }
    const int st = S == 2 ? (i & 1) : 0;
    // bar[st]'s phase for this row: row i is stage st's (i / S)-th fill.
    const uint32_t parity = static_cast<uint32_t>(S == 2 ? i >> 1 : i) & 1u;
    if constexpr (NP == 0) {
      // Every thread is done reading the stage refilled here: the previous row's (S = 2: the other stage;
      // S = 1: this one, which then takes this row).
      __syncthreads();
      const int64_t next = S == 2 ? row + it.step : row;
      if (tid == 0 && next < rows) {
        fence_proxy_async_smem();
        issue(next, S == 2 ? st ^ 1 : 0);
      }
    }
    const T* xr = x + row * int64_t{cols};
    T* yr = y + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const TmaShare share(sp.body, rank, chunk);
    const P* buf = stages + st * chunk;
    T* yb = yr + sp.head + int64_t{share.lo} * V;
    mbar_wait(&bar[st], parity);
    if (i == 0) trace_exit(3);
    trace_exit(6);
    // v49: the first packs of the next row whose copy is not yet in flight into L2 (above); S = 2: the row after next.
    const int64_t row_ahead = S == 2 ? row + 2 * it.step : row_next;
    if (tid == 0 && ahead > 0 && row_ahead < rows) {
      const T* xn = x + row_ahead * int64_t{cols};
      const RowSpan<T, V, int> sn(xn, cols, true);
      const TmaShare sh(sn.body, rank, chunk);
      prefetch_l2<kKeepAhead>(xn + sn.head + int64_t{sh.lo} * V, int64_t{min(sh.n, ahead)} * int64_t{sizeof(P)});
    }

    P v[NP > 0 ? NP : 1];  // NP > 0: this thread's packs (share packs tid, tid + nt, ...)
    if constexpr (NP > 0) {
#pragma unroll
      for (int j = 0; j < NP; ++j) {
        if (tid + j * nt < share.n) v[j] = load_shared(buf + tid + j * nt);
      }
      __syncthreads();  // every thread holds its packs: the stage takes the next row now
      if (tid == 0 && row_next < rows) {
        fence_proxy_async_smem();
        issue(row_next, 0);
      }
      if (i == 0) trace_exit(7);
    }
    // f(q, pack) for each of this thread's packs q of the share: from registers (NP > 0) or the stage.
    // The passes convert with unpack_fresh: 16-bit packs held in registers stay raw across the passes
    // (with unpack, ptxas kept them as floats too: 42-50 bytes of spills per thread in bf16).
    const auto for_packs = [&](auto&& f) {
      if constexpr (NP > 0) {
#pragma unroll
        for (int j = 0; j < NP; ++j) {
          if (tid + j * nt < share.n) f(tid + j * nt, v[j]);
        }
      } else {
#pragma unroll 4
        for (int q = tid; q < share.n; q += nt) f(q, load_shared(buf + q));
      }
    };
    float m = -INFINITY, s = 0.0f;
    for_packs([&](int, const P& pk) { m = pack_max_nan(pk, m); });
    const float mm = safe_max(m);
    for_packs([&](int, const P& pk) {
      float f[V];
      unpack_fresh(pk, f);
#pragma unroll
      for (int e = 0; e < V; ++e) s += ex2_ftz((f[e] - mm) * kLog2e);
    });
    MaxSum row_ms;
    if constexpr (kPush) {
      const MaxSum blk = block_reduce_rows<MergeOp>(with_edges(MaxSum{m, s}, xr, sp, cols, it), i & 1);
      if (i == 0) trace_exit(8);
      row_ms = mail_merge<MergeOp>(mail, blk, i);
    } else {
      row_ms = row_reduce<MergeOp, true>(with_edges(MaxSum{m, s}, xr, sp, cols, it), 0, i & 1);
    }
    if (i == 0) trace_exit(4);
    if (tickets && rank == 0 && tid == 0 && row_next < rows) {  // row i + 2 to every CTA of the cluster
      const int64_t r = 2 * it.step + int64_t{drawn};
      const uint32_t v = static_cast<uint32_t>(r < rows ? r : rows);
      const uint32_t slot = smem_addr(&tk_inbox[i & 1]), tb = smem_addr(&tk_bar[i & 1]);
      for (int c = 0; c < cluster_blocks(); ++c) push_one(cluster_map(slot, c), __uint_as_float(v), cluster_map(tb, c));
    }
    const float inv_s = 1.0f / row_ms.s;
    for_packs([&](int q, const P& pk) {
      float f[V];
      unpack_fresh(pk, f);
      P out;
#pragma unroll
      for (int e = 0; e < V; ++e) out.v[e] = from_float<T>(ex2_ftz((f[e] - row_ms.m) * kLog2e) * inv_s);
      store_stream<V>(yb, q, out);
    });
    write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
    if (i == 0) trace_exit(5);
  }
  trace_exit(1);
  if (tickets && tid == 0) {
    __threadfence();  // this CTA's draws before its exit's count
    if (atomicAdd(&tk[1], 1u) == gridDim.x - 1) {
      tk[0] = 0;
      tk[1] = 0;
    }
  }
  cluster_sync();  // keep this CTA's shared memory (the reduction slots) alive for the others' reads
#else
  __trap();  // sm_80 builds: the host launches this kernel only on sm_90+
#endif
}

}  // namespace jm::cuda::smx
