// Softmax over the last axis: the size classes of algorithm "auto" (0) and the launch machinery shared by the
// forward (softmax_fwd.cu) and backward (softmax_bwd.cu) handlers; algorithms 1..7 run the seed's teaching
// ladder (softmax_ladder.cu). Included by those two files alone (its helpers have internal linkage).
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
// to float eagerly: unpack_fresh in cuda_pack.cuh stops that). Sub-warp rows put several rows in a
// warp so short rows still give each thread 4 (forward) or 2 x 4 (backward) independent 16-byte
// loads, 64 (128) KB in flight per SM; 512-thread CTAs (2 per SM) let one CTA's loads overlap
// another's reduction and stores; a cluster spreads a long row over up to 8-16 SMs (one cluster
// barrier per row); the bulk-copy cluster keeps the next row's loads in flight through that barrier.
// The grid is persistent (CTAs or clusters resident at once, from the occupancy API) with a row loop,
// so there is no partial last wave beyond one row (group) per CTA; the sub-warp and block classes
// launch one CTA per row group instead (measured faster, forward v6 and backward v7: grid_for in
// cuda_base.cuh).
// Clusters need sm_90: elsewhere, or when the occupancy query says no such cluster can be resident,
// or the launch fails, a row of rt <= 1024 (C <= 1024 e) takes one 1024-thread CTA, longer rows the
// stream class. Buffers whose addresses differ modulo 16 (never from XLA) take the stream class with
// scalar accesses.
#pragma once

#include "cuda_common.cuh"
#include "softmax_rows.cuh"
#include "softmax_stream.cuh"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

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
// (grid_for in cuda_base.cuh).
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

// Clusters of k CTAs to launch over `rows` rows of which `active` clusters can be resident: those (a persistent grid,
// each cluster walking rows base, base + clusters, ...), or one per row under JAX_MEMOPS_GRID=full (an A/B option, v69:
// the hardware then starts a cluster wherever one exits), within the grid's 2^31 - 1 CTAs.
inline int64_t cluster_grid(int64_t rows, int active, int k) {
  return std::min<int64_t>(grid_for(rows, active, Grid::kPersistent), 0x7fffffff / k);
}

// One row per cluster of k CTAs of ClusterK (args..., rows, int cols, block), a grid of
// clusters (cluster_grid): the first of `shapes` whose k = ceil(C / (elems x block)) is at most its max_k (and above
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
    const int64_t clusters = cluster_grid(s.rows, active, static_cast<int>(k));
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

}  // namespace
}  // namespace jm::cuda
