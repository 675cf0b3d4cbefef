// GELU forward by columns (v29): rows with per-feature scale / bias rows (ParamMode kRows) of whole 16-byte packs.
// Each thread holds one column pack's scale and bias in registers and walks kRows rows of it, kBatch row loads
// issued before any is used; a block is tx threads across consecutive packs of a row (whole warps) by ty rows.
// Why: the elementwise loop (gelu.cu's gelu_fwd_kernel) loads each pack's parameters again — for 16-bit x, 8 + 8
// floats (64 bytes, from L1 / L2) per 16 bytes of x — and its bf16 forward with arrays reads 90-91% of a 1-pack copy
// where the same kernel with attributes reads 96-97% (benchmarks/gelu_fwd_ab.cu, RESULTS.md "v29").
#pragma once

#include "cuda_common.cuh"
#include "gelu_math.h"

namespace jm::cuda {

constexpr int kColsBlock = 256;

// The block (tx threads across packs, a multiple of 32 up to kColsBlock; ty rows) and grid for rows of `packs`
// packs: grid.x covers the packs, grid.y the rows in steps of ty * kRows (at most 65535: the kernel strides).
struct ColsGeometry {
  dim3 block, grid;
};

template <int kRows>
ColsGeometry gelu_cols_geometry(int64_t rows, int64_t packs) {
  const int tx = static_cast<int>(std::min<int64_t>(ceil_div(packs, 32) * 32, kColsBlock));
  const int ty = kColsBlock / tx;
  const int64_t gx = ceil_div(packs, tx), gy = std::min<int64_t>(ceil_div(rows, int64_t{ty} * kRows), 65535);
  return {dim3(tx, ty), dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy))};
}

// scale / bias: one row of `cols` floats each, or nullptr for the attribute (scale_value / bias_value).
template <typename T, int V, int kRows, int kBatch>
__global__ void __launch_bounds__(kColsBlock)
    gelu_fwd_cols_kernel(const T* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ bias,
                         float scale_value, float bias_value, T* __restrict__ y, int64_t rows, int64_t cols) {
  static_assert(kRows % kBatch == 0, "rows per thread: whole batches");
  const int64_t packs = cols / V;
  const int64_t cp = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (cp >= packs) return;  // no barrier below
  float s[V], b[V];
  load_param<V>(scale, cp, scale_value, s);
  load_param<V>(bias, cp, bias_value, b);
  const int64_t span = int64_t{blockDim.y} * kRows;  // rows per block step
  for (int64_t r0 = int64_t{blockIdx.y} * span + threadIdx.y; r0 < rows; r0 += int64_t{gridDim.y} * span) {
#pragma unroll
    for (int k0 = 0; k0 < kRows; k0 += kBatch) {
      Pack<T, V> p[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t r = r0 + (k0 + j) * int64_t{blockDim.y};
        if (r < rows) p[j] = load_raw<V>(x + r * cols, cp);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int64_t r = r0 + (k0 + j) * int64_t{blockDim.y};
        if (r >= rows) continue;
        float v[V];
        unpack_fresh(p[j], v);
#pragma unroll
        for (int e = 0; e < V; ++e) v[e] = gelu(v[e] * s[e] + b[e]);
        store_pack<V>(y + r * cols, cp, v);
      }
    }
  }
}

}  // namespace jm::cuda
