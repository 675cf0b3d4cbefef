// Softmax over the last axis: XLA FFI handlers (JmSoftmaxFwdCuda, JmSoftmaxBwdCuda) and the choice of
// kernel for algorithm "auto" (0); algorithms 1..7 run the seed's teaching ladder (softmax_ladder.cu).
//
// "auto" keeps every row on chip whenever it can, so x (y, dy) is read from HBM once and y (dx)
// written once: 2 tensor passes forward, 3 backward. A thread holds 4 packs of 16 bytes of each input
// in registers (forward: x, f32 kept as float exps, bf16/f16 raw; backward: y and dy raw), i.e.
// e = 16 f32 or 32 bf16/f16 row elements, so a row needs rt = max(4, next power of two of C / e)
// threads. Size classes by rt (C limits, forward and backward: f32 | bf16/f16):
//
//  class      rt          CTA                            where the row lives             C
//  sub-warp   4..32       256 threads, 256/rt rows       registers; xor shuffles         <= 512 | 1024
//  block      64..512     rt threads, one row            registers; smem warp partials   <= 8192 | 16384
//  bulk-copy  (forward,   k = 1..16 CTAs of 256 threads  shared memory of k CTAs, one  16 x ~226 KB
//   cluster   sm_90)      (k: up to 2 CTAs per SM, from  row buffer (v3: two) filled  (f32 C ~ 925K,
//                         the occupancy API; ties: the  by cp.async.bulk (16-bit:   16-bit ~1.85M)
//                         smallest k by messages)        copied to registers); DSMEM
//                                                        (max, sum)
//  L2 two-    (forward,   512 threads (2 per SM), one    L2: pass 1 from HBM, pass 2     16-bit: 32768 < C while
//   pass      v14)        row                            re-reads it                     2 rows / SM fit 56% of
//                                                                                        L2 (H200: C <~ 66700)
//  cluster    1024..8192  k <= 8 CTAs of 512 threads     registers of k CTAs; the        <= 131072 | 262144
//                         (k <= 16 where the device      row's (max, sum) or dot via     (8 x 512: 65536
//                         allows it, else 8 of 1024),    DSMEM (backward k >= 2:         | 131072; the
//                         one row; the backward: 4 or 5  messages)                       backward: 327680
//                         packs per thread, 16 x 1024                                    | 655360)
//                         threads past 16 x 512 (v38)
//  stream     any         up to 1024 threads, one row    HBM: two passes (3 fwd, 5 bwd   longer
//                                                        tensor passes)
// The forward takes the L2 two-pass kernel for the 16-bit rows where it applies (launch_fwd_l2), else the
// bulk-copy cluster for every row beyond the block class where it can launch;
// the register cluster class serves the backward, and the forward only where no bulk-copy one can
// launch (or under JAX_MEMOPS_SOFTMAX_FWD=v2, below). Since v12 the backward's clusters of 4 or more (v38: 2 or
// more) CTAs merge each row's sum by messages instead of the cluster barrier and DSMEM (bwd_push_min_cluster);
// since v38 its long rows take launch_bwd_v38's plans first.
// Why: every register kernel is __launch_bounds__(1024, 1), <= 64 registers (ptxas -v: 48-64, no
// spills), so an SM holds 1024 threads. More elements per thread spill (ptxas converts 16-bit packs
// to float eagerly: unpack_fresh in cuda_common.cuh stops that). Sub-warp rows put several rows in a
// warp so short rows still give each thread 4 (forward) or 2 x 4 (backward) independent 16-byte
// loads, 64 (128) KB in flight per SM; 512-thread CTAs (2 per SM) let one CTA's loads overlap
// another's reduction and stores; a cluster spreads a long row over up to 8-16 SMs (one cluster
// barrier per row); the bulk-copy cluster keeps the next row's loads in flight through that barrier.
// The grid is persistent (CTAs or clusters resident at once, from the occupancy API) with a row loop,
// so there is no partial last wave beyond one row (group) per CTA; the sub-warp and block classes
// launch one CTA per row group instead (measured faster, forward v6 and backward v7: grid_for in
// cuda_common.cuh).
// Clusters need sm_90: elsewhere, or when the occupancy query says no such cluster can be resident,
// or the launch fails, a row of rt <= 1024 (C <= 1024 e) takes one 1024-thread CTA, longer rows the
// stream class. Buffers whose addresses differ modulo 16 (never from XLA) take the stream class with
// scalar accesses.
// Forward v23 (the default) = v21, but 16-bit sub-warp rows of 128 < C <= 2048 hold 8 packs per thread instead of
// 4 (half the threads per row): bf16 C = 256 / 512 / 1024 / 2048 +2 / +4 / +6 / +8% against v21 inside one
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
#include "cuda_common.cuh"
#include "bindings.h"
#include "handlers.h"
#include "softmax_ladder.h"
#include "softmax_fwd_regs.cuh"
#include "softmax_fwd_l2.cuh"
#include "softmax_fwd_tma.cuh"
#include "softmax_rows.cuh"
#include "softmax_stream.cuh"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

using smx::kMaxBlock;
using smx::kMaxCluster;
using smx::kMaxClusterNonPortable;

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

int log2_of(int v) {
  int l = 0;
  while ((1 << l) < v) ++l;
  return l;
}

// Whether every buffer has the same address modulo 16: then one head/body/tail split per row serves
// them all (softmax_rows.cuh).
bool same_alignment(std::initializer_list<const void*> buffers) {
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(*buffers.begin()) % 16;
  for (const void* p : buffers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != first) return false;
  }
  return true;
}

// Blocks of `block` threads of Kernel resident per SM. Cached per kernel and block size (not per
// device: a process mixing GPU models gets another model's figure, which only sizes the grid).
template <auto Kernel>
ffi::Error blocks_per_sm(int block, int* out) {
  static std::atomic<int> cache[11];
  std::atomic<int>& slot = cache[log2_of(block)];
  *out = slot.load(std::memory_order_relaxed);
  if (*out > 0) return ffi::Error::Success();
  if (auto err = check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(out, Kernel, block, 0),
                            "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
      err.failure()) {
    return err;
  }
  *out = std::max(*out, 1);
  slot.store(*out, std::memory_order_relaxed);
  return ffi::Error::Success();
}

cudaLaunchConfig_t cluster_config(dim3 grid, int block, int k, cudaStream_t stream, cudaLaunchAttribute* attr,
                                  size_t smem = 0) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(block));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  *attr = cudaLaunchAttribute{};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = static_cast<unsigned>(k);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

constexpr int kTmaSmemReserve = 1024;  // the TMA kernels' static shared memory (ptxas -v: 544, 560 bytes)

// Function attributes belong to the device's context, so the opt-ins are made once per device (a
// process-wide flag would leave every other GPU of a multi-GPU process without them: its launches
// refused, the v2 classes taking every row). Bit 0: the dynamic shared memory opt-in took; bit 1: the
// non-portable cluster sizes took; bit 2: set once asked (0: not asked on this device yet). kDynSmem:
// also opt in to the device's largest dynamic shared memory (the bulk-copy kernels).
template <auto Kernel, bool kDynSmem>
int func_opt_ins(const DeviceInfo& dev) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> state[kMaxDevices];
  const bool cacheable = dev.device >= 0 && dev.device < kMaxDevices;
  if (cacheable) {
    if (const int s = state[dev.device].load(std::memory_order_relaxed); s != 0) return s;
  }
  int s = 4;
  if (kDynSmem && cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       dev.max_smem_optin - kTmaSmemReserve) == cudaSuccess) {
    s |= 1;
  }
  (void)cudaGetLastError();
  if (cudaFuncSetAttribute(Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) s |= 2;
  (void)cudaGetLastError();
  if (cacheable) state[dev.device].store(s, std::memory_order_relaxed);
  return s;
}

// The occupancy query of active_clusters and tma_active_clusters: clusters of k CTAs of `block` threads
// with `smem` bytes of dynamic shared memory each that can be resident at once, 0 when none can launch;
// remembered in `slot` (0: not asked yet; -1: cannot launch).
template <auto Kernel>
int cached_active_clusters(std::atomic<int>& slot, const DeviceInfo& dev, int block, int k, int smem) {
  int n = slot.load(std::memory_order_relaxed);
  if (n != 0) return std::max(n, 0);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(dim3(static_cast<unsigned>(k * dev.sm_count)), block, k, nullptr,
                                                &attr, static_cast<size_t>(smem));
  if (cudaOccupancyMaxActiveClusters(&n, Kernel, &cfg) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();  // not sticky; the caller falls back to another class
    n = -1;
  }
  slot.store(n, std::memory_order_relaxed);
  return std::max(n, 0);
}

// Clusters of k CTAs of `block` threads of Kernel that can be resident at once; 0 when such a cluster
// cannot launch (the query fails or finds none). k > 8 needs the kernel's opt-in to non-portable
// cluster sizes on this device (func_opt_ins: once per device; it was once per process, which left a
// second GPU's k = 16 launches refused and its rows to the fallback classes). The count is cached like
// blocks_per_sm.
template <auto Kernel>
int active_clusters(const DeviceInfo& dev, int block, int k) {
  static std::atomic<int> cache[kMaxBlock / 32 + 1][kMaxClusterNonPortable + 1];  // by warps per CTA (v41) and k
  if (k > kMaxCluster && (func_opt_ins<Kernel, false>(dev) & 2) == 0) return 0;
  return cached_active_clusters<Kernel>(cache[block / 32][k], dev, block, k, 0);
}

// A launch of a block-level kernel over `groups` units of work (rows or row groups): at most as many
// CTAs as are resident at once, or one per group where kGrid (or JAX_MEMOPS_GRID) asks for a full grid
// (grid_for in cuda_common.cuh).
template <auto Kernel, Grid kGrid = Grid::kPersistent, typename... A>
ffi::Error launch_persistent(const DeviceInfo& dev, cudaStream_t stream, int64_t groups, int block,
                             const char* what, A... args) {
  int per_sm = 0;
  if (auto err = blocks_per_sm<Kernel>(block, &per_sm); err.failure()) return err;
  const int64_t grid = grid_for(groups, int64_t{dev.sm_count} * per_sm, kGrid);
  return launch(Kernel, dim3(static_cast<unsigned>(grid)), dim3(static_cast<unsigned>(block)), 0, stream, what,
                args...);
}

// How a cluster merges each row's value ((max, sum) in the bulk-copy forward, sum(dy * y) in the
// backward's register clusters): by messages into every CTA's inbox (softmax_fwd_tma.cuh's kPush,
// softmax_rows.cuh's mail_merge) for clusters of kPushMinCluster CTAs or more, by a cluster barrier and
// DSMEM reads below. Measured on the H200 (RESULTS.md, "v11", "v12"): forward messages +10 to +18% at
// k = 8, 16 (f32 131072, 262144), +2 to +9% at k = 4, 8 (f32 65536, bf16 131072, 262144), -1 to -4% at
// k = 2 (f32 50257, bf16 65536); backward +4 to +12% at k = 4, 7, 8 (f32 32768, 50257, 131072; bf16
// 50257, 131072), -1 to +7% at k = 2 (bf16 32768). Since v38 the backward merges by messages from k = 2
// (kPushMinClusterBwd): messages at every k measured +14% at k = 2 (f32 8193, bf16 16385), +4% (f32 16385, v38's 5
// packs), +3% (bf16 32768), +0% at bf16 50257 on 3 CTAs against 4 (RESULTS.md "v38"). JAX_MEMOPS_SOFTMAX_PUSH (A/B,
// read once per process): "0" the barrier for every k, "1" messages for every k; anything else: these rules.
constexpr int kPushMinCluster = 4;
constexpr int kPushMinClusterBwd = 2;

int push_rule(int rule) {
  static const std::optional<int> forced =
      env_choice<std::optional<int>>("JAX_MEMOPS_SOFTMAX_PUSH", {{"0", INT_MAX}, {"1", 1}}, std::nullopt);
  return forced.value_or(rule);
}

// The smallest cluster that merges by messages: the bulk-copy forward's, the backward's register clusters'.
int push_min_cluster() { return push_rule(kPushMinCluster); }
int bwd_push_min_cluster() { return push_rule(kPushMinClusterBwd); }

// JAX_MEMOPS_SOFTMAX_PLAN_LOG=1: the cluster launches are described on stderr (log_tma_plan,
// log_cluster_rows), for A/B runs and the tests.
bool plan_log_on() {
  static const bool on = [] {
    const std::string v = env_value("JAX_MEMOPS_SOFTMAX_PLAN_LOG");
    return !v.empty() && v[0] == '1';
  }();
  return on;
}

// Whether a plan log line is due: logging is on and `key` (the launch's shape) differs from the one
// `last` holds for this log (each log keeps its own: one line per change of shape).
bool plan_log_due(std::atomic<int64_t>& last, int64_t key) {
  return plan_log_on() && last.exchange(key) != key;
}

// Under plan_log_on(): each register-cluster launch whose shape differs from the previous one (kernel
// family `what`, merge, CTA size, cluster size, clusters resident).
void log_cluster_rows(const char* what, bool messages, RowShape s, int block, int k, int active) {
  static std::atomic<int64_t> last{-1};
  const int64_t key = ((s.cols * 64 + k * 2 + messages) * 1000003 + block) ^
                      static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(what));
  if (!plan_log_due(last, key)) return;
  std::fprintf(stderr, "%s: register cluster k=%d x %d threads, merge by %s, rows=%lld cols=%lld clusters=%d\n",
               what, k, block, messages ? "messages" : "barrier", static_cast<long long>(s.rows),
               static_cast<long long>(s.cols), active);
}

// A cluster's CTA size and the largest cluster of such CTAs to try.
struct ClusterShape {
  int block, max_k;
};

// One row per cluster of k CTAs of ClusterK (args..., rows, int cols, block), a persistent grid of
// clusters: the first of `shapes` whose k = ceil(C / (elems x block)) is at most its max_k (and above
// an earlier shape's max_k for the same block: already tried) and can be resident. MailK (the same
// signature; ClusterK itself where there is none; only the backward's clusters have one): the kernel that merges by
// messages, run instead of ClusterK where k >= bwd_push_min_cluster(). *launched = false (and success) when none
// launches (the caller's fallback takes the rows).
template <auto ClusterK, auto MailK = ClusterK, typename... A>
ffi::Error launch_cluster_rows(const DeviceInfo& dev, cudaStream_t stream, RowShape s, int elems,
                               std::initializer_list<ClusterShape> shapes, bool* launched, const char* what,
                               A... args) {
  constexpr bool kHasMail = MailK != ClusterK;
  *launched = false;
  int tried_k[2] = {0, 0};  // the largest max_k tried so far, per CTA size (512, 1024)
  for (const ClusterShape c : shapes) {
    const int64_t k = ceil_div(s.cols, int64_t{elems} * c.block);
    int& tried = tried_k[c.block == kMaxBlock ? 1 : 0];
    const bool skip = k > c.max_k || k <= tried;
    tried = std::max(tried, c.max_k);
    if (skip) continue;
    const bool mail = kHasMail && k >= bwd_push_min_cluster();
    const int active = mail ? active_clusters<MailK>(dev, c.block, static_cast<int>(k))
                            : active_clusters<ClusterK>(dev, c.block, static_cast<int>(k));
    if (active == 0) continue;
    log_cluster_rows(what, mail, s, c.block, static_cast<int>(k), active);
    const int64_t clusters = std::min<int64_t>(s.rows, active);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_config(dim3(static_cast<unsigned>(clusters * k)), c.block,
                                                  static_cast<int>(k), stream, &attr);
    const auto kernel = mail ? MailK : ClusterK;
    if (cudaLaunchKernelEx(&cfg, kernel, args..., s.rows, static_cast<int>(s.cols), c.block) == cudaSuccess) {
      *launched = true;
      return check_launch(what);
    }
    (void)cudaGetLastError();  // a configuration error: fall back to the next shape or class
  }
  return ffi::Error::Success();
}

// The order in which launch_auto tries cluster shapes (its comment).
enum class ClusterOrder { kV2, kV9, kFullFirst };

// Launches the "auto" size class for shape s (see the table above). RowsK / ClusterK take
// (args..., rows, int cols, tpr), StreamK / ScalarK (args..., rows, int64 cols); `elems` is what one
// thread of RowsK / ClusterK holds; `vec`: the buffers share their address modulo 16 (then the
// kernels use packs of `vec_width` elements, else ScalarK runs). kRowsGrid: the sub-warp and block
// classes' grid (the backward's: full, v7; the v2 forward's: persistent, as it was measured). MailK:
// ClusterK merging by messages (launch_cluster_rows; ClusterK itself: none).
template <auto RowsK, auto ClusterK, auto StreamK, auto ScalarK, Grid kRowsGrid, auto MailK = ClusterK,
          typename... A>
ffi::Error launch_auto(cudaStream_t stream, RowShape s, int elems, int vec_width, bool vec, ClusterOrder order,
                       const char* what, A... args) {
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  if (vec && s.cols <= int64_t{elems} * kMaxBlock * kMaxCluster) {
    const int64_t rt = std::max<int64_t>(smx::kMinTpr, next_pow2(ceil_div(s.cols, elems)));
    const int cols = static_cast<int>(s.cols);
    if (rt <= kMaxBlock / 2) {  // sub-warp and block classes
      const int tpr = static_cast<int>(rt);
      const int block = tpr <= 32 ? smx::kSubWarpBlock : tpr;
      return launch_persistent<RowsK, kRowsGrid>(dev, stream, ceil_div(s.rows, block / tpr), block, what,
                                                 args..., s.rows, cols, tpr);
    }
    if (dev.cc_major >= 9) {
      // Cluster class: 512-thread CTAs (2 per SM: one CTA's loads overlap another's reduction within an
      // SM) when up to 8 of them hold the row, else 16 of 512 (a non-portable size), else 8 of 1024 (v2's
      // order, kV2). kV9: the 1024-thread octet before the 512-thread 16 (the f32 backward at C = 131072
      // measured +10% with v9's cluster barrier, RESULTS.md "v9"; with v12's merge by messages from k = 4
      // the 16 of 512 measured +5 to +20%, "v12"). kFullFirst (A/B): 1024-thread CTAs first (half the k:
      // measured -8 to +10%, mixed).
      constexpr ClusterShape kHalf8{kMaxBlock / 2, kMaxCluster}, kHalf16{kMaxBlock / 2, kMaxClusterNonPortable};
      constexpr ClusterShape kFull8{kMaxBlock, kMaxCluster}, kFull16{kMaxBlock, kMaxClusterNonPortable};
      bool launched = false;
      const auto try_shapes = [&](std::initializer_list<ClusterShape> shapes) {
        return launch_cluster_rows<ClusterK, MailK>(dev, stream, s, elems, shapes, &launched, what, args...);
      };
      ffi::Error err = order == ClusterOrder::kFullFirst ? try_shapes({kFull8, kFull16, kHalf8, kHalf16})
                       : order == ClusterOrder::kV9      ? try_shapes({kHalf8, kFull8, kHalf16})
                                                         : try_shapes({kHalf8, kHalf16, kFull8});
      if (err.failure() || launched) return err;
    }
    if (rt <= kMaxBlock) {  // no cluster: one 1024-thread CTA per row
      return launch_persistent<RowsK>(dev, stream, s.rows, kMaxBlock, what, args..., s.rows, cols, kMaxBlock);
    }
  }
  // Stream class: one CTA per row, up to 1024 threads (fewer for short rows: scalar path only).
  const int64_t packs = ceil_div(s.cols, vec ? vec_width : 1);
  const int block = static_cast<int>(
      std::clamp<int64_t>(next_pow2(ceil_div(packs, smx::kStreamBatch)), 32, kMaxBlock));
  if (vec) return launch_persistent<StreamK>(dev, stream, s.rows, block, what, args..., s.rows, s.cols);
  return launch_persistent<ScalarK>(dev, stream, s.rows, block, what, args..., s.rows, s.cols);
}

// ---- Forward v3 (softmax_fwd_regs.cuh, softmax_fwd_tma.cuh) -------------------------------------------

// Which forward kernels "auto" runs. v50 by default: v49 with its prefetches at L2's evict_last priority
// (launch_fwd_tma's kKeep; measured beside kTmaAheadPct below). v49: v27, but each CTA of the bulk-copy cluster
// prefetches into L2 the first kTmaAheadPct % of its share of its next row once this row's share has landed
// (softmax_fwd_tma.cuh's `ahead`).
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
// "v23", "v24", "v25", "v26", "v27" or "v49". Any other value: v50.
// The backward is the same in all of them.
enum class FwdVersion {
  kV2, kV3, kV3Prefetch, kV5, kV5S1, kV5Reg, kV7Wide, kV9, kV9Wide, kV9Wide512, kV14, kV20, kV21, kV23, kV24, kV25,
  kV26, kV27, kV49, kV50
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
                  {"v49", FwdVersion::kV49}},
                 FwdVersion::kV50);
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
// stderr (variant and ", messages" where the kernel merges by messages, CTA size, cluster
// size, chunk, shared memory, clusters resident, packs prefetched ahead and whether at evict_last), for A/B runs and
// the tests.
void log_tma_plan(const char* variant, bool messages, RowShape s, int block, int k, int64_t chunk, int64_t smem,
                  int active, int ahead, bool keep) {
  static std::atomic<int64_t> last{-1};
  const int64_t key = ((s.cols * 64 + k * 2 + messages) * 1000003) ^
                      static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(variant));
  if (!plan_log_due(last, key)) return;
  std::fprintf(stderr, "softmax_fwd plan: %s%s x %d threads rows=%lld cols=%lld k=%d chunk=%lld packs smem=%lld KB "
               "clusters=%d ahead=%d packs%s\n", variant, messages ? ", messages" : "", block,
               static_cast<long long>(s.rows), static_cast<long long>(s.cols), k, static_cast<long long>(chunk),
               static_cast<long long>(smem / 1024), active, ahead, keep ? " (evict_last)" : "");
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

// Launches plan p of Kernel (a persistent grid of clusters; `messages`: its merge, for the log);
// *launched = false (and success) where the launch is refused (a configuration error: the caller's
// fallback takes the rows).
template <auto Kernel, typename T>
ffi::Error launch_tma_plan(const char* variant, bool messages, const TmaPlan& p, cudaStream_t stream, RowShape s,
                           const T* x, T* y, bool* launched) {
  log_tma_plan(variant, messages, s, p.block, p.k, p.chunk, p.smem, p.active, p.ahead, p.keep);
  const int64_t clusters = std::min<int64_t>(s.rows, p.active);
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config(dim3(static_cast<unsigned>(clusters * p.k)), p.block, p.k,
                                                stream, &attr, static_cast<size_t>(p.smem));
  if (cudaLaunchKernelEx(&cfg, Kernel, x, y, s.rows, static_cast<int>(s.cols), static_cast<int>(p.chunk), p.ahead) !=
      cudaSuccess) {
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
template <typename T, int B = smx::kTmaBlock, bool kPush = false, bool kKeep = false>
ffi::Error launch_fwd_tma(const DeviceInfo& dev, cudaStream_t stream, RowShape s, FwdVersion version, const T* x,
                          T* y, bool* launched, int ahead_pct = 0, int force_k = 0) {
  constexpr auto kTwoStages = smx::softmax_fwd_tma_kernel<T, 2, 0, smx::kTmaBlock, kPush, kKeep>;
  constexpr auto kOneStage = smx::softmax_fwd_tma_kernel<T, 1, 0, B, kPush, kKeep>;
  constexpr auto kRegs8 = smx::softmax_fwd_tma_kernel<T, 1, 8, B, kPush, kKeep>;
  constexpr auto kRegs16 = smx::softmax_fwd_tma_kernel<T, 1, 16, B, kPush, kKeep>;
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
  std::pair<TmaPlan, Variant> best{};
  if (regs) {
    best = best_of([&](int k) -> std::pair<TmaPlan, Variant> {
      if (TmaPlan p = tma_plan<kRegs8>(dev, packs, k, 1, 8 * B, B); p.score > 0) return {p, kR8};
      return {tma_plan<kRegs16>(dev, packs, k, 1, 16 * B, B), kR16};
    });
  }
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
  if (best.first.k == 0) return ffi::Error::Success();
  if constexpr (kPush) {  // the plans are those of the message kernels; below push_min_cluster, the barrier's
    if (best.first.k < push_min_cluster()) {
      return launch_fwd_tma<T, B, false, kKeep>(dev, stream, s, version, x, y, launched, ahead_pct, force_k);
    }
  }
  best.first.ahead = static_cast<int>(ceil_div(best.first.chunk * ahead_pct, int64_t{100}));
  best.first.keep = kKeep && best.first.ahead > 0;
  switch (best.second) {
    case kOne: return launch_tma_plan<kOneStage>("one buffer", kPush, best.first, stream, s, x, y, launched);
    case kR8: return launch_tma_plan<kRegs8>("registers (8)", kPush, best.first, stream, s, x, y, launched);
    case kR16: return launch_tma_plan<kRegs16>("registers (16)", kPush, best.first, stream, s, x, y, launched);
    default: return launch_tma_plan<kTwoStages>("two buffers", kPush, best.first, stream, s, x, y, launched);
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

template <typename T>
ffi::Error launch_fwd_l2(const DeviceInfo& dev, cudaStream_t stream, RowShape s, const T* x, T* y, bool* launched) {
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
  return launch(kernel, dim3(static_cast<unsigned>(in_flight)), dim3(unsigned{smx::kL2Block}), 0, stream,
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
        if (auto err = launch_fwd_l2(dev, stream, s, x, y, launched); err.failure() || *launched) return err;
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
  return keep_ahead ? launch_fwd_tma<T, smx::kTmaBlock, true, true>(dev, stream, s, version, x, y, launched, ahead_pct)
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

// The backward's versions (JAX_MEMOPS_SOFTMAX_BWD, A/B, read once per process). v42 (the default): before launch_auto,
// launch_bwd_v38 plans the long rows (below): v39's plans, with its clusters of 512-thread CTAs replaced by clusters of
// CTAs of any multiple of 32 threads where those hold more rows at once on no fewer resident CTAs (bwd_v41_choice).
// "v41": the same without the CTAs' condition. "v39": clusters that hold y alone where v38's do not fit 16 CTAs of 512
// threads, or none of its fits. "v38": v39 without clusters that hold y alone. "v37": its register clusters of 5 packs
// per thread wherever they take fewer 512-thread CTAs. "v35" (the rule before v37), "v9" and "v9-1024": launch_auto
// alone, in the cluster order bwd_cluster_order gives.
// (v40's clusters holding 7 packs of y where they leave fewer slots idle, measured 0.92-0.93x at 16-bit 50257 /
// 200000: branch v40, RESULTS.md "v40".)
enum class BwdVersion { kV35, kV37, kV38, kV39, kV41, kV42 };

BwdVersion bwd_version() {
  static const BwdVersion v = env_choice("JAX_MEMOPS_SOFTMAX_BWD",
                                         {{"v35", BwdVersion::kV35}, {"v37", BwdVersion::kV37},
                                          {"v38", BwdVersion::kV38}, {"v39", BwdVersion::kV39},
                                          {"v41", BwdVersion::kV41}, {"v9", BwdVersion::kV35},
                                          {"v9-1024", BwdVersion::kV35}},
                                         BwdVersion::kV42);
  return v;
}

// launch_auto's register-cluster order for the backward: v2's (16 CTAs of 512 threads before 8 of 1024) again
// since v12; "v9": v9's order (8 of 1024 before 16 of 512); "v9-1024": 1024-thread CTAs (1 per SM, half the
// cluster size) before 512-thread ones.
ClusterOrder bwd_cluster_order() {
  static const ClusterOrder order = env_choice(
      "JAX_MEMOPS_SOFTMAX_BWD", {{"v9-1024", ClusterOrder::kFullFirst}, {"v9", ClusterOrder::kV9}}, ClusterOrder::kV2);
  return order;
}

// One register cluster of the backward: k CTAs of `block` threads, `packs` packs of y and of dy per thread (of y
// alone where !hold_dy: v39).
struct BwdCluster {
  int block, packs;
  int64_t k;
  bool hold_dy = true;
};

template <typename T>
BwdCluster bwd_cluster(int64_t cols, int block, int packs) {
  return {block, packs, ceil_div(cols, int64_t{packs} * kVec<T> * block)};
}

// v39's cluster of `block`-thread CTAs holding kBwdYPacks packs of y per thread, dy read twice (the second time
// from L2: the rows in flight, 14 clusters of 16 x 512 threads at f32 262144, hold 14 MB of dy); nullopt past 16
// CTAs. Why: v38's clusters of 1024 threads (f32 C > 163840, 16-bit 327680) read 65-75% of the copy, 7 of them
// resident (112 of 132 SMs, 1 CTA per SM: nothing overlaps a row's merge; its 512-thread clusters of 16 use the same
// SMs, 2 CTAs each, at 86%); these are 512-thread CTAs up to f32 C = 262144 (16-bit 524288), and on 1024 threads up to
// twice that where v38 has none (the stream class). Measured against v38 (RESULTS.md "v39", device timing, % of the
// copy): f32 196608 / 256000 / 262144 74 / 70 / 71% -> 88 / 87 / 88%, 524288 59 -> 73%; bf16 524288 66 -> 75%,
// 1000003 44 -> 63%; the rows v39 leaves to v38 within 1%.
template <typename T>
std::optional<BwdCluster> bwd_y_held(int64_t cols, int block) {
  BwdCluster c = bwd_cluster<T>(cols, block, smx::kBwdYPacks);
  c.hold_dy = false;
  if (c.k > kMaxClusterNonPortable) return std::nullopt;
  return c;
}

// v38's choice between a row's clusters of 4 packs per thread (kBwdPacks, launch_auto's) and of 5 (kBwdWidePacks)
// for CTAs of one size; nullopt: neither fits 16 CTAs. The wide one where the narrow one does not fit, or where
// it has fewer thread slots for the row (less of the cluster idle: k x packs smaller) without giving up the merge by
// messages (k >= bwd_push_min_cluster()) that the narrow one has. Measured (RESULTS.md "v37"): wide, fewer slots, the
// same merge: f32 16385 +10%, 50257 +1%, bf16 100000 +4%, 131073 +5%; wide where the narrow cluster has fewer
// slots (f32 65536, 131072; bf16 131072, 262144): -2 to -3%; bf16 50257, wide on 3 CTAs merged by the barrier
// against 4 by messages: -7% (both by messages since v38: +0.3%, RESULTS.md "v38").
template <typename T>
std::optional<BwdCluster> bwd_v38_choice(int64_t cols, int block) {
  const BwdCluster narrow = bwd_cluster<T>(cols, block, smx::kBwdPacks);
  const BwdCluster wide = bwd_cluster<T>(cols, block, smx::kBwdWidePacks);
  if (wide.k > kMaxClusterNonPortable) return std::nullopt;
  if (narrow.k > kMaxClusterNonPortable) return wide;
  const bool fewer_slots = wide.k * wide.packs < narrow.k * narrow.packs;
  const bool keeps_merge = wide.k >= bwd_push_min_cluster() || narrow.k < bwd_push_min_cluster();
  return wide.k >= 2 && fewer_slots && keeps_merge ? wide : narrow;
}

// Rows in flight under a cluster plan holding y and dy: its kernel's resident clusters, merging by messages (k >= 2).
template <typename T>
int bwd_rows_in_flight(const DeviceInfo& dev, const BwdCluster& c) {
  const int k = static_cast<int>(c.k);
  if (c.packs == smx::kBwdWidePacks) {
    return active_clusters<smx::softmax_bwd_rows_kernel<T, true, true, smx::kBwdWidePacks>>(dev, c.block, k);
  }
  return active_clusters<smx::softmax_bwd_rows_kernel<T, true, true>>(dev, c.block, k);
}

// v41 / v42: `plan` (v38's cluster of 512-thread CTAs, k >= 2), or the cluster of CTAs of any multiple of 32 threads,
// 128..512, with 4 or 5 packs of y and dy per thread, that keeps the most rows in flight (resident clusters, from the
// occupancy API) where that is at least kV41Gain times plan's; v42 (keep_ctas) only on CTAs of another size than
// plan's (v38's rule sets the packs of 512-thread CTAs) and on at least as many resident CTAs (clusters x k). Why: the
// data a cluster plan keeps on chip is its resident clusters times a row, and CTAs of 512 threads at 64 registers fit
// 2 per SM: a row whose k CTAs leave slots idle (bf16 50257: 6283 packs on 3 x 512 x 5 slots, 18% idle) or whose
// clusters pack the GPCs badly holds less. Measured (RESULTS.md "v41", "v42", % of the copy): v41 gained 1-5% where
// its CTAs were smaller or its clusters many more (bf16 16385 / 32768 / 50257 / 150001: 82 / 89 / 84 / 80% -> 85 /
// 92 / 86 / 84%) and lost 4% where it traded 30 clusters of 8 x 512 threads, 4 packs, for 32 of 7 x 480, 5 packs (f32
// 65536, bf16 131072: 224 resident CTAs against 240), and 0.7% re-packing f32 40000's 512-thread CTAs; v42 declines
// both trades.
constexpr double kV41Gain = 1.04;
constexpr int kV41MinBlock = 128;

template <typename T>
BwdCluster bwd_v41_choice(const DeviceInfo& dev, int64_t cols, const BwdCluster& plan, bool keep_ctas) {
  BwdCluster best = plan;
  const int base = bwd_rows_in_flight<T>(dev, plan);
  int best_rows = base;
  for (const int packs : {smx::kBwdPacks, smx::kBwdWidePacks}) {
    for (int64_t k = 2; k <= kMaxClusterNonPortable; ++k) {
      const int64_t block = 32 * ceil_div(cols, k * packs * kVec<T> * 32);
      if (block < kV41MinBlock || block > kMaxBlock / 2) continue;
      const BwdCluster c = bwd_cluster<T>(cols, static_cast<int>(block), packs);  // its k may be below the k tried
      if (c.k < 2 || (keep_ctas && c.block == plan.block)) continue;  // v42: plan's packs for its CTAs by v38's rule
      const int rows = bwd_rows_in_flight<T>(dev, c);
      const bool ctas_kept = !keep_ctas || rows * c.k >= base * plan.k;
      if (rows > best_rows && rows >= base * kV41Gain && ctas_kept) {
        best = c;
        best_rows = rows;
      }
    }
  }
  return best;
}

// The plan log's name of launch_bwd_v38's launches (JAX_MEMOPS_SOFTMAX_PLAN_LOG=1; the tests read it).
const char* bwd_plan_name(BwdVersion version, const BwdCluster& plan) {
  switch (version) {
    case BwdVersion::kV37: return "softmax_bwd v37";
    case BwdVersion::kV38: return "softmax_bwd v38";
    case BwdVersion::kV39: return plan.hold_dy ? "softmax_bwd v39" : "softmax_bwd v39 y-held";
    case BwdVersion::kV41: return plan.hold_dy ? "softmax_bwd v41" : "softmax_bwd v41 y-held";
    default: return plan.hold_dy ? "softmax_bwd v42" : "softmax_bwd v42 y-held";
  }
}

// The long rows' register clusters before launch_auto (which runs where *launched stays false):
//   v38: CTAs of 512 threads (2 per SM), 4 or 5 packs per thread by bwd_v38_choice, k <= 16 (where that is
//        launch_auto's narrow cluster, launch_auto runs it); past 16 x 512 threads' reach, CTAs of 1024 threads
//        (1 per SM) by the same choice, k <= 16 (f32 C <= 327680, 16-bit 655360), which launch_auto never tries
//        (its capacity is 8 x 1024 = 16 x 512): those rows took the stream class, two passes over y and dy from HBM
//        (5 tensor passes; f32 131073 / 262144 measured 58-59% of the copy, v37).
//   v39: v38, but bwd_y_held's cluster of 512 threads before v38's of 1024, and of 1024 threads where
//        v38's fits none (f32 C <= 524288, 16-bit 1048576).
//   v42 (the default), v41 (A/B): v39, but v38's clusters of 512 threads (k >= 2) by bwd_v41_choice.
//   v37: the wide cluster of 512-thread CTAs wherever it takes fewer CTAs than the narrow one (k >= 2).
template <typename T>
ffi::Error launch_bwd_v38(cudaStream_t stream, RowShape s, BwdVersion version, const T* yp, const T* dyp, T* dxp,
                          bool* launched) {
  *launched = false;
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure() || dev.cc_major < 9) return err;  // clusters: sm_90+
  constexpr int kHalf = kMaxBlock / 2;
  std::optional<BwdCluster> plan;
  if (version == BwdVersion::kV37) {
    const BwdCluster narrow = bwd_cluster<T>(s.cols, kHalf, smx::kBwdPacks);
    const BwdCluster wide = bwd_cluster<T>(s.cols, kHalf, smx::kBwdWidePacks);
    if (wide.k >= 2 && wide.k < narrow.k && wide.k <= kMaxClusterNonPortable) plan = wide;
  } else {
    const bool y_held = version != BwdVersion::kV38;
    const bool odd_ctas = version == BwdVersion::kV41 || version == BwdVersion::kV42;
    plan = bwd_v38_choice<T>(s.cols, kHalf);
    if (plan && plan->k >= 2 && odd_ctas) {
      plan = bwd_v41_choice<T>(dev, s.cols, *plan, version == BwdVersion::kV42);
    }
    if (!plan && y_held) plan = bwd_y_held<T>(s.cols, kHalf);
    if (!plan) plan = bwd_v38_choice<T>(s.cols, kMaxBlock);
    if (!plan && y_held) plan = bwd_y_held<T>(s.cols, kMaxBlock);
  }
  if (!plan || (plan->hold_dy && plan->block == kHalf && plan->packs == smx::kBwdPacks)) return ffi::Error::Success();
  const std::initializer_list<ClusterShape> shapes = {{plan->block, kMaxClusterNonPortable}};
  const char* what = bwd_plan_name(version, *plan);
  const auto run = [&](auto packs, auto hold_dy) {
    constexpr int kN = decltype(packs)::value;
    constexpr bool kHold = decltype(hold_dy)::value;
    return launch_cluster_rows<smx::softmax_bwd_rows_kernel<T, true, false, kN, kHold>,
                               smx::softmax_bwd_rows_kernel<T, true, true, kN, kHold>>(
        dev, stream, s, smx::bwd_elems_per_thread<T, kN>(), shapes, launched, what, yp, dyp, dxp);
  };
  using std::integral_constant;
  if (!plan->hold_dy) return run(integral_constant<int, smx::kBwdYPacks>{}, std::false_type{});
  if (plan->packs == smx::kBwdWidePacks) return run(integral_constant<int, smx::kBwdWidePacks>{}, std::true_type{});
  return run(integral_constant<int, smx::kBwdPacks>{}, std::true_type{});
}

ffi::Error SoftmaxBwd(cudaStream_t stream, ffi::AnyBuffer y, ffi::AnyBuffer dy,
                      ffi::Result<ffi::AnyBuffer> dx) {
  RowShape s;
  if (auto err = first_error({row_shape(y, "y", &s), check_same(y, dy, "dy"), check_same(y, *dx, "dx")});
      err.failure()) {
    return err;
  }
  if (s.size() == 0) return ffi::Error::Success();
  return dispatch_float(y.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* yp = static_cast<const T*>(y.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx->untyped_data());
    if (bwd_version() != BwdVersion::kV35 && same_alignment({yp, dyp, dxp})) {
      bool launched = false;
      if (auto err = launch_bwd_v38(stream, s, bwd_version(), yp, dyp, dxp, &launched); err.failure() || launched) {
        return err;
      }
    }
    // Register clusters of k >= bwd_push_min_cluster() CTAs merge each row's sum by messages (kMail).
    return launch_auto<smx::softmax_bwd_rows_kernel<T, false>, smx::softmax_bwd_rows_kernel<T, true>,
                       smx::softmax_bwd_stream_kernel<T, kVec<T>>, smx::softmax_bwd_stream_kernel<T, 1>,
                       Grid::kFull, smx::softmax_bwd_rows_kernel<T, true, true>>(
        stream, s, smx::bwd_elems_per_thread<T>(), kVec<T>, same_alignment({yp, dyp, dxp}), bwd_cluster_order(),
        "softmax_bwd", yp, dyp, dxp);
  });
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxFwdCuda, jm::cuda::SoftmaxFwd,
                              jm::bind::softmax_fwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxBwdCuda, jm::cuda::SoftmaxBwd,
                              jm::bind::softmax_bwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
