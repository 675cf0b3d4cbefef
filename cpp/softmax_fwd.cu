// Softmax forward over the last axis: the XLA FFI handler JmSoftmaxFwdCuda. Algorithm "auto" (0) chooses a
// kernel by row length, dtype and alignment (its versions below; the size classes: softmax_launch.cuh);
// algorithms 1..7 run the seed's teaching ladder (softmax_ladder.cu).
//
// The versions before v24 (the later ones: FwdVersion below). Forward v23 = v21, but 16-bit sub-warp rows of
// 128 < C <= 2048 hold 8 packs per thread instead of 4 (half the threads per row): bf16 C = 256 / 512 / 1024 / 2048 +2 / +4 / +6 / +8% against v21 inside one
// process (benchmarks/softmax_fwd_ab.cu; f32 no gain, RESULTS.md "v23").
// Forward v21 = v20, but the 8-pack block rows of v9 (launch_fwd_wide) read x by __ldg and
// store y plainly too. Forward v20 = v14, but the sub-warp and block rows read x by __ldg and store y
// plainly instead of the streaming (evict-first) hints (softmax_fwd_regs.cuh kCachedIo).
// Forward v14 = v9, but 16-bit rows of 32768 < C whose rows in flight fit 56% of L2 take
// the two-pass kernel with L2 as the row buffer (softmax_fwd_l2.cuh; launch_fwd_l2).
// Forward v9 = v5, but rows of 4096 (16-bit: 2048) < C <= 32768 take block rows of 8
// packs per thread (twice the bytes in flight; up to 1024-thread CTAs, no cluster: launch_fwd_wide);
// since v11 the bulk-copy clusters of 4 or more CTAs merge (max, sum) by messages (push_min_cluster).
// Forward v5 = v3's register classes + the one-buffer bulk-copy cluster (f32 from shared
// memory, 16-bit types through registers unless reading the buffer needs fewer CTAs per cluster;
// launch_fwd_tma); v3's two-buffer one is JAX_MEMOPS_SOFTMAX_FWD=v3.
// Forward v3 (softmax_fwd_regs.cuh, softmax_fwd_tma.cuh): the sub-warp and block classes
// with ex2.approx.ftz and a max.NaN max, one row group in flight (f32 keeps one exp per element in
// registers, 16-bit types keep raw packs and take two exps); sub-warp rows reduce by a max butterfly
// then a sum butterfly (no exp per shuffle step); long rows by the bulk-copy cluster. Measured on the
// H200 (benchmarks/RESULTS.md): a variant that prefetches the next row group into a second register
// set (two exps per element for every dtype) was 1-10% slower at C = 512..8192 (16-bit most), so it is
// an A/B option only: JAX_MEMOPS_SOFTMAX_FWD=v3-prefetch; =v2 runs the v2 kernels (exp2f, a
// select-based max, the register cluster for long rows). ex2 with a log2(e) pre-scale of x - max; f32
// accumulation everywhere.
#include "softmax_launch.cuh"
#include "bindings.h"
#include "handlers.h"
#include "softmax_ladder.h"
#include "softmax_fwd_regs.cuh"
#include "softmax_fwd_l2.cuh"
#include "softmax_fwd_tma.cuh"

#include <climits>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

// Which forward kernels "auto" runs. v79 by default: v77, but its f32 clusters run the register kernels (RESULTS.md
// "v78 and v79"). v78 (A/B): v77, but the 16-bit clusters whose rule's plan is one buffer by tickets at twice the
// rule's cluster size too. v77: v75, but its f32 clusters at twice the rule's cluster size (RESULTS.md "v76 and v77").
// v75: v74, but the f32 rows of the bulk-copy clusters past each cluster's first two come by tickets
// (softmax_fwd_tma.cuh; RESULTS.md "v75"). v74: v50, but v14's L2 rows on a full grid (one CTA per row; RESULTS.md "v73
// and v74"). v73 (A/B): v74 with tickets in every bulk-copy cluster of one buffer or registers, 16-bit too. v50: v49
// with its prefetches at L2's evict_last priority (launch_fwd_tma's kKeep; measured beside kTmaAheadPct below). v49:
// v27, but each CTA of the bulk-copy cluster prefetches into L2 the first kTmaAheadPct % of its share of its next row
// once this row's share has landed (softmax_fwd_tma.cuh's `ahead`).
// v27: v26 with the rows that 2 packs fill on 16 threads (16-bit C =
// 256, blocks of 128, before v23's 8-pack rows) and on 32 (f32 C = 256, unbounded) (RESULTS.md "v25": +2..3% and +3%
// in one process). v26: v25 with the rows that 2 packs per thread fill exactly, up to 8
// threads (16-bit: C = 128) or 16 (f32: C = 32, 64, 128), on 2 packs (16-bit: as v25's; f32: its exps kept, >= 6
// blocks of 256 per SM). v25: v24 with 16-bit rows of C <= 64 on 4 threads of 2 packs, blocks of
// 128 at >= 8 per SM (32 registers). v24: v23 with the 16-bit sub-warp rows of 4 packs (C <= 128) bounded
// to 40 registers, 6 blocks of 256 per SM (softmax_fwd_regs.cuh kMinBlocks). v23: v21 with 16-bit sub-warp rows of
// 8 packs per thread where that halves the threads. v21: v14 with
// the register rows' cached I/O (v20: the sub-warp and block rows only). v14: v9, except the 16-bit rows of
// launch_fwd_l2's rule. v9: v5, except rows of kWideMinCols < C <= kWideMaxCols, which take register rows of 8 packs
// per thread (launch_fwd_wide). v5: v3's register classes (no prefetch) and, for long rows, the bulk-copy cluster with
// one row buffer per CTA (softmax_fwd_tma.cuh): f32 reads it from shared memory in each pass (S = 1), 16-bit types copy
// it into registers once and refill the buffer at once (NP = 8 or 16) unless reading the buffer plans a smaller
// cluster. For A/B benchmarks only, the environment variable JAX_MEMOPS_SOFTMAX_FWD (read once per process) selects
// "v5" (the default before v9), "v5-s1" / "v5-reg" (one of v5's two for every dtype), "v3" (the two-buffer bulk-copy
// cluster), "v3-prefetch" (that, and the register classes prefetch the next row group; two raw register sets, two exps
// per element), "v2" (the v2 kernels everywhere), "v7-512" (v5's rule and variants with 512-thread CTAs in the
// bulk-copy cluster; measured 0.92-1.13x of v5, mixed by shape: RESULTS.md, "v7") or "v9-wide" / "v9-wide-512" (8-pack
// rows wherever they fit, on CTAs of up to 1024 / 512 threads and clusters of them; RESULTS.md, "v9"), "v9" (v14
// without its L2 two-pass rows) or "v14" (v20 with streaming loads and stores in the register rows) or "v20" (v21 with
// streaming loads and stores in the 8-pack rows) or "v21" (v14 with the register rows' x read by __ldg and y stored
// plainly, softmax_fwd_regs.cuh kCachedIo: since v20 the sub-warp and block rows, since v21 the 8-pack rows too) or
// "v23", "v24", "v25", "v26", "v27", "v49" or "v50", or "v72" / "v73" (v50 on grids that hand out rows as SMs free up;
// launch_fwd_v3), or "v74", or "v75", or "v76" (v77 with every one-buffer cluster's rows by tickets at twice the
// rule's k, 16-bit too; an A/B version), or "v77", or "v78". Any other value: v79.
// The backward is the same in all of them.
enum class FwdVersion {
  kV2, kV3, kV3Prefetch, kV5, kV5S1, kV5Reg, kV7Wide, kV9, kV9Wide, kV9Wide512, kV14, kV20, kV21, kV23, kV24, kV25,
  kV26, kV27, kV49, kV50, kV72, kV73, kV74, kV75, kV76, kV77, kV78, kV79
};

FwdVersion fwd_version() {
  static const FwdVersion version =
      env_choice("JAX_MEMOPS_SOFTMAX_FWD",
                 {{"v2", FwdVersion::kV2}, {"v3-prefetch", FwdVersion::kV3Prefetch}, {"v3", FwdVersion::kV3},
                  {"v5-s1", FwdVersion::kV5S1}, {"v5-reg", FwdVersion::kV5Reg}, {"v7-512", FwdVersion::kV7Wide},
                  {"v9-wide", FwdVersion::kV9Wide}, {"v9-wide-512", FwdVersion::kV9Wide512}, {"v5", FwdVersion::kV5},
                  {"v9", FwdVersion::kV9}, {"v14", FwdVersion::kV14}, {"v20", FwdVersion::kV20},
                  {"v21", FwdVersion::kV21}, {"v23", FwdVersion::kV23}, {"v24", FwdVersion::kV24},
                  {"v25", FwdVersion::kV25}, {"v26", FwdVersion::kV26}, {"v27", FwdVersion::kV27},
                  {"v49", FwdVersion::kV49}, {"v50", FwdVersion::kV50}, {"v72", FwdVersion::kV72},
                  {"v73", FwdVersion::kV73}, {"v74", FwdVersion::kV74},
                  {"v75", FwdVersion::kV75}, {"v76", FwdVersion::kV76},
                  {"v77", FwdVersion::kV77}, {"v78", FwdVersion::kV78}},
                 FwdVersion::kV79);
  return version;
}

constexpr int kSmemKb = 256;           // KB slots of the occupancy cache (227 KB per block on Hopper)

// Clusters of k CTAs of `block` threads of the bulk-copy kernel, each with `smem` bytes (a multiple of
// 1 KB) of dynamic shared memory, that can be resident at once; 0 when no such cluster can launch. The
// kernel is opted in (func_opt_ins) to the device's largest dynamic shared memory and to non-portable
// cluster sizes (k > 8). Cached per (k, smem), not per device (like blocks_per_sm), nor per block: each Kernel
// instance runs with one CTA size (its template B).
template <auto Kernel>
int tma_active_clusters(const DeviceInfo& dev, int k, int smem, int block) {
  static std::atomic<int> cache[kMaxClusterNonPortable + 1][kSmemKb];
  const int opt_ins = func_opt_ins<Kernel, true>(dev);
  const bool smem_ok = (opt_ins & 1) != 0;
  const bool non_portable_ok = (opt_ins & 2) != 0;
  const int kb = smem / 1024;
  if (!smem_ok || kb >= kSmemKb || k > kMaxClusterNonPortable || (k > kMaxCluster && !non_portable_ok)) return 0;
  return cached_active_clusters<Kernel>(cache[k][kb], dev, block, k, smem);
}

// JAX_MEMOPS_SOFTMAX_FWD_K=k (1..16, powers of two or not; read once per process), for tests and A/B of plans only:
// the bulk-copy plans consider cluster size k alone (where it does not fit or launch, the next plan runs). 0: their
// rules (k = 1, 2, 4, 8, 16).
int forced_cluster_k() {
  static const int k = [] {
    const int v = std::atoi(env_value("JAX_MEMOPS_SOFTMAX_FWD_K").c_str());
    return v >= 1 && v <= kMaxClusterNonPortable ? v : 0;
  }();
  return k;
}

// Under plan_log_on(): each bulk-copy launch whose plan differs from the previous one is described on
// stderr (variant and ", messages" where the kernel merges by messages, CTA size, cluster size, element size, chunk,
// shared memory, clusters resident, packs prefetched ahead and whether at evict_last, and whether by tickets), for A/B
// runs and the tests.
void log_tma_plan(const char* variant, bool messages, RowShape s, int elem_bytes, int block, int k, int64_t chunk,
                  int64_t smem, int active, int ahead, bool keep, bool tickets) {
  static std::atomic<int64_t> last{-1};
  const int64_t key = ((s.cols * 64 + k * 2 + messages) * 1000003 + elem_bytes * 7 + tickets) ^
                      static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(variant));
  if (!plan_log_due(last, key)) return;
  std::fprintf(stderr, "softmax_fwd plan: %s%s x %d threads rows=%lld cols=%lld k=%d elem=%dB chunk=%lld packs "
               "smem=%lld KB clusters=%d ahead=%d packs%s%s\n", variant, messages ? ", messages" : "", block,
               static_cast<long long>(s.rows), static_cast<long long>(s.cols), k, elem_bytes,
               static_cast<long long>(chunk),
               static_cast<long long>(smem / 1024), active, ahead, keep ? " (evict_last)" : "",
               tickets ? " tickets" : "");
}

// One plan of a bulk-copy kernel: cluster size k, chunk = ceil(packs / k) packs per CTA in each of
// `stages` buffers, clusters resident; score = CTAs resident, counted up to kTmaScoredPerSm per SM (0:
// does not fit in shared memory, exceeds max_chunk, or cannot launch).
struct TmaPlan {
  int k = 0, active = 0, block = 0;
  int64_t chunk = 0, smem = 0, score = 0;
  int ahead = 0;      // the kernel's `ahead`: packs of the next row's share prefetched into L2 (v49)
  bool keep = false;  // those prefetches at L2's evict_last priority (the kernel's kKeepAhead; v50), for the log
};

constexpr int kTmaScoredPerSm = 2;  // a second CTA per SM overlaps one's reduction with the other's loads

// Ties in score (launch_fwd_tma): since v13 the smallest k that merges by messages (k >= push_min_cluster())
// wins over a smaller k that merges by the barrier, else the smallest k. Where that changes the plan
// (f32 40000-55000: k = 4 of one buffer for 2; 16-bit 40000-65536: 4 of 8-pack registers for 1 or 2,
// 100000: 4 of one buffer for 2) the H200 measured, over five runs, against the smallest k: f32 40000
// +0 to +4%, 50257 +0 to +4%, 55000 +5 to +9%; bf16 50257 -4 to +5%, 55000 +4 to +11%, 65536 -3 to +4%,
// 100000 +7 to +11%, 40000 -5 to 0% (RESULTS.md, "v13"): k = 4 holds 4 CTAs per SM where k = 2 holds 2,
// and its merge waits at no barrier. JAX_MEMOPS_SOFTMAX_TIE=small (A/B, read once per process): the
// smallest k on every tie (v5-v12).
bool tie_to_messages() {
  static const bool on = env_choice("JAX_MEMOPS_SOFTMAX_TIE", {{"small", false}}, true);
  return on;
}

template <auto Kernel>
TmaPlan tma_plan(const DeviceInfo& dev, int64_t packs, int k, int stages, int64_t max_chunk, int block) {
  const int64_t chunk = ceil_div(packs, k);
  const int64_t smem = ceil_div(stages * chunk * 16, 1024) * 1024;
  if (chunk > max_chunk || smem > int64_t{dev.max_smem_optin} - kTmaSmemReserve) return {};
  const int active = tma_active_clusters<Kernel>(dev, k, static_cast<int>(smem), block);
  if (active == 0) return {};
  const int64_t score = std::min<int64_t>(int64_t{active} * k, int64_t{kTmaScoredPerSm} * dev.sm_count);
  return {k, active, block, chunk, smem, score};
}

// The next slot of the tickets' ring (softmax_fwd_tma.cuh g_ticket_ring), in turn over the launches of this process.
int ticket_slot() {
  static std::atomic<unsigned> next{0};
  return static_cast<int>(next.fetch_add(1, std::memory_order_relaxed) % smx::kTicketSlots);
}

// Launches plan p of Kernel (a persistent grid of clusters, cluster_grid; `messages`: its merge, for the log);
// *launched = false (and success) where the launch is refused (a configuration error: the caller's fallback takes the
// rows). rows_per_cluster (softmax_long_ab.cu's grids and v72; 0: none): a grid of ceil(rows / rows_per_cluster)
// clusters instead where that is more than the persistent grid, which the hardware schedules in waves as earlier
// clusters exit. tickets (v75-v79: f32, on one buffer or, v79, on registers; v76, v78: every one buffer; v73, an A/B
// version: one-buffer and register kernels): the persistent grid's rows past each cluster's first two drawn from a
// counter of softmax_fwd_tma.cuh's ring (ticket_slot).
template <auto Kernel, typename T>
ffi::Error launch_tma_plan(const char* variant, bool messages, const TmaPlan& p, cudaStream_t stream, RowShape s,
                           const T* x, T* y, bool* launched, int rows_per_cluster = 0, bool tickets = false) {
  tickets = tickets && rows_per_cluster == 0 && s.rows <= INT_MAX;
  log_tma_plan(variant, messages, s, int{sizeof(T)}, p.block, p.k, p.chunk, p.smem, p.active, p.ahead, p.keep, tickets);
  int64_t clusters = cluster_grid(s.rows, p.active, p.k);
  if (rows_per_cluster > 0) {
    clusters = std::min<int64_t>(std::max(clusters, ceil_div(s.rows, int64_t{rows_per_cluster})), 0x7fffffff / p.k);
  }
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(dim3(static_cast<unsigned>(clusters * p.k)), p.block, p.k,
                                                stream, &attr, static_cast<size_t>(p.smem));
  if (cudaLaunchKernelEx(&cfg, Kernel, x, y, s.rows, static_cast<int>(s.cols), static_cast<int>(p.chunk), p.ahead,
                         tickets ? ticket_slot() : -1) != cudaSuccess) {
    (void)cudaGetLastError();
    return ffi::Error::Success();
  }
  *launched = true;
  return check_launch("softmax_fwd (bulk-copy cluster)");
}

// v49 (v50's prefetch at the normal priority): the share of its next row that each bulk-copy CTA prefetches into L2
// once its row has landed (softmax_fwd_tma.cuh's `ahead`). Measured inside one process against v27
// (benchmarks/softmax_long_ab.cu, two rounds, A/A 0.99-1.03; RESULTS.md "v49"): 75% gave f32 50257 +9%, 65536
// +6.2..6.6%, 131072 +7.6..8.7%, bf16 100000 +4.7..5.2%, 131072 +8..8.7%; 50% and 100% 0.3-2.2 points less; prefetches
// issued beside the row's bulk copy instead up to 4 points less at 35-80% of the share, nothing at 100%. Another
// process read +1.2..2.4% at the same shapes (A/A 1.005-1.021), 60-90% within 1.5 points of each other; the bench
// (device timing) f32 50257 / 131072 81 / 83 -> 83 / 86% of the copy, bf16 131072 78 -> 82%.
constexpr int kTmaAheadPct = 75;

// v50 (the default; launch_fwd_tma's kKeep): the prefetches above at L2's evict_last priority, so that the streaming
// lines go first (x's bulk copies read at evict_first, y's stores streaming). Nsight Compute over v49 (one launch each,
// f32 50257 / 131072): 274 / 275 MB read from HBM for tensors of 268 (v27: 268), L2 at 86% of its peak throughput; at
// 100% of the share 288-294 MB. Measured inside one process against v49 (benchmarks/softmax_long_ab.cu, three rounds
// in three processes; RESULTS.md "v51"): f32 50257 +3.2..4.7%, 65536 +2.6..3.5%, 131072 +1.6..3.8%, bf16 131072 and
// 262144 -0.2..+2%; the bench (device timing) f32 50257 / 131072 83 / 86 -> 85 / 87% of the copy, bf16 131072 82 ->
// 83%, every other cell within 0.01x and a point. Prefetching 2 or 3 rows ahead lost 5-19% (RESULTS.md "v51").

// The bulk-copy cluster class (sm_90; softmax_fwd_tma.cuh): among cluster sizes k = 1, 2, 4, 8, 16 the
// plan with the most CTAs resident, counted up to 2 per SM (a second CTA per SM overlaps one CTA's
// reduction with the other's loads; more adds little), on ties the smallest k that merges by messages,
// else the smallest k (tie_to_messages; measured on the H200 before the messages: each doubling of k
// cost 5-45% at the same bytes per CTA, a cluster barrier and DSMEM merge per row over more CTAs, and
// fewer clusters resident). Variants: two buffers (v3); one buffer (v5's f32); one
// buffer copied into registers, at most 8 packs per thread (64 registers, 4 CTAs per SM) else 16 (2 per
// SM) (v5's 16-bit types, which have twice the elements per byte, so v3's three shared-memory passes
// and two exps per element weigh twice as much; where no register plan fits, or one buffer plans a
// smaller cluster, one buffer).
// kPush: the kernels that merge a row's (max, sum) by messages; where the plan's k is below
// push_min_cluster(), the barrier's kernels plan and run instead.
// ahead_pct: the percentage of a CTA's share of its next row that it prefetches into L2 (TmaPlan::ahead).
// *launched = false (and success) when no plan fits or launches: the caller falls back to the v2
// classes.
// force_k (A/B harnesses; 0: forced_cluster_k()): the plans of cluster size force_k alone, any k in 1..16.
// kKeep (v50): the kernels' prefetches at L2's evict_last priority (softmax_fwd_tma.cuh kKeepAhead).
// kTickets (v73, v75-v79): rows by tickets on the persistent grid (launch_tma_plan; not the two buffers').
// k_mult (v76-v79): the rule's plan at k_mult times its cluster size (where that is at most 16 and k is not
//   forced), one buffer read from shared memory at any dtype: smaller shares, more CTAs per SM. one_buffer_only (v78):
//   where the rule's plan is a register kernel, no launch (*launched = false: the caller runs its own kernels).
// regs_at_k2 (v79, with k_mult > 1): at k_mult times the rule's k (the rule's k where that passes 16) the register
//   kernels (8 packs per thread, else 16) where they fit, else one buffer: each CTA copies its share into registers
//   once and refills its buffer with its next row's share at once, so that copy overlaps this row's merge and stores.
template <typename T, int B = smx::kTmaBlock, bool kPush = false, bool kKeep = false, bool kTickets = false>
ffi::Error launch_fwd_tma(const DeviceInfo& dev, cudaStream_t stream, RowShape s, FwdVersion version, const T* x,
                          T* y, bool* launched, int ahead_pct = 0, int force_k = 0, int rows_per_cluster = 0,
                          int k_mult = 1, bool one_buffer_only = false, bool regs_at_k2 = false) {
  constexpr auto kTwoStages = smx::softmax_fwd_tma_kernel<T, 2, 0, smx::kTmaBlock, kPush, kKeep>;
  constexpr auto kOneStage = smx::softmax_fwd_tma_kernel<T, 1, 0, B, kPush, kKeep, kTickets>;
  constexpr auto kRegs8 = smx::softmax_fwd_tma_kernel<T, 1, 8, B, kPush, kKeep, kTickets>;
  constexpr auto kRegs16 = smx::softmax_fwd_tma_kernel<T, 1, 16, B, kPush, kKeep, kTickets>;
  constexpr int64_t kAny = INT_MAX;
  *launched = false;
  const int64_t packs = ceil_div(s.cols, kVec<T>);
  const bool regs = version == FwdVersion::kV5Reg || (version == FwdVersion::kV5 && sizeof(T) == 2);
  const bool two_stages = version == FwdVersion::kV3 || version == FwdVersion::kV3Prefetch;
  const int forced = force_k != 0 ? force_k : forced_cluster_k();
  enum Variant { kTwo, kOne, kR8, kR16 };
  const bool tie_push = kPush && tie_to_messages();
  auto best_of = [&](auto plan_k) {  // plan_k(k) -> {TmaPlan, Variant}
    std::pair<TmaPlan, Variant> best{};
    for (int k = forced != 0 ? forced : 1; k <= kMaxClusterNonPortable; k = forced != 0 ? INT_MAX : 2 * k) {
      const auto p = plan_k(k);
      const bool to_messages = tie_push && p.first.score > 0 && p.first.score == best.first.score &&
                               best.first.k < push_min_cluster() && p.first.k >= push_min_cluster();
      if (p.first.score > best.first.score || to_messages) best = p;
    }
    return best;
  };
  const auto regs_plan = [&](int k) -> std::pair<TmaPlan, Variant> {  // 8 packs per thread where they fit, else 16
    if (TmaPlan p = tma_plan<kRegs8>(dev, packs, k, 1, 8 * B, B); p.score > 0) return {p, kR8};
    return {tma_plan<kRegs16>(dev, packs, k, 1, 16 * B, B), kR16};
  };
  std::pair<TmaPlan, Variant> best{};
  if (regs) best = best_of(regs_plan);
  const auto shared_plan = [&] {
    return best_of([&](int k) -> std::pair<TmaPlan, Variant> {
      if (two_stages) return {tma_plan<kTwoStages>(dev, packs, k, 2, kAny, smx::kTmaBlock), kTwo};
      return {tma_plan<kOneStage>(dev, packs, k, 1, kAny, B), kOne};
    });
  };
  if (best.first.k == 0) {
    best = shared_plan();
  } else if (version == FwdVersion::kV5) {
    // 16-bit: the registers cap a CTA's share (8-16 packs per thread), so long rows need larger clusters
    // than one buffer read from shared memory; cluster size is the cost (RESULTS.md, "v4 and v5"), and
    // the H200 measured the buffer 3-8% faster at C = 131072 (k = 4 against the registers' 8), and the
    // two within run-to-run noise at equal k (C = 32768, k = 1: -7 to +4% in two runs; RESULTS.md, "v6").
    // Take the buffer only where its k is smaller.
    if (const auto one = shared_plan(); one.first.k != 0 && one.first.k < best.first.k &&
                                        one.first.score >= best.first.score) {
      best = one;
    }
  }
  if (best.first.k == 0 || (one_buffer_only && best.second != kOne)) return ffi::Error::Success();
  if (k_mult > 1 && forced == 0 && !two_stages) {
    const int k2 = best.first.k * k_mult <= kMaxClusterNonPortable ? best.first.k * k_mult : 0;
    bool placed = false;
    if (regs_at_k2) {  // at k2, or at the rule's k where k2 would pass 16
      if (const auto p = regs_plan(k2 != 0 ? k2 : best.first.k); p.first.score > 0) best = p, placed = true;
    }
    if (!placed && k2 != 0) {
      if (const TmaPlan p = tma_plan<kOneStage>(dev, packs, k2, 1, kAny, B); p.score > 0) best = {p, kOne};
    }
  }
  if constexpr (kPush) {  // the plans are those of the message kernels; below push_min_cluster, the barrier's
    if (best.first.k < push_min_cluster()) {
      return launch_fwd_tma<T, B, false, kKeep, kTickets>(dev, stream, s, version, x, y, launched, ahead_pct, force_k,
                                                          rows_per_cluster, k_mult, one_buffer_only, regs_at_k2);
    }
  }
  best.first.ahead = static_cast<int>(ceil_div(best.first.chunk * ahead_pct, int64_t{100}));
  best.first.keep = kKeep && best.first.ahead > 0;
  switch (best.second) {
    case kOne:
      return launch_tma_plan<kOneStage>("one buffer", kPush, best.first, stream, s, x, y, launched, rows_per_cluster,
                                        kTickets);
    case kR8:
      return launch_tma_plan<kRegs8>("registers (8)", kPush, best.first, stream, s, x, y, launched, rows_per_cluster,
                                     kTickets);
    case kR16:
      return launch_tma_plan<kRegs16>("registers (16)", kPush, best.first, stream, s, x, y, launched,
                                      rows_per_cluster, kTickets);
    default:
      return launch_tma_plan<kTwoStages>("two buffers", kPush, best.first, stream, s, x, y, launched,
                                         rows_per_cluster);
  }
}

// Register rows of 8 packs per thread (v3's kernel; 128 KB of loads in flight per SM where v3's 4 packs
// give 64 KB): sub-warp and block rows up to `max_block` threads (f32 C <= 32768, 16-bit 65536 at 1024),
// longer rows one per cluster of up to 16 CTAs of max_block threads. v9's default takes them for
// kWideMinCols < C <= kWideMaxCols (block rows of 64..1024 threads): measured on the H200 against v5
// (RESULTS.md, "v9") +4 to +16% there (f32 8192: 89 -> 94% of the copy, 32768: 86 -> 91%; bf16 8192:
// 81 -> 94%, 32768: 82 -> 99%, where v5 ran 512-thread block rows or a bulk-copy cluster), f32 1024-4096
// within the noise (its two exps per element against v3's one), 2-8% slower for sub-warp rows (fewer
// threads per row) and for rows on clusters (50257-131072: v5's bulk copy stays).
// kCached (v21, the default): x read by __ldg and y stored plainly, as v20's sub-warp and block rows; over
// the streaming hints (v20) in three rounds on the H200 (RESULTS.md, "v21"): f32 32768 +5 to +7% (89-90 ->
// 95-97% of the copy; 1.75-1.79 -> 1.87-1.89x XLA), 16384 +3 to +4%, 8192 +1 to +9%; bf16 16384 +4 to +7%,
// 32768 -0.4 to +9%, 4096 and 8192 -3 to +10% (noise: the same kernels elsewhere read 0.96-1.10). Block rows
// only: on register clusters (rows the default sends to the bulk-copy cluster) they measured 0.85-0.98 of it.
template <typename T>
constexpr int64_t kWideMinCols = sizeof(T) == 4 ? 4096 : 2048;
constexpr int64_t kWideMaxCols = 32768;

template <typename T, bool kCached>
ffi::Error launch_fwd_wide(const DeviceInfo& dev, cudaStream_t stream, RowShape s, int max_block, const T* x, T* y,
                           bool* launched) {
  constexpr int kPacks = 8;
  constexpr bool kKeep = false;  // raw packs, two exps per element (f32's kept exps spill 136-180 bytes)
  constexpr int elems = kPacks * kVec<T>;
  *launched = false;
  const int64_t rt = std::max<int64_t>(smx::kMinTpr, next_pow2(ceil_div(s.cols, elems)));
  if (rt <= max_block) {
    const int tpr = static_cast<int>(rt);
    const int block = tpr <= 32 ? smx::kSubWarpBlock : tpr;
    *launched = true;
    return launch_persistent<smx::softmax_fwd_regs_kernel<T, kPacks, kKeep, false, false, kCached>, Grid::kFull>(
        dev, stream, ceil_div(s.rows, block / tpr), block, "softmax_fwd", x, y, s.rows, static_cast<int>(s.cols),
        tpr);
  }
  if (kCached || dev.cc_major < 9) return ffi::Error::Success();
  return launch_cluster_rows<smx::softmax_fwd_regs_kernel<T, kPacks, kKeep, false, true>>(
      dev, stream, s, elems, {ClusterShape{max_block, kMaxCluster}, ClusterShape{max_block, kMaxClusterNonPortable}},
      launched, "softmax_fwd (register cluster)", x, y);
}

// v14 (the default): 16-bit rows of kWideMaxCols < C take softmax_fwd_l2.cuh's two-pass kernel (512-thread
// CTAs, two per SM, one row each, L2 as the row buffer) where the rows in flight (the resident CTAs)
// fit kL2SharePct of L2: on the H200 (60 MiB, 264 CTAs) C <= ~66700; longer 16-bit rows and f32 rows
// (twice the bytes) keep the bulk-copy cluster. Measured on the H200 (RESULTS.md, "v14"), new / v9 over
// three rounds: bf16 / f16 40000 +11 to +17%, 50257 +4 to +17%, 55000 +2 to +11%, 65536 (33 MiB in
// flight) -3 to +7% (mean +1.5%), but 70001 (35 MiB) -2 to -4%, 80000 -2 to -4% and 100000 -5 to -11% (L2
// misses; forced by JAX_MEMOPS_SOFTMAX_L2_SHARE=100), hence the bound between 33 and 35 MiB.
// JAX_MEMOPS_SOFTMAX_L2_SHARE (A/B, read once per process): the share of L2 in percent (0: never this
// kernel).
constexpr int kL2SharePct = 56;

int l2_share_pct() {
  static const int pct = [] {
    const std::string v = env_value("JAX_MEMOPS_SOFTMAX_L2_SHARE");
    return v.empty() ? kL2SharePct : std::clamp(std::atoi(v.c_str()), 0, 100);
  }();
  return pct;
}

// grid: kPersistent (two CTAs per SM walking the rows; v14-v50), kFull (v72-v74, the default: one CTA per row, the
// same rows in flight; bf16 50257 +7.9% on an H100, +5.6..7.5% on the H200: the SMs' uneven ends recovered).
template <typename T>
ffi::Error launch_fwd_l2(const DeviceInfo& dev, cudaStream_t stream, RowShape s, const T* x, T* y, bool* launched,
                         Grid grid_pref = Grid::kPersistent) {
  constexpr auto kernel = smx::softmax_fwd_l2_kernel<T>;
  *launched = false;
  int per_sm = 0;
  if (auto err = blocks_per_sm<kernel>(smx::kL2Block, &per_sm); err.failure()) return err;
  const int64_t in_flight = std::min(s.rows, int64_t{dev.sm_count} * per_sm);
  const int64_t bytes_in_flight = in_flight * s.cols * int64_t{sizeof(T)};
  if (bytes_in_flight * 100 > int64_t{dev.l2_bytes} * l2_share_pct()) return ffi::Error::Success();
  static std::atomic<int64_t> last{-1};
  if (plan_log_due(last, s.cols)) {
    std::fprintf(stderr, "softmax_fwd plan: l2 two-pass x %d threads rows=%lld cols=%lld in flight=%lld (%lld MB)\n",
                 smx::kL2Block, static_cast<long long>(s.rows), static_cast<long long>(s.cols),
                 static_cast<long long>(in_flight), static_cast<long long>(bytes_in_flight >> 20));
  }
  *launched = true;
  // JAX_MEMOPS_GRID=full (A/B, v69): one CTA per row, as many resident (so as many rows in L2) as the persistent grid.
  const int64_t grid = grid_for(s.rows, in_flight, grid_pref);
  return launch(kernel, dim3(static_cast<unsigned>(grid)), dim3(unsigned{smx::kL2Block}), 0, stream,
                "softmax_fwd", x, y, s.rows, static_cast<int>(s.cols));
}

// The v3/v5 forward where it applies (16-byte accesses; sub-warp and block classes by the register
// kernel, longer rows by the bulk-copy cluster on sm_90); *launched = false elsewhere (the v2 classes
// then run: the register cluster where no bulk-copy one can launch, the 1024-thread CTA, stream).
template <typename T>
ffi::Error launch_fwd_v3(cudaStream_t stream, RowShape s, bool vec, FwdVersion version, const T* x, T* y,
                         bool* launched) {
  *launched = false;
  if (!vec) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  // v79 (the default): v77 with its f32 clusters on the register kernels (launch_fwd_tma's regs_at_k2; the H200,
  // softmax_long_ab.cu: f32 50257 +4.2%, 131072 +2.4%, 262144 +3.3%; an H100 +0.7..2.6% in three calls; RESULTS.md
  // "v78 and v79", "v79 the default").
  // v78 (A/B): v77 where the rule's 16-bit plan is a register kernel, v76 where it is one buffer (an H100,
  // softmax_long_ab.cu: bf16 100000 +6.4%, 131072 / 262144 +0.9 / +1.1%; but the H200: bf16 100000 -3.5%, 131072
  // -3.6%, 262144 -5.8%, against v77).
  // v77: v75 with its f32 clusters at twice the rule's k (an H100: softmax_long_ab.cu f32 50257 +5.8%,
  // 65536 +1.7%, 100000 +4.9%, 131072 +2.2%, 262144 (k = 16 already) +0.6%; the bench +2.3..6.1%; RESULTS.md "v76 and
  // v77"). v75: v74 with the f32 bulk-copy clusters' rows by tickets (two H100 benches: f32 50257..131072
  // +0.9..2.6%, 262144 +0.3..0.9%; softmax_long_ab.cu, four rounds in two sessions: +0.8..3.6%; RESULTS.md "v75");
  // 16-bit rows keep v74's (tickets there: -1.3..+0.9%). v74: v50 with v14's L2 rows on a full grid (the H200's
  // bench: bf16 50257 +7.5..7.6%, 65536 +4%; softmax_long_ab.cu: +5.6..6.9%; RESULTS.md "v73 and v74"). v73 (A/B): v74
  // with every bulk-copy cluster's rows by tickets. v72 (A/B): v74 with the bulk-copy clusters of rows under 256 KB on
  // a grid of 2 rows per cluster (an H100: f32 50257 +6.5%; the H200's bench: f32 50257 -0.6..-0.9%, bf16 100000
  // -2.4%).
  // v76 (A/B): v77 with every one-buffer cluster's rows by tickets at twice the rule's k, 16-bit too (an H100: bf16
  // 100000 +3.9..5.2%, 131072 +0.5..1.4%, but 65536, where the rule's plan is registers at k = 2, -4.3%).
  const bool v76 = version == FwdVersion::kV76, v78 = version == FwdVersion::kV78;
  const bool v77_f32 = (version == FwdVersion::kV77 || version == FwdVersion::kV79) && sizeof(T) == 4;
  const bool regs_at_k2 = version == FwdVersion::kV79 && sizeof(T) == 4;
  const bool f32_tickets = (version == FwdVersion::kV75 || v77_f32) && sizeof(T) == 4;
  const bool tickets = version == FwdVersion::kV73 || f32_tickets || v76 || v78;
  const int k_mult = v76 || v78 || v77_f32 ? 2 : 1;
  const bool v72 = version == FwdVersion::kV72;
  const bool l2_full = tickets || v72 || version == FwdVersion::kV74 || version == FwdVersion::kV75 ||
                       version == FwdVersion::kV77 || version == FwdVersion::kV79;
  if (l2_full) version = FwdVersion::kV50;  // elsewhere v50
  const bool keep_ahead = version == FwdVersion::kV50;
  if (keep_ahead) version = FwdVersion::kV49;  // elsewhere v49
  const int ahead_pct = version == FwdVersion::kV49 ? kTmaAheadPct : 0;
  if (version == FwdVersion::kV49) version = FwdVersion::kV27;  // elsewhere v27
  const bool wide2 = version == FwdVersion::kV27;
  if (wide2) version = FwdVersion::kV26;  // elsewhere v26
  const bool fill2 = version == FwdVersion::kV26;
  if (fill2) version = FwdVersion::kV25;  // elsewhere v25
  const bool short2 = version == FwdVersion::kV25;
  if (short2) version = FwdVersion::kV24;  // elsewhere v24
  const bool bounded = version == FwdVersion::kV24;
  if (bounded) version = FwdVersion::kV23;  // elsewhere v23
  const bool packs8 = version == FwdVersion::kV23;
  if (packs8) version = FwdVersion::kV21;  // elsewhere v21
  const bool wide_cached = version == FwdVersion::kV21;
  const bool cached_io = wide_cached || version == FwdVersion::kV20;
  if (cached_io) version = FwdVersion::kV14;  // elsewhere v14
  if (version == FwdVersion::kV14) {
    if constexpr (sizeof(T) == 2) {
      if (s.cols > kWideMaxCols && s.cols <= INT_MAX) {
        if (auto err = launch_fwd_l2(dev, stream, s, x, y, launched, l2_full ? Grid::kFull : Grid::kPersistent);
            err.failure() || *launched) {
          return err;
        }
      }
    }
    version = FwdVersion::kV9;  // elsewhere v9
  }
  const bool wide_default = version == FwdVersion::kV9 && s.cols > kWideMinCols<T> && s.cols <= kWideMaxCols;
  if (wide_default || version == FwdVersion::kV9Wide || version == FwdVersion::kV9Wide512) {
    const int max_block = version == FwdVersion::kV9Wide512 ? kMaxBlock / 2 : kMaxBlock;
    if (auto err = wide_cached ? launch_fwd_wide<T, true>(dev, stream, s, max_block, x, y, launched)
                               : launch_fwd_wide<T, false>(dev, stream, s, max_block, x, y, launched);
        err.failure() || *launched) {
      return err;
    }
  }
  if (version == FwdVersion::kV9 || version == FwdVersion::kV9Wide || version == FwdVersion::kV9Wide512) {
    version = FwdVersion::kV5;  // elsewhere v5
  }
  const bool prefetch = version == FwdVersion::kV3Prefetch;
  // The threads of a row of `packs` 16-byte packs per thread (a power of two, at least smx::kMinTpr).
  const auto row_threads = [&](int packs) {
    return std::max<int64_t>(smx::kMinTpr, next_pow2(ceil_div(s.cols, int64_t{packs} * kVec<T>)));
  };
  const int64_t rt4 = row_threads(smx::kFwdPacks);
  if (rt4 <= kMaxBlock / 2) {  // sub-warp and block classes
    // v23: 16-bit rows of 8 packs per thread where that halves the threads of 4 (C > 128; sub-warp rows up to
    // C = 2048, beyond which launch_fwd_wide's 8-pack block rows take them).
    constexpr int kPacks8 = 2 * smx::kFwdPacks;
    const bool use8 = sizeof(T) == 2 && packs8 && row_threads(kPacks8) < rt4;
    const int tpr = static_cast<int>(use8 ? row_threads(kPacks8) : rt4);
    const int block = tpr <= 32 ? smx::kSubWarpBlock : tpr;
    const int64_t groups = ceil_div(s.rows, block / tpr);
    *launched = true;
    // Rows on 2 packs per thread (tpr2 threads). v25: 16-bit rows of C <= 64 on 4 threads, blocks of 128 at >= 8 per
    // SM (32 registers, no spill): bf16 C = 64 +7.6% over v24's rows in one process. v26: also rows that fill the 2
    // packs of up to 8 (16-bit: C = 128) or 16 threads (f32: C = 32, 64, 128; exps kept, >= 6 blocks of 256, 40
    // registers), after RowIter's shifts: bf16 C = 128 +2.6..2.9%, f32 128 +3..4%, f32 64 +1..2% in three / two
    // rounds; rows that leave slots empty lose (bf16 C = 96: 0.85). v27: 16-bit rows that fill 16 threads too (C =
    // 256: +2..3% over v23's 8-pack rows, checked before them) (RESULTS.md "v25").
    constexpr bool kKeep = sizeof(T) == 4;  // f32 keeps its exps (one exp per element), 16-bit types the raw packs
    using One = std::integral_constant<int, 1>;
    const int64_t tpr2 = row_threads(2);
    const bool fills2 = fill2 && s.cols == 2 * tpr2 * kVec<T>;
    const auto packs2 = [&](auto min_blocks, int block2) {
      return launch_persistent<smx::softmax_fwd_regs_kernel<T, 2, kKeep, false, false, true, min_blocks()>,
                               Grid::kFull>(dev, stream, ceil_div(s.rows, block2 / tpr2), block2, "softmax_fwd", x, y,
                                            s.rows, static_cast<int>(s.cols), static_cast<int>(tpr2));
    };
    if constexpr (sizeof(T) == 2) {
      if ((short2 && tpr2 == smx::kMinTpr) || (fills2 && tpr2 <= (wide2 ? 16 : 8))) {
        return packs2(std::integral_constant<int, 8>{}, smx::kSubWarpBlock / 2);
      }
    } else {
      // v27: f32 rows that fill 2 packs of 32 threads unbounded (40 registers used): 1.029 / 1.038 of the rule in
      // two rounds, >= 6 blocks 1.021 / 1.001.
      if (wide2 && fills2 && tpr2 == 32) return packs2(One{}, smx::kSubWarpBlock);
      if (fills2 && tpr2 <= 16) return packs2(std::integral_constant<int, 6>{}, smx::kSubWarpBlock);
    }
    if constexpr (sizeof(T) == 2) {
      if (use8) {
        return launch_persistent<smx::softmax_fwd_regs_kernel<T, kPacks8, false, false, false, true>, Grid::kFull>(
            dev, stream, groups, block, "softmax_fwd", x, y, s.rows, static_cast<int>(s.cols), tpr);
      }
    }
    if (prefetch) {
      return launch_persistent<smx::softmax_fwd_regs_kernel<T, smx::kFwdPacks, false, true>>(
          dev, stream, groups, block, "softmax_fwd", x, y, s.rows, static_cast<int>(s.cols), tpr);
    }
    // A full grid (v6; the prefetching A/B variant stays persistent: its next-row loads need a next row).
    const auto regs = [&](auto cached, auto min_blocks) {
      return launch_persistent<
          smx::softmax_fwd_regs_kernel<T, smx::kFwdPacks, kKeep, false, false, cached(), min_blocks()>, Grid::kFull>(
          dev, stream, groups, block, "softmax_fwd", x, y, s.rows, static_cast<int>(s.cols), tpr);
    };
    // v24: 16-bit sub-warp rows at >= 6 blocks of 256 per SM (40 registers, no spill; the 64 of kMaxBlock's bound
    // leave 4): bf16 C = 128 +2.3 / +2.6% in two rounds in one process, C = 64 +12% (RESULTS.md "v24"). f32 rows
    // spill below 64 registers.
    if constexpr (sizeof(T) == 2) {
      if (bounded && tpr <= 32) return regs(std::true_type{}, std::integral_constant<int, 6>{});
    }
    return cached_io ? regs(std::true_type{}, One{}) : regs(std::false_type{}, One{});
  }
  if (dev.cc_major < 9 || s.cols > INT_MAX) return ffi::Error::Success();
  if (version == FwdVersion::kV7Wide) return launch_fwd_tma<T, 512>(dev, stream, s, FwdVersion::kV5, x, y, launched);
  const int rows_per_cluster = v72 && s.cols * int64_t{sizeof(T)} < (int64_t{1} << 18) ? 2 : 0;
  if (tickets) {
    const bool one_buffer_only = v78 && sizeof(T) == 2;
    auto err = launch_fwd_tma<T, smx::kTmaBlock, true, true, true>(dev, stream, s, version, x, y, launched, ahead_pct,
                                                                   0, 0, k_mult, one_buffer_only, regs_at_k2);
    if (err.failure() || *launched || !one_buffer_only) return err;  // v78's 16-bit register plans: v77's, below
  }
  return keep_ahead ? launch_fwd_tma<T, smx::kTmaBlock, true, true>(dev, stream, s, version, x, y, launched, ahead_pct,
                                                                     0, rows_per_cluster)
                    : launch_fwd_tma<T, smx::kTmaBlock, true>(dev, stream, s, version, x, y, launched, ahead_pct);
}

ffi::Error SoftmaxFwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y,
                      int64_t algorithm) {
  if (algorithm < 0 || algorithm > kSoftmaxLadderLast) {
    return ffi::Error::InvalidArgument("softmax_fwd: unknown algorithm " + std::to_string(algorithm) +
                                       " (0 = auto, 1..7 = the seed's v1..v7)");
  }
  RowShape s;
  if (auto err = first_error({row_shape(x, "x", &s), check_same(x, *y, "y")}); err.failure()) return err;
  if (s.size() == 0) return ffi::Error::Success();
  if (algorithm != 0) {
    return launch_softmax_ladder(algorithm, stream, x.element_type(), x.untyped_data(), y->untyped_data(), s);
  }
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    const bool vec = same_alignment({xp, yp});
    if (const FwdVersion version = fwd_version(); version != FwdVersion::kV2) {
      bool launched = false;
      if (auto err = launch_fwd_v3(stream, s, vec, version, xp, yp, &launched);
          err.failure() || launched) {
        return err;
      }
    }
    return launch_auto<smx::softmax_fwd_rows_kernel<T, false>, smx::softmax_fwd_rows_kernel<T, true>,
                       smx::softmax_fwd_stream_kernel<T, kVec<T>>, smx::softmax_fwd_stream_kernel<T, 1>,
                       Grid::kPersistent>(
        stream, s, smx::fwd_elems_per_thread<T>(), kVec<T>, vec, ClusterOrder::kV2, "softmax_fwd", xp, yp);
  });
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxFwdCuda, jm::cuda::SoftmaxFwd,
                              jm::bind::softmax_fwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
