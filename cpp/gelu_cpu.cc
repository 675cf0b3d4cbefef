// Fused scale -> bias -> GELU on the CPU: one pass over x; forward mode's y and tangent in one pass over x and tx; the
// backward's per-column parameter gradients summed with dx in the same pass (cpu_grad_sums.h).

#include <initializer_list>

#include "cpu_common.h"
#include "cpu_grad_sums.h"
#include "gelu_math.h"
#include "bindings.h"
#include "handlers.h"

namespace jm::cpu {
namespace {

struct Affine {
  ParamView scale, bias;
  float scale_value, bias_value;
};

// Rows [r0, r1) x columns [c0, c1) (parallel_tiles).
template <typename T>
void gelu_fwd_block(const T* x, T* y, Affine a, RowShape s, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  using R = row_t<T>;
  const int64_t w = c1 - c0;
  const ParamRows scale(a.scale, a.scale_value, s.cols, kScaleRow, w), bias(a.bias, a.bias_value, s.cols, kBiasRow, w);
  const RowScratch buf(kScratchA, row_buffer<T>(w));  // f16 rows: x, then y, as floats (cpu_common.h)
  for (int64_t r = r0; r < r1; ++r) {
    const float* sc = scale.at(r, c0);
    const float* bi = bias.at(r, c0);
    const int64_t o = r * s.cols + c0;
    const R* xr = in_row(x + o, w, buf.data());
    R* yr = out_row(y + o, buf.data());
    for (int64_t c = 0; c < w; ++c) yr[c] = from_float<R>(gelu(to_float(xr[c]) * sc[c] + bi[c]));  // vectorized
    finish_row(buf.data(), y + o, w);
  }
}

// One row of the forward mode's y and tangent (restrict: the loop vectorizes). Without a scale tangent the term
// x * tscale is left out, not formed as x * 0: at x = +-inf that is NaN, where the tangent is gelu'(u) * tx * scale.
template <bool kScaleTangent, typename R>
void jvp_row(const R* __restrict__ x, const R* __restrict__ tx, const float* __restrict__ sc,
             const float* __restrict__ bi, const float* __restrict__ tsc, const float* __restrict__ tbi,
             R* __restrict__ y, R* __restrict__ ty, int64_t w) {
  for (int64_t c = 0; c < w; ++c) {
    const float xv = to_float(x[c]), u = xv * sc[c] + bi[c];
    y[c] = from_float<R>(gelu(u));
    float du = to_float(tx[c]) * sc[c];
    if constexpr (kScaleTangent) du += xv * tsc[c];
    ty[c] = from_float<R>(gelu_grad(u) * (du + tbi[c]));
  }
}

// Forward mode: y = gelu(u) and its tangent gelu'(u) * (tx * scale + x * tscale + tbias) of rows [r0, r1) x columns
// [c0, c1), x and tx read once (an absent tangent bias is a row of 0; an absent tangent scale is left out). gelu and
// gelu_grad share their exponential (the same n and 2^-|n|, which the compiler computes once), and y has the forward's
// bits.
template <typename T>
void gelu_jvp_block(const T* x, const T* tx, T* y, T* ty, Affine a, Affine t, RowShape s, int64_t r0, int64_t r1,
                    int64_t c0, int64_t c1) {
  using R = row_t<T>;
  const int64_t w = c1 - c0;
  const ParamRows scale(a.scale, a.scale_value, s.cols, kScaleRow, w), bias(a.bias, a.bias_value, s.cols, kBiasRow, w);
  const ParamRows tscale(t.scale, 0.0f, s.cols, kTangentScaleRow, w), tbias(t.bias, 0.0f, s.cols, kTangentBiasRow, w);
  // f16 rows as floats (cpu_common.h): x, tx, and y and ty in buffers of their own (the loop's pointers are restrict).
  const RowScratch xbuf(kScratchA, row_buffer<T>(w)), txbuf(kScratchB, row_buffer<T>(w)),
      ybuf(kScratchC, row_buffer<T>(w)), tybuf(kScratchD, row_buffer<T>(w));
  auto rows = [&](auto scale_tangent) {  // the choice outside the row loop: short rows keep their inlined loop
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r * s.cols + c0;
      jvp_row<decltype(scale_tangent)::value>(in_row(x + o, w, xbuf.data()), in_row(tx + o, w, txbuf.data()),
                                              scale.at(r, c0), bias.at(r, c0), tscale.at(r, c0), tbias.at(r, c0),
                                              out_row(y + o, ybuf.data()), out_row(ty + o, tybuf.data()), w);
      finish_row(ybuf.data(), y + o, w);
      finish_row(tybuf.data(), ty + o, w);
    }
  };
  if (t.scale.data) {
    rows(std::true_type{});
  } else {
    rows(std::false_type{});
  }
}

// One row's g = dy * gelu'(u) and dx = g * scale, u = x * scale + bias (restrict: the loop vectorizes).
template <typename R>
void grad_row(const R* __restrict__ x, const R* __restrict__ dy, const float* __restrict__ sc,
              const float* __restrict__ bi, float* __restrict__ g, R* __restrict__ dx, int64_t w) {
  for (int64_t c = 0; c < w; ++c) {
    g[c] = to_float(dy[c]) * gelu_grad(to_float(x[c]) * sc[c] + bi[c]);
    dx[c] = from_float<R>(g[c] * sc[c]);
  }
}

// dx of rows [r0, r1) x columns [c0, c1), and the parameter gradients' sums over those rows and columns into their
// runs' rows (ra, rb; out == nullptr: not wanted), in row order.
template <typename T>
void gelu_bwd_block(const T* x, const T* dy, T* dx, Affine a, Runs ra, Runs rb, RowShape s, int64_t r0, int64_t r1,
                    int64_t c0, int64_t c1) {
  const int64_t w = c1 - c0;
  const ParamRows scale(a.scale, a.scale_value, s.cols, kScaleRow, w), bias(a.bias, a.bias_value, s.cols, kBiasRow, w);
  ColumnSums ds(ra, w), db(rb, w);
  const RowScratch grow(kScratchA, static_cast<size_t>(w));  // this row's dy * gelu'(u), for the sums' loops
  // f16 rows as floats (cpu_common.h): x, dy and dx (a buffer of its own: grad_row's pointers are restrict).
  const RowScratch xbuf(kScratchB, row_buffer<T>(w)), dybuf(kScratchC, row_buffer<T>(w)),
      dxbuf(kScratchD, row_buffer<T>(w));
  for (int64_t r = r0; r < r1; ++r) {
    const float* sc = scale.at(r, c0);
    const float* bi = bias.at(r, c0);
    const int64_t o = r * s.cols + c0;
    const auto* xr = in_row(x + o, w, xbuf.data());
    float* g = grow.data();
    grad_row(xr, in_row(dy + o, w, dybuf.data()), sc, bi, g, out_row(dx + o, dxbuf.data()), w);
    finish_row(dxbuf.data(), dx + o, w);
    if (ds.wanted()) ds.add(r, [&](int64_t c) { return g[c] * to_float(xr[c]); });
    if (db.wanted()) db.add(r, [&](int64_t c) { return g[c]; });
    ds.end_row(r);
    db.end_row(r);
  }
}

ffi::Error affine_views(const ffi::AnyBuffer& scale, const ffi::AnyBuffer& bias, float scale_value,
                        float bias_value, RowShape s, Affine* a) {
  a->scale_value = scale_value;
  a->bias_value = bias_value;
  if (auto err = param_view(scale, s, "scale", &a->scale); err.failure()) return err;
  return param_view(bias, s, "bias", &a->bias);
}

// Without parameter arrays GELU is one map over every element: x is then taken as one row, so that short rows (C = 1,
// 4, ...) run as column tiles of it rather than as a loop per row of a few elements (v96). The same bits either way.
RowShape elementwise_shape(RowShape s, std::initializer_list<ParamView> params) {
  for (const ParamView& p : params) {
    if (p.data) return s;
  }
  return s.size() == 0 ? s : RowShape{1, s.size()};
}

ffi::Error gelu_fwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                    ffi::Result<ffi::AnyBuffer> y, float scale_value, float bias_value) {
  RowShape s;
  Affine a;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  if (auto err = affine_views(scale, bias, scale_value, bias_value, s, &a); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    const RowShape shape = elementwise_shape(s, {a.scale, a.bias});
    parallel_tiles(pool, shape, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      gelu_fwd_block(xp, yp, a, shape, r0, r1, c0, c1);
    });
    return ffi::Error::Success();
  });
}

ffi::Error gelu_jvp(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                    ffi::AnyBuffer tx, ffi::AnyBuffer tscale, ffi::AnyBuffer tbias, ffi::Result<ffi::AnyBuffer> y,
                    ffi::Result<ffi::AnyBuffer> ty, float scale_value, float bias_value) {
  RowShape s;
  Affine a, t;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, tx, "tx"); err.failure()) return err;
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  if (auto err = check_same(x, *ty, "ty"); err.failure()) return err;
  if (auto err = affine_views(scale, bias, scale_value, bias_value, s, &a); err.failure()) return err;
  if (auto err = affine_views(tscale, tbias, 0.0f, 0.0f, s, &t); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const RowShape shape = elementwise_shape(s, {a.scale, a.bias, t.scale, t.bias});
    parallel_tiles(pool, shape, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      gelu_jvp_block(data_as<const T>(x), data_as<const T>(tx), data_as<T>(*y), data_as<T>(*ty), a, t, shape, r0, r1,
                     c0, c1);
    });
    return ffi::Error::Success();
  });
}

ffi::Error gelu_bwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                    ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                    ffi::Result<ffi::AnyBuffer> dbias,
                    ffi::Result<ffi::AnyBuffer> workspace,
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
    const T* xp = static_cast<const T*>(x.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx->untyped_data());
    const auto block = [&](Runs ra, Runs rb, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      gelu_bwd_block(xp, dyp, dxp, a, ra, rb, s, r0, r1, c0, c1);
    };
    if (s.rows == 0) {
      zero_grad(dsv, s.cols);
      zero_grad(dbv, s.cols);
    } else if (!dsv.data && !dbv.data) {
      const RowShape shape = elementwise_shape(s, {a.scale, a.bias});
      parallel_tiles(pool, shape, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
        gelu_bwd_block(xp, dyp, dxp, a, Runs{}, Runs{}, shape, r0, r1, c0, c1);
      });
    } else if (!sum_in_runs(pool, partials_view(*workspace, s, dsv, dbv), s, dsv, dbv, /*tiles_ok=*/true, block)) {
      parallel_for(pool, s.cols, piece_cols(s.rows), [&](int64_t c0, int64_t c1) {  // each piece over every row
        block(Runs::groups(dsv, s, c0), Runs::groups(dbv, s, c0), 0, s.rows, c0, c1);
      });
    }
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jm::cpu

namespace ffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluFwdCpu, jm::cpu::gelu_fwd, jm::bind::gelu_fwd(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluJvpCpu, jm::cpu::gelu_jvp, jm::bind::gelu_jvp(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluBwdCpu, jm::cpu::gelu_bwd, jm::bind::gelu_bwd(jm::cpu::cpu_binding()));
