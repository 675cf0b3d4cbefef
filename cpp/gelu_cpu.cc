// Fused scale -> bias -> GELU on the CPU: one pass over x; per-column parameter gradients summed in
// double over each row group.
#include <vector>

#include "cpu_common.h"
#include "gelu_math.h"
#include "bindings.h"
#include "handlers.h"

namespace jm::cpu {
namespace {

struct Affine {
  ParamView scale, bias;
  float scale_value, bias_value;
};

template <typename T>
void gelu_fwd_rows(const T* x, T* y, Affine a, RowShape s) {
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const int64_t i = r * s.cols + c;
      const float u = to_float(x[i]) * param_at(a.scale, r, c, s.cols, a.scale_value) +
                      param_at(a.bias, r, c, s.cols, a.bias_value);
      y[i] = from_float<T>(gelu(u));
    }
  }
}

template <typename T>
void gelu_bwd_rows(const T* x, const T* dy, T* dx, Affine a, GradView dscale, GradView dbias,
                   RowShape s) {
  std::vector<double> ds(dscale.data ? dscale.groups * s.cols : 0, 0.0);
  std::vector<double> db(dbias.data ? dbias.groups * s.cols : 0, 0.0);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const int64_t i = r * s.cols + c;
      const float xv = to_float(x[i]);
      const float sc = param_at(a.scale, r, c, s.cols, a.scale_value);
      const float g = to_float(dy[i]) * gelu_grad(xv * sc + param_at(a.bias, r, c, s.cols, a.bias_value));
      dx[i] = from_float<T>(g * sc);
      if (dscale.data) ds[(r / dscale.rows_per_group) * s.cols + c] += double(g) * xv;
      if (dbias.data) db[(r / dbias.rows_per_group) * s.cols + c] += g;
    }
  }
  for (size_t i = 0; i < ds.size(); ++i) dscale.data[i] = static_cast<float>(ds[i]);
  for (size_t i = 0; i < db.size(); ++i) dbias.data[i] = static_cast<float>(db[i]);
}

ffi::Error affine_views(const ffi::AnyBuffer& scale, const ffi::AnyBuffer& bias, float scale_value,
                        float bias_value, RowShape s, Affine* a) {
  a->scale_value = scale_value;
  a->bias_value = bias_value;
  if (auto err = param_view(scale, s, "scale", &a->scale); err.failure()) return err;
  return param_view(bias, s, "bias", &a->bias);
}

ffi::Error gelu_fwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                    ffi::Result<ffi::AnyBuffer> y, float scale_value, float bias_value) {
  RowShape s;
  Affine a;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  if (auto err = affine_views(scale, bias, scale_value, bias_value, s, &a); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    gelu_fwd_rows(static_cast<const T*>(x.untyped_data()), static_cast<T*>(y->untyped_data()), a, s);
    return ffi::Error::Success();
  });
}

ffi::Error gelu_bwd(ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias, ffi::AnyBuffer dy,
                    ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                    ffi::Result<ffi::AnyBuffer> dbias,
                    ffi::Result<ffi::AnyBuffer> /*workspace: CUDA only, left untouched here*/,
                    float scale_value, float bias_value) {
  RowShape s;
  Affine a;
  GradView dsv, dbv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, dy, "dy"); err.failure()) return err;
  if (auto err = check_same(x, *dx, "dx"); err.failure()) return err;
  if (auto err = affine_views(scale, bias, scale_value, bias_value, s, &a); err.failure()) return err;
  if (auto err = grad_view(*dscale, s, "dscale", &dsv); err.failure()) return err;
  if (auto err = grad_view(*dbias, s, "dbias", &dbv); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    gelu_bwd_rows(static_cast<const T*>(x.untyped_data()), static_cast<const T*>(dy.untyped_data()),
                  static_cast<T*>(dx->untyped_data()), a, dsv, dbv, s);
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jm::cpu

namespace ffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluFwdCpu, jm::cpu::gelu_fwd, jm::bind::gelu_fwd(ffi::Ffi::Bind()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluBwdCpu, jm::cpu::gelu_bwd, jm::bind::gelu_bwd(ffi::Ffi::Bind()));
