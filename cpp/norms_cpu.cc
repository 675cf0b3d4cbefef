// LayerNorm and RMSNorm on the CPU: exact two-pass statistics in double over each row, one template for
// both norms (kRms drops the mean and the bias).
#include <cmath>
#include <vector>

#include "cpu_common.h"
#include "bindings.h"
#include "handlers.h"

namespace jm::cpu {
namespace {

// LayerNorm statistics are taken of d = x - x[row, 0] (exact for nearby values), so a large mean with a
// tiny variance loses nothing to the rounding of the mean; the saved "mean" is mean(d) and every kernel,
// forward and backward, CPU and CUDA, forms xhat = (x - x[row, 0] - mean) * rstd.
template <typename T, bool kRms>
float row_pivot(const T* xr, int64_t cols) {
  return kRms || cols == 0 ? 0.0f : to_float(xr[0]);
}

template <typename T, bool kRms>
void norm_fwd_rows(const T* x, ParamView scale, ParamView bias, T* y, float* mean, float* rstd,
                   float epsilon, RowShape s) {
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.cols;
    const float pivot = row_pivot<T, kRms>(xr, s.cols);
    double mu = 0.0;
    if (!kRms) {
      for (int64_t c = 0; c < s.cols; ++c) mu += to_float(xr[c]) - pivot;
      mu /= double(s.cols);
    }
    double ss = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      const double d = double(to_float(xr[c]) - pivot) - mu;
      ss += d * d;
    }
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(ss / double(s.cols) + double(epsilon)));
    if (!kRms) mean[r] = m;
    rstd[r] = rs;
    for (int64_t c = 0; c < s.cols; ++c) {
      const float xhat = (to_float(xr[c]) - pivot - m) * rs;
      const float v = xhat * param_at(scale, r, c, s.cols, 1.0f) + param_at(bias, r, c, s.cols, 0.0f);
      y[r * s.cols + c] = from_float<T>(v);
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale; the mean(g) term only for LayerNorm.
template <typename T, bool kRms>
void norm_bwd_rows(const T* x, ParamView scale, const float* mean, const float* rstd, const T* dy,
                   T* dx, GradView dscale, GradView dbias, RowShape s) {
  std::vector<double> dscale_acc(dscale.data ? dscale.groups * s.cols : 0, 0.0);
  std::vector<double> dbias_acc(dbias.data ? dbias.groups * s.cols : 0, 0.0);
  std::vector<float> xhat(static_cast<size_t>(s.cols)), g(static_cast<size_t>(s.cols));
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t o = r * s.cols;
    const float pivot = row_pivot<T, kRms>(x + o, s.cols), m = kRms ? 0.0f : mean[r], rs = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < s.cols; ++c) {
      xhat[c] = (to_float(x[o + c]) - pivot - m) * rs;
      const float d = to_float(dy[o + c]);
      g[c] = d * param_at(scale, r, c, s.cols, 1.0f);
      sum_g += g[c];
      sum_gx += double(g[c]) * xhat[c];
      if (dscale.data) dscale_acc[(r / dscale.rows_per_group) * s.cols + c] += double(d) * xhat[c];
      if (dbias.data) dbias_acc[(r / dbias.rows_per_group) * s.cols + c] += d;
    }
    const float mg = kRms ? 0.0f : static_cast<float>(sum_g / double(s.cols));
    const float mgx = static_cast<float>(sum_gx / double(s.cols));
    for (int64_t c = 0; c < s.cols; ++c) dx[o + c] = from_float<T>(rs * (g[c] - mg - xhat[c] * mgx));
  }
  for (size_t i = 0; i < dscale_acc.size(); ++i) dscale.data[i] = static_cast<float>(dscale_acc[i]);
  for (size_t i = 0; i < dbias_acc.size(); ++i) dbias.data[i] = static_cast<float>(dbias_acc[i]);
}

template <bool kRms>
ffi::Error norm_fwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, const ffi::AnyBuffer* bias,
                    ffi::AnyBuffer y, const ffi::AnyBuffer* mean, ffi::AnyBuffer rstd, float epsilon) {
  RowShape s;
  ParamView sv, bv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, y, "y"); err.failure()) return err;
  if (auto err = param_view(scale, s, "scale", &sv); err.failure()) return err;
  if (bias) {
    if (auto err = param_view(*bias, s, "bias", &bv); err.failure()) return err;
  }
  if (auto err = check_stats(rstd, s, "rstd"); err.failure()) return err;
  if (mean) {
    if (auto err = check_stats(*mean, s, "mean"); err.failure()) return err;
  }
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    norm_fwd_rows<T, kRms>(static_cast<const T*>(x.untyped_data()), sv, bv,
                           static_cast<T*>(y.untyped_data()),
                           mean ? static_cast<float*>(mean->untyped_data()) : nullptr,
                           static_cast<float*>(rstd.untyped_data()), epsilon, s);
    return ffi::Error::Success();
  });
}

template <bool kRms>
ffi::Error norm_bwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, const ffi::AnyBuffer* mean,
                    ffi::AnyBuffer rstd, ffi::AnyBuffer dy, ffi::AnyBuffer dx, ffi::AnyBuffer dscale,
                    const ffi::AnyBuffer* dbias) {
  RowShape s;
  ParamView sv;
  GradView dsv, dbv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, dy, "dy"); err.failure()) return err;
  if (auto err = check_same(x, dx, "dx"); err.failure()) return err;
  if (auto err = param_view(scale, s, "scale", &sv); err.failure()) return err;
  if (auto err = check_stats(rstd, s, "rstd"); err.failure()) return err;
  if (mean) {
    if (auto err = check_stats(*mean, s, "mean"); err.failure()) return err;
  }
  if (auto err = grad_view(dscale, s, "dscale", &dsv); err.failure()) return err;
  if (dbias) {
    if (auto err = grad_view(*dbias, s, "dbias", &dbv); err.failure()) return err;
  }
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    norm_bwd_rows<T, kRms>(static_cast<const T*>(x.untyped_data()), sv,
                           mean ? static_cast<const float*>(mean->untyped_data()) : nullptr,
                           static_cast<const float*>(rstd.untyped_data()),
                           static_cast<const T*>(dy.untyped_data()), static_cast<T*>(dx.untyped_data()),
                           dsv, dbv, s);
    return ffi::Error::Success();
  });
}

ffi::Error layer_norm_fwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                          ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                          ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  return norm_fwd<false>(x, scale, &bias, *y, &*mean, *rstd, epsilon);
}

ffi::Error rms_norm_fwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  return norm_fwd<true>(x, scale, nullptr, *y, nullptr, *rstd, epsilon);
}

// The backward handlers take the CUDA kernels' partials workspace (handlers.h) to keep one signature;
// the CPU accumulates its parameter gradients in double in one pass and leaves the workspace untouched.
ffi::Error layer_norm_bwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer mean,
                          ffi::AnyBuffer rstd, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                          ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> dbias,
                          ffi::Result<ffi::AnyBuffer> /*workspace: see the note above*/) {
  return norm_bwd<false>(x, scale, &mean, rstd, dy, *dx, *dscale, &*dbias);
}

ffi::Error rms_norm_bwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer rstd, ffi::AnyBuffer dy,
                        ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                        ffi::Result<ffi::AnyBuffer> /*workspace*/) {
  return norm_bwd<true>(x, scale, nullptr, rstd, dy, *dx, *dscale, nullptr);
}

}  // namespace
}  // namespace jm::cpu

namespace ffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormFwdCpu, jm::cpu::layer_norm_fwd, jm::bind::layer_norm_fwd(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormBwdCpu, jm::cpu::layer_norm_bwd, jm::bind::layer_norm_bwd(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormFwdCpu, jm::cpu::rms_norm_fwd, jm::bind::rms_norm_fwd(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormBwdCpu, jm::cpu::rms_norm_bwd, jm::bind::rms_norm_bwd(ffi::Ffi::Bind()));
