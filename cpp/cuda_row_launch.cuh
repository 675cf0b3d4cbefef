// The geometry and launch of the general row kernels (the norms' fallback for rows beyond the register
// classes): threads per row, rows per block, the row cache in shared memory.
#pragma once

#include "cuda_base.cuh"

namespace jm::cuda {

// Row kernels use blocks of at most kMaxRowThreads threads and are declared
// __launch_bounds__(kMaxRowThreads, 2): up to 64 registers, so two one-row blocks (whose load and compute
// phases overlap) still fit an SM. Fewer registers would cost spills; the lost occupancy is made up by
// batched loads (several in flight per thread).
constexpr int kMaxRowThreads = 512;

// A row kernel's geometry, as the kernel sees it. `tpr` threads (a power of two) share a row: when
// tpr <= 32 a block of kSmallRowBlock threads holds several rows and reduces with shuffles, when
// tpr > 32 the block is one row (blockDim.x == tpr). The grid strides over rows a block at a time.
struct RowPlan {
  int tpr = 1;
  bool cached = false;  // the first pass copies each row into dynamic shared memory
};

__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char jm_dynamic_smem[];
  return jm_dynamic_smem;
}

// This thread's place in a row kernel's geometry.
struct RowSlot {
  int lane;            // index among the tpr threads of its row
  int group;           // which of the block's rows
  int rows_per_block;

  __device__ explicit RowSlot(const RowPlan& p)
      : lane(static_cast<int>(threadIdx.x) & (p.tpr - 1)),
        group(static_cast<int>(threadIdx.x) / p.tpr),
        rows_per_block(static_cast<int>(blockDim.x) / p.tpr) {}

  // This row's slice (`elems` elements) of the shared-memory row cache; nullptr when not cached.
  // A thread only reads back the packs it wrote itself, so the cache needs no barrier.
  template <typename T>
  __device__ T* cache(const RowPlan& p, int64_t elems) const {
    return p.cached ? reinterpret_cast<T*>(dynamic_smem()) + group * elems : nullptr;
  }
};

// The grid-stride loop of the row kernels: body(row, active) for each of this slot's rows. A group past the last
// row (active false) still runs the body, with no packs, so that it joins its block's row reductions.
template <typename Body>
__device__ __forceinline__ void for_slot_rows(const RowSlot& slot, int64_t rows, Body&& body) {
  for (int64_t base = int64_t{blockIdx.x} * slot.rows_per_block; base < rows;
       base += int64_t{gridDim.x} * slot.rows_per_block) {
    const int64_t row = base + slot.group;
    body(row, row < rows);
  }
}

struct RowLaunch {
  RowPlan plan;
  dim3 grid;
  dim3 block;
  size_t smem = 0;
};

// What a row kernel's registers allow: threads per row (its block, where a row has more than a warp) at most, and the
// threads an SM holds (1024 at the row kernels' 64 registers).
struct RowLimits {
  int max_tpr = kMaxRowThreads;
  int threads_per_sm = 1024;
};

// About kPacksPerThread packs per thread, up to a block of lim.max_tpr threads per row. The row cache is used only
// when it costs no occupancy: the blocks that an SM's registers hold (lim.threads_per_sm) must fit its shared memory
// too, else one long row per SM would alternate between loading and computing with nothing overlapping. Otherwise
// later passes re-read the row from global memory (mostly L2 hits). At most 32 blocks per SM (the residency limit),
// then the grid strides.
inline RowLaunch plan_rows(const DeviceInfo& dev, RowShape s, int vec, int64_t cache_bytes_per_row,
                           RowLimits lim = {}) {
  constexpr int64_t kPacksPerThread = 4;
  constexpr int kSmallRowBlock = 128;
  constexpr int64_t kStaticSmemReserve = 1024;  // block_reduce partials (see launch)
  RowLaunch l;
  const int64_t packs = s.cols / vec;
  while (l.plan.tpr < lim.max_tpr && int64_t{l.plan.tpr} * kPacksPerThread < packs) l.plan.tpr *= 2;
  const int block = l.plan.tpr > 32 ? l.plan.tpr : kSmallRowBlock;
  const int rows_per_block = block / l.plan.tpr;
  const int64_t smem = rows_per_block * cache_bytes_per_row;
  l.plan.cached = (smem + kStaticSmemReserve) * (lim.threads_per_sm / block) <= dev.max_smem_optin;
  l.smem = l.plan.cached ? static_cast<size_t>(smem) : 0;
  const int64_t blocks = std::min(ceil_div(s.rows, rows_per_block), int64_t{dev.sm_count} * 32);
  l.grid = dim3(static_cast<unsigned>(blocks));
  l.block = dim3(static_cast<unsigned>(block));
  return l;
}

// Plans and launches a row kernel kernel(args..., plan) within `lim`; `cache_bytes_per_row` is what its row cache
// holds per row.
template <typename... P, typename... A>
ffi::Error launch_rows(void (*kernel)(P...), RowLimits lim, cudaStream_t stream, RowShape s, int vec,
                       int64_t cache_bytes_per_row, const char* what, A... args) {
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  const RowLaunch l = plan_rows(dev, s, vec, cache_bytes_per_row, lim);
  return launch(kernel, l.grid, l.block, l.smem, stream, what, args..., l.plan);
}

// The row kernels of 64 registers: RowLimits' defaults.
template <typename... P, typename... A>
ffi::Error launch_rows(void (*kernel)(P...), cudaStream_t stream, RowShape s, int vec, int64_t cache_bytes_per_row,
                       const char* what, A... args) {
  return launch_rows(kernel, RowLimits{}, stream, s, vec, cache_bytes_per_row, what, args...);
}

}  // namespace jm::cuda
