// Softmax "auto" kernels that keep each row on chip, in registers: each element is read from HBM
// once and written once (the forward reads x, writes y; the backward reads y and dy, writes dx).
// Size classes and their limits are documented at the top of softmax_launch.cuh; softmax_fwd.cu and
// softmax_bwd.cu pick one per launch.
//
// One kernel template per direction serves every class; the geometry is a runtime argument:
//   * sub-warp rows (tpr = 4..32 threads per row, several rows per warp, 256-thread blocks): reductions
//     are xor shuffles within the row's aligned lane group, no barrier;
//   * block rows (tpr = blockDim.x = 64..1024, one row per block): shuffles, then the warps' partials
//     through shared memory;
//   * cluster rows (kCluster: one row per thread-block cluster of k <= 16 CTAs, sm_90+): the block result
//     of each CTA goes through distributed shared memory (DSMEM) to every CTA of the cluster.
// A thread holds the packs i = lane, lane + rt, lane + 2 rt, ... (rt = the row's threads) of the row's
// 16-byte-aligned body, a compile-time number of them, so they live in registers; the loads are all
// issued before any is used (memory-level parallelism), with evict-first hints (x, y, dy, dx are not
// re-read).
//
// Rows whose start is not 16-byte aligned (C not a multiple of the vector width) are split per row
// into a scalar head up to the first 16-byte boundary, a vector body, and a scalar tail (RowSpan): the
// head and tail (< 2 x 16 bytes together) are "edge" elements, spread over the row's first lanes.
// x and y (y, dy, dx) must have the same address modulo 16, so one split serves all of them; the host
// checks that and otherwise takes the streaming kernels (softmax_stream.cuh).
#pragma once

#include <cooperative_groups.h>

#include "cuda_common.cuh"

namespace jm::cuda::smx {

namespace cg = cooperative_groups;

#ifdef JM_TRACE_EXITS
// benchmarks/softmax_long_ab.cu's AB_TRACE (built with -DJM_TRACE_EXITS; never in the library): each CTA's start and
// exit (%globaltimer, ns) and its SM at [kTraceStride * blockIdx.x + 0, 1, 2], to see how unevenly the SMs finish (the
// bulk-copy and the L2 two-pass forwards); the bulk-copy kernel also its first row's milestones (3: its share landed,
// 7: the next row's copy issued (the register kernels), 8: the block's partial reduced (the merge by messages), 4:
// merged over the cluster, 5: its output pass issued) and 6: its last row's share landed, to see the first rows' ramp
// and the last rows' drain.
constexpr unsigned kTraceSlots = 1u << 17;  // CTAs traced (blockIdx.x below it)
constexpr unsigned kTraceStride = 10;       // slots per CTA
__device__ unsigned long long* g_trace_exits = nullptr;
__device__ __forceinline__ void trace_exit(int slot) {
  unsigned long long t;
  unsigned sm;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (g_trace_exits != nullptr && threadIdx.x == 0 && blockIdx.x < kTraceSlots) {
    g_trace_exits[kTraceStride * blockIdx.x + slot] = t;
    g_trace_exits[kTraceStride * blockIdx.x + 2] = sm;
  }
}
#else
__device__ __forceinline__ void trace_exit(int) {}  // the library's builds: nothing
#endif

constexpr int kMaxBlock = 1024;     // launch bound of every softmax kernel: <= 64 registers per thread
constexpr int kMinTpr = 4;          // fewest threads per row (a 16-byte sector per row per load)
constexpr int kSubWarpBlock = 256;  // block size of the sub-warp class (tpr <= 32)
constexpr int kMaxCluster = 8;      // portable cluster size
constexpr int kMaxClusterNonPortable = 16;  // Hopper's limit, after an opt-in per kernel
// Packs (16 bytes) of each input a thread holds: 4, i.e. 16 f32 or 32 bf16/f16 row elements (the
// forward keeps f32 as float exps, 16-bit raw; the backward keeps y and dy raw). 64 bytes per input in
// flight per thread. More would spill under the 64-register bound; ptxas converts 16-bit packs to
// float eagerly (2x the registers), which unpack_fresh (cuda_pack.cuh) prevents.
constexpr int kFwdPacks = 4;
constexpr int kBwdPacks = 4;
// v37, v38 (softmax_bwd.cu launch_bwd_v38): the backward's register clusters with 5 packs of y and dy per thread where
// that leaves fewer thread slots idle; 62-64 registers, no spill (ptxas -v, sm_90; 6 packs spill 4-28 bytes).
constexpr int kBwdWidePacks = 5;
// v39 (the default, launch_bwd_v38): clusters that hold 8 packs of y per thread and read dy twice, the second time from
// L2 (softmax_bwd_rows_kernel's kHoldDy = false), for rows past what y and dy held together reach on 512 threads.
constexpr int kBwdYPacks = 8;

// Row elements one thread of a register kernel holds (its capacity is rt times this).
template <typename T>
constexpr int fwd_elems_per_thread() {
  return kFwdPacks * kVec<T>;
}
template <typename T, int N = kBwdPacks>
constexpr int bwd_elems_per_thread() {
  return N * kVec<T>;
}

constexpr float kLog2e = 1.4426950408889634f;

// exp(a) as exp2f(a * log2(e)): the hardware's ex2. The argument is a difference x - max (exact for
// nearby values), so the pre-scale rounds relative to that difference, not to x.
__device__ __forceinline__ float exp_e(float a) { return exp2f(a * kLog2e); }

// ---- Reductions over a row's threads ------------------------------------------------------------------

// A partial softmax normalizer: the max m of some elements and s = sum of exp(x - m) over them.
// The empty partial is (-inf, 0); a partial of only -inf elements is (-inf, 0) too; one holding +inf
// has s = NaN (exp(inf - inf)), one holding NaN has m = NaN: either makes the row NaN in the end.
struct MaxSum {
  float m;
  float s;
};

// (m, s) of elements that contain the max m (any count of values v with exp(v - mm) summed into s).
// mm is m, or 0 when m = -inf (every element is -inf: exp(-inf - 0) = 0, not exp(-inf + inf) = NaN).
__device__ __forceinline__ float safe_max(float m) { return m == -INFINITY ? 0.0f : m; }

// Merge of two partials: the larger max wins and the other sum is rescaled. Commutative bit for bit
// (ties add the same two sums), so xor butterflies leave the same pair in every lane. A NaN max counts
// as larger (propagates); two -inf maxes give (-inf, 0), not exp(-inf + inf) = NaN.
struct MergeOp {
  using P = MaxSum;
  __device__ static P identity() { return {-INFINITY, 0.0f}; }
  __device__ P operator()(P a, P b) const {
    const bool a_big = a.m > b.m || a.m != a.m;
    const P big = a_big ? a : b;
    const P small = a_big ? b : a;
    const float scale = big.m == -INFINITY ? 0.0f : exp_e(small.m - big.m);
    return {big.m, big.s + small.s * scale};
  }
};

struct AddOp {
  using P = float;
  __device__ static P identity() { return 0.0f; }
  __device__ P operator()(P a, P b) const { return a + b; }
};

__device__ __forceinline__ float shfl_xor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int offset) {
  return {shfl_xor(v.m, offset), shfl_xor(v.s, offset)};
}

// Xor butterfly within aligned groups of `width` lanes (a power of two <= 32); all 32 lanes call it
// and every lane of a group ends with the same value.
template <class Op>
__device__ __forceinline__ typename Op::P butterfly(typename Op::P v, int width) {
  for (int offset = width / 2; offset > 0; offset /= 2) v = Op()(v, shfl_xor(v, offset));
  return v;
}

// Whole-block reduction (blockDim.x a multiple of 32), result in every thread. The warps' partials
// are double-buffered by `parity` (a row loop's iteration & 1): a warp that runs ahead into the next
// row writes the other buffer, and it cannot come back to this one before every thread has passed the
// next row's barrier, i.e. finished reading this row's partials. One barrier per reduction.
template <class Op>
__device__ __forceinline__ typename Op::P block_reduce_rows(typename Op::P v, int parity) {
  using P = typename Op::P;
  __shared__ P partial[2][kMaxBlock / 32];
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  v = butterfly<Op>(v, 32);
  if (lane == 0) partial[parity][warp] = v;
  __syncthreads();
  v = lane < warps ? partial[parity][lane] : Op::identity();
  return butterfly<Op>(v, 32);
}

// ---- Thread-block clusters (sm_90+; the sm_80 compile gets traps that the host never reaches) -----------

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define JM_SOFTMAX_CLUSTERS 1
#else
#define JM_SOFTMAX_CLUSTERS 0
#endif

__device__ __forceinline__ int cluster_blocks() {
#if JM_SOFTMAX_CLUSTERS
  return static_cast<int>(cg::this_cluster().num_blocks());
#else
  __trap();
  return 1;
#endif
}
__device__ __forceinline__ int cluster_rank() {
#if JM_SOFTMAX_CLUSTERS
  return static_cast<int>(cg::this_cluster().block_rank());
#else
  __trap();
  return 0;
#endif
}
__device__ __forceinline__ void cluster_sync() {
#if JM_SOFTMAX_CLUSTERS
  cg::this_cluster().sync();
#else
  __trap();
#endif
}

// Reduction of the CTAs' block results over the cluster: thread 0 of each CTA publishes its block's
// value in its shared memory, cluster barrier (release/acquire: the values are visible), then lane r
// of every warp reads CTA r's value through DSMEM and the warp butterflies them: the same fixed order
// in every CTA, so every CTA gets the same bits. The slot is double-buffered by `parity` like the
// block partials: CTA c rewrites slot[parity] two rows later, after the next row's cluster barrier,
// which no CTA passes before it has read this row's slots. The kernel ends with a cluster barrier so
// no CTA exits (freeing its shared memory) while another may still read it.
template <class Op>
__device__ __forceinline__ typename Op::P cluster_reduce(typename Op::P v, int parity) {
  using P = typename Op::P;
  __shared__ P slot[2];
  if (threadIdx.x == 0) slot[parity] = v;
  cluster_sync();
#if JM_SOFTMAX_CLUSTERS
  const int lane = static_cast<int>(threadIdx.x % 32);
  v = lane < cluster_blocks() ? *cg::this_cluster().map_shared_rank(&slot[parity], lane) : Op::identity();
#endif
  return butterfly<Op>(v, 32);
}

// The cluster's merge by messages (v11, v12; the bulk-copy forward and the backward's register
// clusters, from k = 4 CTAs: push_min_cluster in softmax_launch.cuh): thread 0 of each CTA sends its block's
// value into every CTA's inbox [row parity][sender rank] (st.async, completing on the receiver's
// mbarrier of that parity), and each CTA waits on its own mbarrier for the k values, then every warp
// merges them in rank order (the same bits in every CTA). No CTA waits for the others at a barrier;
// nothing is read remotely. Reuse: a CTA sends row i + 2's value only after its block barrier of row
// i + 1, which every thread passes after reading row i's inbox, and after its wait for row i + 1, which
// needs every CTA's row i + 1 value, sent after their own row i waits; a value may land before the
// receiver's expect (the tx-count goes negative, which the mbarrier allows). The kernel declares one
// ClusterMail in shared memory, calls mail_init (then a block barrier and cluster_sync before any send)
// and ends with a cluster barrier, like cluster_reduce.
template <typename P>
struct ClusterMail {
  P inbox[2][kMaxClusterNonPortable];
  uint64_t bar[2];
};

template <typename P>
__device__ __forceinline__ void mail_init(ClusterMail<P>& m) {
  if (threadIdx.x == 0) {
    mbar_init(&m.bar[0]);
    mbar_init(&m.bar[1]);
  }
}

__device__ __forceinline__ void mail_send(uint32_t slot, float v, uint32_t bar) { push_one(slot, v, bar); }
__device__ __forceinline__ void mail_send(uint32_t slot, MaxSum v, uint32_t bar) { push_pair(slot, v.m, v.s, bar); }

// Row i's merge over the cluster of this CTA's block value `v` (every thread calls it with the same i).
template <class Op>
__device__ __forceinline__ typename Op::P mail_merge(ClusterMail<typename Op::P>& m, typename Op::P v, int i) {
  const int p = i & 1;
  const int k = cluster_blocks();
  if (threadIdx.x == 0) {
    mbar_arrive_expect(&m.bar[p], static_cast<uint32_t>(k * sizeof(v)));
    const uint32_t slot = smem_addr(&m.inbox[p][cluster_rank()]);
    const uint32_t bar = smem_addr(&m.bar[p]);
    for (int r = 0; r < k; ++r) mail_send(cluster_map(slot, r), v, cluster_map(bar, r));
  }
  mbar_wait(&m.bar[p], static_cast<uint32_t>(i >> 1) & 1u);
  const int lane = static_cast<int>(threadIdx.x % 32);
  return butterfly<Op>(lane < k ? m.inbox[p][lane] : Op::identity(), 32);
}

// ---- Row geometry -----------------------------------------------------------------------------------------

// This thread's place: which row of each row group it works on, and its lane among the row's `rt`
// threads. Row groups start at `base` and advance by `step` (a persistent grid); the loop over them is
// uniform over a block (and a cluster), as the barriers need.
template <bool kCluster>
struct RowIter {
  int lane;     // index among the row's threads
  int rt;       // threads per row (across the cluster)
  int group;    // which of the block's rows
  int64_t base; // first row of this block's (cluster's) first row group
  int64_t step; // rows per grid-wide step

  __device__ explicit RowIter(int tpr) {
    const int tid = static_cast<int>(threadIdx.x);
    const int block = static_cast<int>(blockDim.x);
    if constexpr (kCluster) {
      const int k = cluster_blocks();  // 1-D clusters: CTAs blockIdx.x / k * k ... + k - 1
      lane = cluster_rank() * block + tid;
      rt = block * k;
      group = 0;
      base = blockIdx.x / k;
      step = gridDim.x / k;
    } else {
      // tpr is a power of two: shifts, not two ~20-instruction integer divisions per thread (a full grid of 16-bit
      // 4-pack rows: one row group, 32 elements, per thread). v25, Nsight Compute at bf16 C = 128: 5% fewer
      // instructions, 56 -> 48 registers, 2-4% shorter kernels (RESULTS.md "v25").
      const int shift = __ffs(tpr) - 1;
      const int rows_per_block = block >> shift;
      lane = tid & (tpr - 1);
      rt = tpr;
      group = tid >> shift;
      base = int64_t{blockIdx.x} * rows_per_block;
      step = int64_t{gridDim.x} * rows_per_block;
    }
  }
};

// Reduction over the threads of a row: shuffles for sub-warp rows, else the block, then the cluster.
template <class Op, bool kCluster>
__device__ __forceinline__ typename Op::P row_reduce(typename Op::P v, int tpr, int parity) {
  if (!kCluster && tpr <= 32) return butterfly<Op>(v, tpr);
  v = block_reduce_rows<Op>(v, parity);
  if constexpr (kCluster) v = cluster_reduce<Op>(v, parity);
  return v;
}

// A row's split into head (scalar, up to the first 16-byte boundary), body (whole V-packs, aligned)
// and tail (scalar). Edge e in [0, head + tail) is column e (head) or cols - edges + e (tail).
// An invalid row (past the last) is empty. I: the column index type.
template <typename T, int V, typename I>
struct RowSpan {
  I head = 0, body = 0, tail = 0;
  __device__ RowSpan(const T* row, I cols, bool valid) {
    if (!valid) return;
    const I misaligned = static_cast<I>((reinterpret_cast<std::uintptr_t>(row) / sizeof(T)) % V);
    head = (V - misaligned) % V;
    if (head > cols) head = cols;
    body = (cols - head) / V;
    tail = cols - head - body * V;
  }
  __device__ I edges() const { return head + tail; }
  __device__ I edge_col(I e, I cols) const { return e < head ? e : cols - edges() + e; }
};

// ---- Forward ------------------------------------------------------------------------------------------


// Edges are not kept in registers: each joins the thread's partial as a partial of its own, and the
// output re-reads it (a few bytes per row, from L1/L2).
template <typename T, int V, bool kCluster>
__device__ __forceinline__ MaxSum with_edges(MaxSum part, const T* xr, const RowSpan<T, V, int>& sp, int cols,
                                             const RowIter<kCluster>& it) {
  for (int e = it.lane; e < sp.edges(); e += it.rt) {
    const float ve = to_float(xr[sp.edge_col(e, cols)]);
    part = MergeOp()(part, MaxSum{ve, exp_e(ve - safe_max(ve))});
  }
  return part;
}
template <typename T, int V, bool kCluster>
__device__ __forceinline__ void write_edges(MaxSum row_ms, float inv_s, const T* xr, T* yr,
                                            const RowSpan<T, V, int>& sp, int cols, const RowIter<kCluster>& it) {
  for (int e = it.lane; e < sp.edges(); e += it.rt) {
    const int c = sp.edge_col(e, cols);
    yr[c] = from_float<T>(exp_e(to_float(xr[c]) - row_ms.m) * inv_s);
  }
}

// y = softmax(x) per row, the row in registers. Each thread takes the max m of its elements and the
// sum s of exp(x - m): one partial (m, s). The row's (M, S) is the merge of the partials (one
// reduction). f32 keeps e = exp(x - m) in place of x and writes y = e * exp(m - M) / S: one exp per
// element plus one per thread. 16-bit types keep the raw packs (twice the elements per thread for the
// same registers, so twice the bytes in flight) and write y = exp(x - M) / S: two exps per element.
// Rules (as jax.nn.softmax): a NaN makes M NaN, a +inf makes S NaN (exp(inf - inf)), an all -inf
// row has M = -inf and exp(m - M) = exp(-inf + inf) = NaN: the whole row NaN in each case. A -inf
// entry of any other row gives e = 0 (or a thread of only -inf entries has exp(m - M) = 0): exactly 0.
template <typename T, bool kCluster>
__global__ void __launch_bounds__(kMaxBlock, 1)
    softmax_fwd_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols, int tpr) {
  constexpr int V = kVec<T>;
  constexpr int N = kFwdPacks;
  using P = Pack<T, V>;
  const RowIter<kCluster> it(tpr);
  int parity = 0;
  for (int64_t base = it.base; base < rows; base += it.step, parity ^= 1) {
    const int64_t row = base + it.group;
    const bool valid = row < rows;
    const T* xr = x + (valid ? row : 0) * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, valid);
    const T* xb = xr + sp.head;

    P raw[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (it.lane + k * it.rt < sp.body) raw[k] = load_stream<V>(xb, it.lane + k * it.rt);
    }
    T* yr = y + (valid ? row : 0) * int64_t{cols};
    T* yb = yr + sp.head;

    if constexpr (sizeof(T) == 4) {
      // f32: e = exp(x - m) replaces x in registers (one exp per element).
      float v[N][V];
      float m = -INFINITY;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          unpack(raw[k], v[k]);
        } else {
#pragma unroll
          for (int j = 0; j < V; ++j) v[k][j] = -INFINITY;  // empty slots: exp gives 0, max unchanged
        }
#pragma unroll
        for (int j = 0; j < V; ++j) m = MaxOp()(m, v[k][j]);
      }
      const float mm = safe_max(m);
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {  // warp-uniform except in one warp per k
#pragma unroll
          for (int j = 0; j < V; ++j) {
            v[k][j] = exp_e(v[k][j] - mm);
            s += v[k][j];
          }
        }
      }
      const MaxSum row_ms =
          row_reduce<MergeOp, kCluster>(with_edges(MaxSum{m, s}, xr, sp, cols, it), tpr, parity);
      const float inv_s = 1.0f / row_ms.s;
      const float f = exp_e(m - row_ms.m) * inv_s;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(v[k][j] * f);
          store_stream<V>(yb, it.lane + k * it.rt, out);
        }
      }
      write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
    } else {
      // 16-bit: the raw packs stay; max, sum and output each convert again (the output's exp is
      // taken relative to the row max directly).
      float m = -INFINITY;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          float v[V];
          unpack_fresh(raw[k], v);
#pragma unroll
          for (int j = 0; j < V; ++j) m = MaxOp()(m, v[j]);
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
          for (int j = 0; j < V; ++j) s += exp_e(v[j] - mm);
        }
      }
      const MaxSum row_ms =
          row_reduce<MergeOp, kCluster>(with_edges(MaxSum{m, s}, xr, sp, cols, it), tpr, parity);
      const float inv_s = 1.0f / row_ms.s;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          float v[V];
          unpack_fresh(raw[k], v);
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(exp_e(v[j] - row_ms.m) * inv_s);
          store_stream<V>(yb, it.lane + k * it.rt, out);
        }
      }
      write_edges(row_ms, inv_s, xr, yr, sp, cols, it);
    }
  }
  if constexpr (kCluster) cluster_sync();  // keep this CTA's shared memory alive for the others' reads
}

// ---- Backward -----------------------------------------------------------------------------------------


// The packs of dy at this thread's N pack indices lane + k * rt below `body`, kBwdYBatch at a time: every load of a
// batch issued before use(k, index, pack) takes any of them (one load in flight per use would wait out a round trip
// per pack). For softmax_bwd_rows_kernel's clusters that hold y alone.
constexpr int kBwdYBatch = 2;

template <int N, typename Load, typename Use>
__device__ __forceinline__ void dy_batches(int lane, int rt, int body, Load load, Use use) {
  static_assert(N % kBwdYBatch == 0);
#pragma unroll
  for (int b = 0; b < N; b += kBwdYBatch) {
    decltype(load(0)) d[kBwdYBatch];
#pragma unroll
    for (int j = 0; j < kBwdYBatch; ++j) {
      if (lane + (b + j) * rt < body) d[j] = load(lane + (b + j) * rt);
    }
#pragma unroll
    for (int j = 0; j < kBwdYBatch; ++j) {
      if (lane + (b + j) * rt < body) use(b + j, lane + (b + j) * rt, d[j]);
    }
  }
}

// dx = y * (dy - sum(dy * y)) per row, y and dy in registers (raw packs, converted at each use).
// kMail (clusters only; v12, clusters of 4 CTAs or more, v38: 2 or more): the cluster's sum by messages (mail_merge)
// instead of a cluster barrier and DSMEM reads. N: the packs of y and of dy a thread holds (kBwdPacks;
// kBwdWidePacks for v37's and v38's clusters, softmax_bwd.cu launch_bwd_v38). kHoldDy = false (v39): only y is held (N
// = kBwdYPacks); dy is read for the sum with default caching, so that the rows in flight keep it in L2, and again,
// evict-first, for dx: HBM still moves y, dy and dx once where the rows in flight fit L2.
template <typename T, bool kCluster, bool kMail = false, int N = kBwdPacks, bool kHoldDy = true>
__global__ void __launch_bounds__(kMaxBlock, 1)
    softmax_bwd_rows_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                     int cols, int tpr) {
  static_assert(kCluster || !kMail, "messages merge over a cluster");
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const RowIter<kCluster> it(tpr);
  __shared__ ClusterMail<float> mail;
  if constexpr (kMail) {
    mail_init(mail);
    __syncthreads();
    cluster_sync();  // every CTA's barriers are initialized before any send
  }
  int n = 0;  // this CTA's row count: mail_merge's inbox and phase; n & 1 the block partials' parity
  for (int64_t base = it.base; base < rows; base += it.step, ++n) {
    const int parity = n & 1;
    const int64_t row = base + it.group;
    const bool valid = row < rows;
    const int64_t offset = (valid ? row : 0) * int64_t{cols};
    const T* yr = y + offset;
    const T* dyr = dy + offset;
    const RowSpan<T, V, int> sp(yr, cols, valid);

    P ry[N], rd[kHoldDy ? N : 1];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int i = it.lane + k * it.rt;
      if (i < sp.body) {
        ry[k] = load_stream<V>(yr + sp.head, i);
        if constexpr (kHoldDy) rd[k] = load_stream<V>(dyr + sp.head, i);
      }
    }
    float dot = 0.0f;
    if constexpr (kHoldDy) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (it.lane + k * it.rt < sp.body) {
          float yv[V], dv[V];
          unpack_fresh(ry[k], yv);
          unpack_fresh(rd[k], dv);
#pragma unroll
          for (int j = 0; j < V; ++j) dot += yv[j] * dv[j];
        }
      }
    } else {
      dy_batches<N>(
          it.lane, it.rt, sp.body, [&](int i) { return load_raw<V>(dyr + sp.head, i); },
          [&](int k, int, const P& d) {
            float yv[V], dv[V];
            unpack_fresh(ry[k], yv);
            unpack_fresh(d, dv);
#pragma unroll
            for (int j = 0; j < V; ++j) dot += yv[j] * dv[j];
          });
    }
    for (int e = it.lane; e < sp.edges(); e += it.rt) {  // edges: re-read at the output, not kept
      const int c = sp.edge_col(e, cols);
      dot += to_float(yr[c]) * to_float(dyr[c]);
    }
    if constexpr (kMail) {
      dot = mail_merge<AddOp>(mail, block_reduce_rows<AddOp>(dot, parity), n);
    } else {
      dot = row_reduce<AddOp, kCluster>(dot, tpr, parity);
    }

    T* dxr = dx + offset;
    if constexpr (kHoldDy) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int i = it.lane + k * it.rt;
        if (i < sp.body) {
          float yv[V], dv[V];
          unpack_fresh(ry[k], yv);
          unpack_fresh(rd[k], dv);
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(yv[j] * (dv[j] - dot));
          store_stream<V>(dxr + sp.head, i, out);
        }
      }
    } else {  // dx at pack k (index i) from y's held pack and dy's pack d, read again (from L2 if it stayed)
      dy_batches<N>(
          it.lane, it.rt, sp.body, [&](int i) { return load_stream<V>(dyr + sp.head, i); },
          [&](int k, int i, const P& d) {
            float yv[V], dv[V];
            unpack_fresh(ry[k], yv);
            unpack_fresh(d, dv);
            P out;
#pragma unroll
            for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(yv[j] * (dv[j] - dot));
            store_stream<V>(dxr + sp.head, i, out);
          });
    }
    for (int e = it.lane; e < sp.edges(); e += it.rt) {
      const int c = sp.edge_col(e, cols);
      dxr[c] = from_float<T>(to_float(yr[c]) * (to_float(dyr[c]) - dot));
    }
  }
  if constexpr (kCluster) cluster_sync();
}

}  // namespace jm::cuda::smx
