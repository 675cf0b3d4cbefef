// GELU (tanh approximation) of an affine input u = x*scale + bias: CUDA kernels and XLA FFI handlers
// (JmGeluFwdCuda, JmGeluBwdCuda). scale/bias are per-column arrays (possibly grouped) or, when the array
// is absent, the scalar attributes scale_value/bias_value.
#include "cuda_common.cuh"
#include "gelu_math.h"  // jm::gelu, jm::gelu_grad: the math shared with the CPU kernels
#include "bindings.h"
#include "handlers.h"

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

// Batched-load budget (registers, see kBatch) where the loop body loads scale/bias too.
constexpr int kParamBatchRegs = 8;

// gelu_fwd: elementwise grid-stride loop over V-element packs (16-byte accesses when C % V == 0 and the
// buffers are aligned), batched loads; each pack's (row, column), for the parameters, is tracked
// incrementally.
template <typename T, int V>
__global__ void __launch_bounds__(kElemBlock)
    gelu_fwd_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, float scale_value,
                    float bias_value, T* __restrict__ y, int64_t rows, int64_t cols) {
  for_grid_packs<V, kParamBatchRegs>({x}, rows * cols / V, cols, [&](int64_t q, const RowColCursor& at, const auto& p) {
    float v[V], s[V], b[V];
    unpack(p[0], v);
    load_param<V>(param_row(scale, at.r, cols), at.c / V, scale_value, s);
    load_param<V>(param_row(bias, at.r, cols), at.c / V, bias_value, b);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = gelu(v[j] * s[j] + b[j]);
    store_pack<V>(y, q, v);
  });
}

// gelu_bwd without parameter gradients: the same elementwise loop, dx = dy * gelu'(u) * s.
template <typename T, int V>
__global__ void __launch_bounds__(kElemBlock)
    gelu_bwd_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, float scale_value,
                    float bias_value, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                    int64_t cols) {
  for_grid_packs<V, kParamBatchRegs>({x, dy}, rows * cols / V, cols, [&](int64_t q, const RowColCursor& at, const auto& p) {
    float v[V], g[V], s[V], b[V];
    unpack(p[0], v);
    unpack(p[1], g);
    load_param<V>(param_row(scale, at.r, cols), at.c / V, scale_value, s);
    load_param<V>(param_row(bias, at.r, cols), at.c / V, bias_value, b);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = g[j] * gelu_grad(v[j] * s[j] + b[j]) * s[j];
    store_pack<V>(dx, q, v);
  });
}

// gelu_bwd with parameter gradients runs in the column-sum kernel, which visits every element once:
// it writes dx and yields dscale += dy*gelu'(u)*x, dbias += dy*gelu'(u).
template <typename T>
struct GeluGradElem {
  const T* x;
  const T* dy;
  T* dx;
  ParamView scale;
  ParamView bias;
  float scale_value;
  float bias_value;
  int64_t cols;

  __device__ void operator()(int64_t r, int64_t c, float& dscale, float& dbias) const {
    const int64_t i = r * cols + c;
    const float* scale_row = param_row(scale, r, cols);
    const float* bias_row = param_row(bias, r, cols);
    const float s = scale_row != nullptr ? scale_row[c] : scale_value;
    const float b = bias_row != nullptr ? bias_row[c] : bias_value;
    const float xv = to_float(x[i]);
    const float t = to_float(dy[i]) * gelu_grad(xv * s + b);
    dx[i] = from_float<T>(t * s);
    dscale = t * xv;
    dbias = t;
  }
};

ffi::Error GeluFwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                   ffi::Result<ffi::AnyBuffer> y, float scale_value, float bias_value) {
  RowShape s;
  ParamView sv, bv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, *y, "y"), param_view(scale, s, "scale", &sv),
                              param_view(bias, s, "bias", &bv)});
      err.failure()) {
    return err;
  }
  if (s.size() == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    return with_vec<T>(vectorizable<T>(s.cols, {xp, yp, sv.data, bv.data}), [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      return launch(gelu_fwd_kernel<T, V>, elementwise_grid(dev, s.size() / V), dim3(kElemBlock), 0,
                    stream, "gelu_fwd", xp, sv, bv, scale_value, bias_value, yp, s.rows, s.cols);
    });
  });
}

ffi::Error GeluBwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                   ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                   ffi::Result<ffi::AnyBuffer> dbias, float scale_value, float bias_value) {
  RowShape s;
  ParamView sv, bv;
  GradView gs, gb;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, dy, "dy"), check_same(x, *dx, "dx"),
                              param_view(scale, s, "scale", &sv), param_view(bias, s, "bias", &bv),
                              grad_view(*dscale, s, "dscale", &gs), grad_view(*dbias, s, "dbias", &gb)});
      err.failure()) {
    return err;
  }
  if (s.rows == 0) {
    return first_error({zero_grad(stream, gs, s.cols, "gelu_bwd"), zero_grad(stream, gb, s.cols, "gelu_bwd")});
  }
  if (s.cols == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx->untyped_data());
    if (gs.data != nullptr || gb.data != nullptr) {
      const GeluGradElem<T> elem{xp, dyp, dxp, sv, bv, scale_value, bias_value, s.cols};
      return launch_column_sums(stream, elem, s.cols, gs, gb, "gelu_bwd");
    }
    return with_vec<T>(vectorizable<T>(s.cols, {xp, dyp, dxp, sv.data, bv.data}), [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      return launch(gelu_bwd_kernel<T, V>, elementwise_grid(dev, s.size() / V), dim3(kElemBlock), 0,
                    stream, "gelu_bwd", xp, sv, bv, scale_value, bias_value, dyp, dxp, s.rows, s.cols);
    });
  });
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluFwdCuda, jm::cuda::GeluFwd,
                              jm::bind::gelu_fwd(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluBwdCuda, jm::cuda::GeluBwd,
                              jm::bind::gelu_bwd(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()),
                              {ffi::Traits::kCmdBufferCompatible});
