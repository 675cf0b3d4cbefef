// Softmax on the CPU: three-pass row softmax, the exps within 2 ulp (host_math.h) and summed in blocks of float lanes
// into double (sum_in_lanes). Every algorithm name is served by this one kernel.
#include <cmath>
#include <limits>
#include <string>

#include "cpu_common.h"
#include "bindings.h"
#include "handlers.h"
#include "host_math.h"

namespace jm::cpu {
namespace {

// Rows [r0, r1). `row` holds the row's exps (and first, for 16-bit rows, the row as floats; for f16 last its results:
// cpu_common.h's rows as floats).
template <typename T>
void softmax_rows(const T* x, T* y, RowShape s, int64_t r0, int64_t r1) {
  using R = row_t<T>;
  const RowScratch row_buf(kScratchA, static_cast<size_t>(s.cols));
  float* const row = row_buf.data();
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = floats_of(x + r * s.cols, s.cols, row);
    bool nan = false;
    float m = max_of(xr, s.cols, &nan);
    if (nan) m = std::numeric_limits<float>::quiet_NaN();  // a NaN poisons its own row only
    for (int64_t c = 0; c < s.cols; ++c) row[c] = host::exp_nonpositive(xr[c] - m);  // vectorized
    const float inv = static_cast<float>(1.0 / sum_of(row, s.cols));
    R* yr = out_row(y + r * s.cols, row);
    for (int64_t c = 0; c < s.cols; ++c) yr[c] = from_float<R>(row[c] * inv);
    finish_row(row, y + r * s.cols, s.cols);
  }
}

template <typename T>
void softmax_bwd_rows(const T* y, const T* dy, T* dx, RowShape s, int64_t r0, int64_t r1) {
  using R = row_t<T>;
  const RowScratch ybuf(kScratchA, row_buffer<T>(s.cols)), dybuf(kScratchB, row_buffer<T>(s.cols));
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * s.cols;
    const R* yr = in_row(y + o, s.cols, ybuf.data());
    const R* dyr = in_row(dy + o, s.cols, dybuf.data());
    const float d = static_cast<float>(
        sum_in_lanes(s.cols, [&](int64_t c) { return to_float(yr[c]) * to_float(dyr[c]); }));
    R* dxr = out_row(dx + o, dybuf.data());
    for (int64_t c = 0; c < s.cols; ++c) dxr[c] = from_float<R>(to_float(yr[c]) * (to_float(dyr[c]) - d));
    finish_row(dybuf.data(), dx + o, s.cols);
  }
}

ffi::Error softmax_fwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, int64_t algorithm) {
  // Indices of jm.SOFTMAX_ALGORITHMS: 0 = auto, 1..7 = the seed's v1..v7 (cpp/softmax_ladder.cu on CUDA);
  // on the CPU all of them are this one kernel.
  constexpr int64_t kLastAlgorithm = 7;
  if (algorithm < 0 || algorithm > kLastAlgorithm) {
    return ffi::Error::InvalidArgument("softmax: unknown algorithm index " + std::to_string(algorithm) +
                                       " (0 = auto, 1..7 = the seed's v1..v7)");
  }
  RowShape s;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    parallel_for(pool, s.rows, piece_rows(s.cols), [&](int64_t r0, int64_t r1) { softmax_rows(xp, yp, s, r0, r1); });
    return ffi::Error::Success();
  });
}

ffi::Error softmax_bwd(ffi::ThreadPool pool, ffi::AnyBuffer y, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx) {
  RowShape s;
  if (auto err = row_shape(y, "y", &s); err.failure()) return err;
  if (auto err = check_same(y, dy, "dy"); err.failure()) return err;
  if (auto err = check_same(y, *dx, "dx"); err.failure()) return err;
  return dispatch_float(y.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* yp = static_cast<const T*>(y.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx->untyped_data());
    parallel_for(pool, s.rows, piece_rows(s.cols),
                 [&](int64_t r0, int64_t r1) { softmax_bwd_rows(yp, dyp, dxp, s, r0, r1); });
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jm::cpu

namespace ffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxFwdCpu, jm::cpu::softmax_fwd, jm::bind::softmax_fwd(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxBwdCpu, jm::cpu::softmax_bwd, jm::bind::softmax_bwd(jm::cpu::cpu_binding()));
