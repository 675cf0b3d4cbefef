// Elementwise kernels over packs (GELU, the chain of separate ops): the grid, the (row, column) cursor, the
// batched grid-stride loop, and how a launch reads its scale and bias.
#pragma once

#include "cuda_pack.cuh"

namespace jm::cuda {

constexpr int kElemBlock = 256;

// One block per kElemBlock * batch packs (kFull, the default since v7): each thread loads its one batch
// (for_grid_packs's kBatch) and exits, as the row kernels' full grids do; measured on the H200 against
// the former grid (JAX_MEMOPS_GRID=persistent: up to 32 blocks per SM, the residency limit, striding):
// GELU forward f32 1.03-1.07, the rest 0.99-1.06 (RESULTS.md, "v7").
inline dim3 elementwise_grid(const DeviceInfo& dev, int64_t packs, int batch) {
  const int64_t capped = std::min(ceil_div(packs, kElemBlock), int64_t{dev.sm_count} * 32);
  const int64_t full = ceil_div(packs, int64_t{kElemBlock} * batch);
  const int64_t grid = grid_mode(Grid::kFull) == Grid::kFull ? full : capped;
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(grid, 0x7fffffff))));
}

// (row, column) of element `first`, advanced by `step` elements at a time without dividing per step.
struct RowColCursor {
  int64_t r, c, dr, dc, cols;
  __device__ RowColCursor(int64_t first, int64_t step, int64_t cols_)
      : r(first / cols_), c(first % cols_), dr(step / cols_), dc(step % cols_), cols(cols_) {}
  __device__ void advance() {
    r += dr;
    c += dc;
    if (c >= cols) {
      c -= cols;
      ++r;
    }
  }
};

// Grid-stride loop over the `packs` V-element packs of the K flat arrays `src` (rows of `cols`
// elements), kBatch packs loaded before f(p, at, packs) runs on each; `at` is pack p's (row, column).
template <int V, int kRegs = 0, int K, typename T, typename F>
__device__ __forceinline__ void for_grid_packs(const T* const (&src)[K], int64_t packs, int64_t cols,
                                               F&& f) {
  constexpr int B = kBatch<T, V, K, kRegs>;
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  RowColCursor at(first * V, stride * V, cols);
  for (int64_t p0 = first; p0 < packs; p0 += B * stride) {
    Pack<T, V> p[B][K];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int64_t q = p0 + b * stride;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        if (q < packs) p[b][k] = load_raw<V>(src[k], q);
      }
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int64_t q = p0 + b * stride;
      if (q < packs) f(q, at, p[b]);
      at.advance();
    }
  }
}

// How an elementwise kernel finds a pack's scale and bias, fixed per launch (param_mode, host):
//   kScalars: both are attributes (the *_value arguments): no (row, column) is needed, and the tensor
//     is one flat run of packs;
//   kRows: each parameter one row of C floats (or an attribute): the pack's column only;
//   kGroups: rows in contiguous groups (vmap over the parameters): param_row's group of the pack's row.
// Why: with the test per pack (absent? grouped?) and the cursor, the bf16 GELU forward issued ~33
// instructions per element (SASS, one 8-element pack), where its math takes 13, and ran at 84-88% of
// the copy (RESULTS.md, "v8").
enum class ParamMode { kScalars, kRows, kGroups };

template <ParamMode M>
using ParamModeTag = std::integral_constant<ParamMode, M>;

inline ParamMode param_mode(const ParamView& scale, const ParamView& bias, int64_t rows) {
  if (scale.data == nullptr && bias.data == nullptr) return ParamMode::kScalars;
  const auto one_row = [rows](const ParamView& p) { return p.data == nullptr || p.rows_per_group >= rows; };
  return one_row(scale) && one_row(bias) ? ParamMode::kRows : ParamMode::kGroups;
}

// Calls f(ParamModeTag<m>{}).
template <typename F>
ffi::Error with_param_mode(ParamMode m, F&& f) {
  switch (m) {
    case ParamMode::kScalars:
      return f(ParamModeTag<ParamMode::kScalars>{});
    case ParamMode::kRows:
      return f(ParamModeTag<ParamMode::kRows>{});
    default:
      return f(ParamModeTag<ParamMode::kGroups>{});
  }
}

// The V parameter values of the pack at `at` (a column multiple of V) under mode M; `value` where the
// parameter is an attribute.
template <ParamMode M, int V>
__device__ __forceinline__ void load_param_at(const ParamView& p, const RowColCursor& at, int64_t cols,
                                              float value, float (&out)[V]) {
  if constexpr (M == ParamMode::kScalars) {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = value;
  } else {
    load_param<V>(M == ParamMode::kRows ? p.data : param_row(p, at.r, cols), at.c / V, value, out);
  }
}

// Calls f(ParamModeTag<M>{}, std::integral_constant<int, V>{}) with the launch's parameter mode M and
// pack width V: kVec<T> where the packs are aligned — a flat run of packs under kScalars, each row's
// otherwise — and every buffer is 16-byte aligned, else 1.
template <typename T, typename F>
ffi::Error with_param_mode_and_vec(const ParamView& scale, const ParamView& bias, const RowShape& s,
                                   std::initializer_list<const void*> buffers, F&& f) {
  return with_param_mode(param_mode(scale, bias, s.rows), [&](auto mode) {
    constexpr bool kFlat = decltype(mode)::value == ParamMode::kScalars;
    return with_vec<T>(vectorizable<T>(kFlat ? s.size() : s.cols, buffers), [&](auto vec) { return f(mode, vec); });
  });
}

}  // namespace jm::cuda
