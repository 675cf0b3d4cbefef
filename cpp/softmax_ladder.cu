// The seed's softmax forward kernels, v1..v7 (llm.c dev/cuda/softmax_forward.cu style): a teaching
// ladder, each version one idea beyond the one before. jm.softmax(x, algorithm=NAME) runs version
// SOFTMAX_ALGORITHMS.index(NAME); "auto" (index 0) is the tuned kernel of softmax_fwd.cu.
//
// version 1 (thread_per_row): one thread per row, three serial passes (max, sum, normalize). Teaches
//   the safe-softmax structure; no parallelism within a row, and a warp's loads hit 32 different rows.
// version 2 (block_shared): one block per row, threads stride the row (coalesced), max and sum by
//   shared-memory tree reductions. Teaches block-level reduction; log2(block) barriers per reduction.
// version 3 (warp_shuffle): one warp per row (block size fixed at 32), warp-shuffle reductions, the
//   result broadcast from lane 0 with __shfl_sync. Teaches register-only reduction, no barriers; the
//   block must be one warp because nothing combines warps.
// version 4 (warp_block): one block per row, any block size that is a multiple of 32 (we launch 256):
//   shuffles within each warp, then lane 0 of each warp writes shared memory and thread 0 combines
//   the warps. Teaches the standard two-level block reduction (block/32 shared slots, two barriers).
// version 5 (online_thread_per_row): online softmax, one thread per row: one fused pass keeps the
//   running max and a sum rescaled by exp(old max - new max) when the max grows, then normalize.
//   Teaches that max and sum fuse into one pass (two reads of the row instead of three).
// version 6 (online_warp): online softmax, one warp per row: (max, sum) pairs merged by the
//   associative rescaling op, across the warp with cg::reduce; output written with streaming stores
//   (__stcs: not read back soon). Teaches that the online merge is associative, hence parallel.
// version 7 (unrolled): v4's structure for long rows (e.g. a 50257-word vocabulary): each thread
//   issues 8 independent loads (__ldcs, streaming) into registers before using any, indices clamped
//   with min(C - 1, i) so the loads are branch-free; exp and sum fused in one loop. Teaches memory-level
//   parallelism; the clamped duplicate reads make it a poor choice for short rows.
//
// Every version: load T (float, bf16, f16), compute in float, store T; 64-bit row offsets and column
// indices; the grid strides over rows (at most 32 blocks per SM are launched: no more are resident).
// Deviations from the seed, all for correctness — every version has the semantics of "auto" and
// jax.nn.softmax (-inf entries give 0, an all -inf row NaN, a NaN or +inf anywhere makes its row NaN):
//   * the max is MaxOp (cuda_reduce.cuh), which propagates NaN, not the seed's fmaxf, which drops it.
//     The three-pass kernels would still catch a NaN in the sum (exp(NaN - max)), but the online
//     kernels' -inf guard (next point) would swallow one seen while the max is still -inf: [-inf, NaN, 1]
//     would come out [0, NaN, 1]. With a NaN max every version poisons the row, as "auto" does;
//   * the online kernels guard exp(-inf - (-inf)) = NaN: a partial that has seen only -inf (max -inf)
//     contributes 0 (see exp_or_zero), and one +inf element carries sum NaN (see element_partial);
//   * llm.c stashes exp(x - max) in y between the sum and normalize passes; here y has x's dtype, and
//     rounding that intermediate to bf16/f16 would round every output twice, so the normalize pass
//     recomputes exp(x - max) from x (same number of passes: max, sum, normalize);
//   * v2 has a barrier between the tree's last step and the read of shared[0] (llm.c reads it racily),
//     and v7 has no early `return` for threads past the end of the row (llm.c's returns before
//     barriers the rest of the block waits at);
//   * the normalize pass multiplies by 1/sum (one division per row): a precise division per element
//     is a call to a slow-path subroutine, which made ptxas spill in v6.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "softmax_ladder.h"

namespace cg = cooperative_groups;

namespace jm::cuda {
namespace {

constexpr int kThreadRowBlock = 128;  // v1, v5: threads (= rows) per block
constexpr int kBlockRowThreads = 256;  // v2, v4, v7: threads per row (= per block)
constexpr int kWarp = 32;
constexpr int kOnlineWarpBlock = 256;  // v6: 8 warps, one row each
constexpr int kUnroll = 8;             // v7: loads in flight per thread

// exp(v - m) for a running max m >= v, except that a partial which has seen only -inf (m == -inf)
// contributes 0: exp(-inf - (-inf)) is NaN and would poison a row that has finite entries. An all
// -inf row still ends NaN (its normalize pass computes exp(-inf - (-inf))); m = +inf or NaN gives NaN.
__device__ __forceinline__ float exp_or_zero(float v, float m) {
  return m == -INFINITY ? 0.0f : expf(v - m);
}

__device__ __forceinline__ int64_t clamp_col(int64_t i, int64_t last) { return i < last ? i : last; }

// ---- version 1: one thread per row, three serial passes -------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreadRowBlock)
    softmax_v1_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  for (int64_t row = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; row < rows;
       row += int64_t{gridDim.x} * blockDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float maxval = -INFINITY;
    for (int64_t j = 0; j < cols; ++j) maxval = MaxOp()(maxval, to_float(xr[j]));
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) sum += expf(to_float(xr[j]) - maxval);
    const float inv_sum = 1.0f / sum;
    for (int64_t j = 0; j < cols; ++j) yr[j] = from_float<T>(expf(to_float(xr[j]) - maxval) * inv_sum);
  }
}

// ---- version 2: one block per row, shared-memory tree reductions ------------------------------------

// Tree reduction over shared[0, blockDim.x) (blockDim.x a power of two); every thread gets the result.
template <class Op>
__device__ __forceinline__ float shared_tree_reduce(float v, Op op, float* shared) {
  const int tid = static_cast<int>(threadIdx.x);
  shared[tid] = v;
  for (int stride = static_cast<int>(blockDim.x) / 2; stride >= 1; stride /= 2) {
    __syncthreads();
    if (tid < stride) shared[tid] = op(shared[tid], shared[tid + stride]);
  }
  __syncthreads();  // thread 0's last write is seen by every reader of shared[0]
  const float result = shared[0];
  __syncthreads();  // every thread has read shared[0] before the next reduction overwrites it
  return result;
}

template <typename T>
__global__ void __launch_bounds__(kBlockRowThreads)
    softmax_v2_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  float* shared = reinterpret_cast<float*>(dynamic_smem());  // blockDim.x floats
  const int64_t tid = threadIdx.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float maxval = -INFINITY;
    for (int64_t i = tid; i < cols; i += blockDim.x) maxval = MaxOp()(maxval, to_float(xr[i]));
    const float offset = shared_tree_reduce(maxval, MaxOp(), shared);
    float sumval = 0.0f;
    for (int64_t i = tid; i < cols; i += blockDim.x) sumval += expf(to_float(xr[i]) - offset);
    const float inv_sum = 1.0f / shared_tree_reduce(sumval, SumOp(), shared);
    for (int64_t i = tid; i < cols; i += blockDim.x) {
      yr[i] = from_float<T>(expf(to_float(xr[i]) - offset) * inv_sum);
    }
  }
}

// ---- version 3: one warp per row, warp shuffles ---------------------------------------------------------

// The seed's warpReduceMax / warpReduceSum: shuffle down, the full result lands in lane 0 only.
template <class Op>
__device__ __forceinline__ float warp_reduce_down(float v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  return v;
}

template <typename T>
__global__ void __launch_bounds__(kWarp)
    softmax_v3_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  const int64_t lane = threadIdx.x;  // the block is one warp
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float maxval = -INFINITY;
    for (int64_t i = lane; i < cols; i += kWarp) maxval = MaxOp()(maxval, to_float(xr[i]));
    maxval = warp_reduce_down(maxval, MaxOp());
    const float offset = __shfl_sync(0xffffffffu, maxval, 0);  // broadcast lane 0's result
    float sumval = 0.0f;
    for (int64_t i = lane; i < cols; i += kWarp) sumval += expf(to_float(xr[i]) - offset);
    sumval = warp_reduce_down(sumval, SumOp());
    const float inv_sum = 1.0f / __shfl_sync(0xffffffffu, sumval, 0);
    for (int64_t i = lane; i < cols; i += kWarp) {
      yr[i] = from_float<T>(expf(to_float(xr[i]) - offset) * inv_sum);
    }
  }
}

// ---- version 4: one block per row, shuffles within warps, shared memory across warps ------------------

// Two-level block reduction of v4/v7: each warp shuffles, lane 0 of each warp writes storage[warp],
// thread 0 combines the warps into storage[0], which every thread reads. storage holds 32 slots
// (1024 / 32 warps). The max and the sum use separate storage, so one row needs no extra barrier, and
// the next row's writes come after this row's reads (two barriers lie between).
template <class Op>
__device__ __forceinline__ float warp_block_reduce(float v, Op op, float* storage) {
  const int tid = static_cast<int>(threadIdx.x);
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  v = warp_reduce_down(v, op);
  if (tid % kWarp == 0) storage[tid / kWarp] = v;
  __syncthreads();
  if (tid == 0) {
    float val = storage[0];
    for (int i = 1; i < warps; ++i) val = op(val, storage[i]);
    storage[0] = val;
  }
  __syncthreads();
  return storage[0];
}

template <typename T>
__global__ void __launch_bounds__(1024)
    softmax_v4_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  __shared__ float maxvals[1024 / kWarp];
  __shared__ float sumvals[1024 / kWarp];
  const int64_t tid = threadIdx.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float maxval = -INFINITY;
    for (int64_t i = tid; i < cols; i += blockDim.x) maxval = MaxOp()(maxval, to_float(xr[i]));
    const float offset = warp_block_reduce(maxval, MaxOp(), maxvals);
    float sumval = 0.0f;
    for (int64_t i = tid; i < cols; i += blockDim.x) sumval += expf(to_float(xr[i]) - offset);
    const float inv_sum = 1.0f / warp_block_reduce(sumval, SumOp(), sumvals);
    for (int64_t i = tid; i < cols; i += blockDim.x) {
      yr[i] = from_float<T>(expf(to_float(xr[i]) - offset) * inv_sum);
    }
  }
}

// ---- version 5: online softmax, one thread per row ---------------------------------------------------------

template <typename T>
__global__ void __launch_bounds__(kThreadRowBlock)
    softmax_v5_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  for (int64_t row = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; row < rows;
       row += int64_t{gridDim.x} * blockDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    float maxval = -INFINITY;
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float v = to_float(xr[j]);
      const float maxval_prev = maxval;
      maxval = MaxOp()(maxval, v);
      if (maxval != maxval_prev) {  // the max grew (or turned NaN): rescale the sum so far
        sum = sum * expf(maxval_prev - maxval) + expf(v - maxval);
      } else {
        sum += exp_or_zero(v, maxval);  // the seed's expf(v - maxval) is NaN while maxval == -inf
      }
    }
    const float inv_sum = 1.0f / sum;
    for (int64_t j = 0; j < cols; ++j) yr[j] = from_float<T>(expf(to_float(xr[j]) - maxval) * inv_sum);
  }
}

// ---- version 6: online softmax, one warp per row, cg::reduce of (max, sum) pairs ------------------------

struct __align__(8) SumMax {
  float maxval;
  float sum;  // sum of exp(x - maxval) over the elements seen
};

// The seed's reduce_sum_max_op: the larger max wins and the other sum is rescaled by exp(its max -
// the larger). Associative, and commutative bit for bit (ties add the two sums), so cg::reduce's
// butterfly leaves the same pair in every lane. A NaN max counts as larger, so it propagates.
__device__ __forceinline__ SumMax reduce_sum_max_op(SumMax a, SumMax b) {
  const bool a_bigger = a.maxval > b.maxval || a.maxval != a.maxval;
  const SumMax bigger = a_bigger ? a : b;
  const SumMax smaller = a_bigger ? b : a;
  return {bigger.maxval, bigger.sum + smaller.sum * exp_or_zero(smaller.maxval, bigger.maxval)};
}

// One element as a partial: the seed's (v, 1), except that -inf is the empty partial (-inf, 0), so a
// partial with max -inf always has sum 0, and +inf carries sum NaN: exp(inf - inf) must make the row
// NaN (from (inf, 1) only the +inf entry would come out NaN).
__device__ __forceinline__ SumMax element_partial(float v) {
  return {v, v == INFINITY ? NAN : (v == -INFINITY ? 0.0f : 1.0f)};
}

template <typename T>
__global__ void __launch_bounds__(kOnlineWarpBlock)
    softmax_v6_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  const cg::thread_block_tile<kWarp> warp = cg::tiled_partition<kWarp>(cg::this_thread_block());
  const int64_t warps_per_block = warp.meta_group_size();
  const int64_t lane = warp.thread_rank();
  for (int64_t row = int64_t{blockIdx.x} * warps_per_block + warp.meta_group_rank(); row < rows;
       row += int64_t{gridDim.x} * warps_per_block) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    SumMax partial = {-INFINITY, 0.0f};
    for (int64_t i = lane; i < cols; i += kWarp) {
      partial = reduce_sum_max_op(partial, element_partial(to_float(xr[i])));
    }
    const SumMax total = cg::reduce(warp, partial, reduce_sum_max_op);
    const float inv_sum = 1.0f / total.sum;
    for (int64_t i = lane; i < cols; i += kWarp) {
      __stcs(yr + i, from_float<T>(expf(to_float(xr[i]) - total.maxval) * inv_sum));
    }
  }
}

// ---- version 7: v4 with 8 independent streaming loads per thread ------------------------------------------

template <typename T>
__global__ void __launch_bounds__(1024)
    softmax_v7_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  __shared__ float maxvals[1024 / kWarp];
  __shared__ float sumvals[1024 / kWarp];
  const int64_t tid = threadIdx.x;
  const int64_t bd = blockDim.x;
  const int64_t last = cols - 1;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;

    float maxval = -INFINITY;
    for (int64_t i = tid; i < cols; i += bd * kUnroll) {
      float reg[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) reg[u] = to_float(xr[clamp_col(i + u * bd, last)]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) maxval = MaxOp()(maxval, reg[u]);  // duplicates of x[C-1]: harmless
    }
    const float offset = warp_block_reduce(maxval, MaxOp(), maxvals);

    float sumval = 0.0f;
    for (int64_t i = tid; i < cols; i += bd * kUnroll) {
      float reg[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) reg[u] = to_float(__ldcs(xr + clamp_col(i + u * bd, last)));
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (i + u * bd < cols) sumval += expf(reg[u] - offset);  // exp and sum in one loop
      }
    }
    const float inv_sum = 1.0f / warp_block_reduce(sumval, SumOp(), sumvals);

    for (int64_t i = tid; i < cols; i += bd * kUnroll) {
      float reg[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) reg[u] = to_float(__ldcs(xr + clamp_col(i + u * bd, last)));
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (i + u * bd < cols) yr[i + u * bd] = from_float<T>(expf(reg[u] - offset) * inv_sum);
      }
    }
  }
}

// ---- launchers ---------------------------------------------------------------------------------------------

// `blocks` blocks, at most 32 per SM (the residency limit; the kernels stride over the rest), which
// also keeps grid.x far below its 2^31 - 1 limit.
dim3 grid_of(const DeviceInfo& dev, int64_t blocks) {
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, int64_t{dev.sm_count} * 32))));
}

template <typename T>
ffi::Error launch_version(int64_t version, cudaStream_t stream, const DeviceInfo& dev, const T* x, T* y,
                          RowShape s) {
  const int64_t rows = s.rows;
  const int64_t cols = s.cols;
  switch (version) {
    case 1:
      return launch(softmax_v1_kernel<T>, grid_of(dev, ceil_div(rows, kThreadRowBlock)), dim3(kThreadRowBlock),
                    0, stream, "softmax_fwd v1 (thread_per_row)", x, y, rows, cols);
    case 2:
      return launch(softmax_v2_kernel<T>, grid_of(dev, rows), dim3(kBlockRowThreads),
                    kBlockRowThreads * sizeof(float), stream, "softmax_fwd v2 (block_shared)", x, y, rows, cols);
    case 3:
      return launch(softmax_v3_kernel<T>, grid_of(dev, rows), dim3(kWarp), 0, stream,
                    "softmax_fwd v3 (warp_shuffle)", x, y, rows, cols);
    case 4:
      return launch(softmax_v4_kernel<T>, grid_of(dev, rows), dim3(kBlockRowThreads), 0, stream,
                    "softmax_fwd v4 (warp_block)", x, y, rows, cols);
    case 5:
      return launch(softmax_v5_kernel<T>, grid_of(dev, ceil_div(rows, kThreadRowBlock)), dim3(kThreadRowBlock),
                    0, stream, "softmax_fwd v5 (online_thread_per_row)", x, y, rows, cols);
    case 6:
      return launch(softmax_v6_kernel<T>, grid_of(dev, ceil_div(rows, kOnlineWarpBlock / kWarp)),
                    dim3(kOnlineWarpBlock), 0, stream, "softmax_fwd v6 (online_warp)", x, y, rows, cols);
    case 7:
      return launch(softmax_v7_kernel<T>, grid_of(dev, rows), dim3(kBlockRowThreads), 0, stream,
                    "softmax_fwd v7 (unrolled)", x, y, rows, cols);
    default:
      return ffi::Error::InvalidArgument("softmax_fwd: no ladder version " + std::to_string(version));
  }
}

}  // namespace

ffi::Error launch_softmax_ladder(int64_t algorithm, cudaStream_t stream, ffi::DataType dtype, const void* x,
                                 void* y, RowShape s) {
  if (algorithm < kSoftmaxLadderFirst || algorithm > kSoftmaxLadderLast) {
    return ffi::Error::InvalidArgument("softmax_fwd: unknown ladder algorithm " + std::to_string(algorithm) +
                                       " (1..7 are the seed's v1..v7)");
  }
  if (s.size() == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  return dispatch_float(dtype, [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    return launch_version<T>(algorithm, stream, dev, static_cast<const T*>(x), static_cast<T*>(y), s);
  });
}

}  // namespace jm::cuda
