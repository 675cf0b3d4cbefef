// Softmax over the last axis: CUDA kernels and XLA FFI handlers (JmSoftmaxFwdCuda, JmSoftmaxBwdCuda).
#include "cuda_common.cuh"
#include "bindings.h"
#include "handlers.h"
#include "softmax_ladder.h"

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

// softmax_fwd: `tpr` threads per row (see RowPlan), grid-stride over rows, batched loads. Pass 1 takes
// the row max (NaN-propagating) and copies the row to shared memory when it fits (else passes 2-3
// re-read it from global/L2), pass 2 sums exp(x - max), pass 3 writes exp(x - max) / sum. A NaN or +inf
// in a row, or an all -inf row, makes the max or the sum NaN and so the whole row NaN.
template <typename T, int V>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    softmax_fwd_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols,
                       RowPlan plan) {
  const RowSlot slot(plan);
  T* cache = slot.cache<T>(plan, cols);
  const int64_t packs = cols / V;
  for (int64_t base = int64_t{blockIdx.x} * slot.rows_per_block; base < rows;
       base += int64_t{gridDim.x} * slot.rows_per_block) {
    const int64_t row = base + slot.group;
    const int64_t n = row < rows ? packs : 0;  // groups past the last row only join the reductions
    const T* xr = x + row * cols;

    float m = -INFINITY;
    for_row_packs<V>({xr}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      if (cache != nullptr) store_raw<V>(cache, i, p[0]);
      float v[V];
      unpack(p[0], v);
#pragma unroll
      for (int j = 0; j < V; ++j) m = MaxOp()(m, v[j]);
    });
    m = row_max(m, plan.tpr);

    const T* src = cache != nullptr ? cache : xr;
    float sum = 0.0f;
    for_row_packs<V>({src}, n, slot.lane, plan.tpr, [&](int64_t, const auto& p) {
      float v[V];
      unpack(p[0], v);
#pragma unroll
      for (int j = 0; j < V; ++j) sum += expf(v[j] - m);
    });
    const float inv_sum = 1.0f / row_sum(sum, plan.tpr);

    T* yr = y + row * cols;
    for_row_packs<V>({src}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      float v[V];
      unpack(p[0], v);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = expf(v[j] - m) * inv_sum;
      store_pack<V>(yr, i, v);
    });
  }
}

// softmax_bwd: same geometry. Pass 1 sums dy*y over the row (caching y and dy in shared memory when
// they fit), pass 2 writes dx = y * (dy - sum).
template <typename T, int V>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    softmax_bwd_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx,
                       int64_t rows, int64_t cols, RowPlan plan) {
  const RowSlot slot(plan);
  T* cache_y = slot.cache<T>(plan, 2 * cols);
  T* cache_dy = cache_y != nullptr ? cache_y + cols : nullptr;
  const int64_t packs = cols / V;
  for (int64_t base = int64_t{blockIdx.x} * slot.rows_per_block; base < rows;
       base += int64_t{gridDim.x} * slot.rows_per_block) {
    const int64_t row = base + slot.group;
    const int64_t n = row < rows ? packs : 0;
    const T* yr = y + row * cols;
    const T* dyr = dy + row * cols;

    float dot = 0.0f;
    for_row_packs<V>({yr, dyr}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      if (cache_y != nullptr) {
        store_raw<V>(cache_y, i, p[0]);
        store_raw<V>(cache_dy, i, p[1]);
      }
      float yv[V], dv[V];
      unpack(p[0], yv);
      unpack(p[1], dv);
#pragma unroll
      for (int j = 0; j < V; ++j) dot += dv[j] * yv[j];
    });
    dot = row_sum(dot, plan.tpr);

    const T* ys = cache_y != nullptr ? cache_y : yr;
    const T* dys = cache_y != nullptr ? cache_dy : dyr;
    T* dxr = dx + row * cols;
    for_row_packs<V>({ys, dys}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      float yv[V], dv[V];
      unpack(p[0], yv);
      unpack(p[1], dv);
#pragma unroll
      for (int j = 0; j < V; ++j) yv[j] *= dv[j] - dot;
      store_pack<V>(dxr, i, yv);
    });
  }
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
    return with_vec<T>(vectorizable<T>(s.cols, {xp, yp}), [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      return launch_rows(softmax_fwd_kernel<T, V>, stream, s, V, s.cols * int64_t{sizeof(T)},
                         "softmax_fwd", xp, yp, s.rows, s.cols);
    });
  });
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
    return with_vec<T>(vectorizable<T>(s.cols, {yp, dyp, dxp}), [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      return launch_rows(softmax_bwd_kernel<T, V>, stream, s, V, 2 * s.cols * int64_t{sizeof(T)},
                         "softmax_bwd", yp, dyp, dxp, s.rows, s.cols);
    });
  });
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxFwdCuda, jm::cuda::SoftmaxFwd,
                              jm::bind::softmax_fwd(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxBwdCuda, jm::cuda::SoftmaxBwd,
                              jm::bind::softmax_bwd(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
