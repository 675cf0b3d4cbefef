// Deterministic per-column sums over row groups (parameter gradients where no per-block partials are kept).
#pragma once

#include "cuda_base.cuh"

namespace jm::cuda {

constexpr int kColTile = 32;  // columns per block (threadIdx.x)
constexpr int kColRows = 32;  // threads per column (threadIdx.y)

// Per-column sums over contiguous row groups: one block per (32-column tile, group), grid-striding
// over both. Thread (x, y) sums rows y, y+32, ... of its group in order, then a fixed shared-memory
// tree over y. No atomics: every run gives the same bits. elem(r, c, a, b) yields element (r, c)'s
// contributions to out_a and out_b (either may be nullptr) and may write side outputs.
template <class Elem>
__global__ void __launch_bounds__(kColTile* kColRows, 1)
    column_sums_kernel(Elem elem, int64_t cols, int64_t groups, int64_t rows_per_group, float* out_a,
                       float* out_b) {
  __shared__ float sum_a[kColRows][kColTile];
  __shared__ float sum_b[kColRows][kColTile];
  const int tx = static_cast<int>(threadIdx.x);
  const int ty = static_cast<int>(threadIdx.y);
  const int64_t tiles = ceil_div(cols, kColTile);
  for (int64_t g = blockIdx.y; g < groups; g += gridDim.y) {
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int64_t c = t * kColTile + tx;
      float a = 0.0f;
      float b = 0.0f;
      if (c < cols) {
        const int64_t end = (g + 1) * rows_per_group;
#pragma unroll 4
        for (int64_t r = g * rows_per_group + ty; r < end; r += kColRows) {
          float ea, eb;
          elem(r, c, ea, eb);
          a += ea;
          b += eb;
        }
      }
      sum_a[ty][tx] = a;
      sum_b[ty][tx] = b;
      __syncthreads();
      for (int half = kColRows / 2; half > 0; half /= 2) {
        if (ty < half) {
          sum_a[ty][tx] += sum_a[ty + half][tx];
          sum_b[ty][tx] += sum_b[ty + half][tx];
        }
        __syncthreads();
      }
      if (ty == 0 && c < cols) {
        if (out_a != nullptr) out_a[g * cols + c] = sum_a[0][tx];
        if (out_b != nullptr) out_b[g * cols + c] = sum_b[0][tx];
      }
      __syncthreads();  // the next tile rewrites sum_a / sum_b
    }
  }
}

// Column sums of elem's contributions a into ga and b into gb (each wanted when data != nullptr). One
// launch when both share a row grouping; otherwise one launch each, so elem then runs twice per element
// (any side output it writes is written twice, with the same value).
template <class Elem>
ffi::Error launch_column_sums(cudaStream_t stream, const Elem& elem, int64_t cols, const GradView& ga,
                              const GradView& gb, const char* what) {
  auto run = [&](const GradView& grouping, float* a, float* b) {
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(cols, kColTile), INT_MAX)),
                    static_cast<unsigned>(std::min<int64_t>(grouping.groups, 65535)));
    return launch(column_sums_kernel<Elem>, grid, dim3(kColTile, kColRows), 0, stream, what, elem, cols,
                  grouping.groups, grouping.rows_per_group, a, b);
  };
  const bool fused = ga.data != nullptr && gb.data != nullptr && ga.groups == gb.groups;
  if (ga.data != nullptr) {
    if (auto err = run(ga, ga.data, fused ? gb.data : nullptr); err.failure()) return err;
  }
  if (gb.data != nullptr && !fused) return run(gb, nullptr, gb.data);
  return ffi::Error::Success();
}

// Zero-fills a wanted parameter gradient (the sum over zero rows).
inline ffi::Error zero_grad(cudaStream_t stream, const GradView& g, int64_t cols, const char* what) {
  if (g.data == nullptr) return ffi::Error::Success();
  return check_cuda(
      cudaMemsetAsync(g.data, 0, static_cast<size_t>(g.groups * cols) * sizeof(float), stream), what);
}

}  // namespace jm::cuda
