// The fusion experiment's unfused pieces on the CPU: y = x * value, y = x + value, y = gelu(x); the bench's copy.
#include <cstring>

#include "bindings.h"
#include "cpu_common.h"
#include "gelu_math.h"
#include "handlers.h"

namespace jm::cpu {
namespace {

template <class F>
ffi::Error map(ffi::ThreadPool& pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, F f) {
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  const int64_t n = static_cast<int64_t>(x.element_count());
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    parallel_for(pool, n, kPieceElems, [&](int64_t i0, int64_t i1) {
      using R = row_t<T>;
      const RowScratch buf(kScratchA, row_buffer<T>(i1 - i0));  // f16 pieces as floats (cpu_common.h)
      const R* xr = in_row(xp + i0, i1 - i0, buf.data());
      R* yr = out_row(yp + i0, buf.data());
      for (int64_t i = 0; i < i1 - i0; ++i) yr[i] = from_float<R>(f(to_float(xr[i])));
      finish_row(buf.data(), yp + i0, i1 - i0);
    });
    return ffi::Error::Success();
  });
}

ffi::Error scale_op(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float value) {
  return map(pool, x, y, [value](float v) { return v * value; });
}
ffi::Error bias_op(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float value) {
  return map(pool, x, y, [value](float v) { return v + value; });
}
ffi::Error gelu_op(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float) {
  return map(pool, x, y, [](float v) { return gelu(v); });
}
ffi::Error copy_op(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float) {
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  const auto* src = static_cast<const char*>(x.untyped_data());
  auto* dst = static_cast<char*>(y->untyped_data());
  parallel_for(pool, static_cast<int64_t>(x.size_bytes()), kPieceElems * 4,
               [&](int64_t i0, int64_t i1) { std::memcpy(dst + i0, src + i0, static_cast<size_t>(i1 - i0)); });
  return ffi::Error::Success();
}

}  // namespace
}  // namespace jm::cpu

namespace ffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmScaleCpu, jm::cpu::scale_op, jm::bind::elementwise(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmBiasCpu, jm::cpu::bias_op, jm::bind::elementwise(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluOnlyCpu, jm::cpu::gelu_op, jm::bind::elementwise(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmCopyCpu, jm::cpu::copy_op, jm::bind::elementwise(jm::cpu::cpu_binding()));
