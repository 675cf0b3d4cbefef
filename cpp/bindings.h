// The FFI signature of every custom call, written once and shared by the CPU and CUDA handlers, so the
// two platforms cannot drift apart (the table in handlers.h documents the same). Each function extends
// a binding — ffi::Ffi::Bind() on the CPU, jm::cuda::cuda_binding() (cuda_base.cuh) on CUDA — with
// the op's buffers (in order) and attributes.
#pragma once

#include <utility>

#include "xla/ffi/api/ffi.h"

namespace jm::bind {

namespace ffi = xla::ffi;

// b.Arg<AnyBuffer>() N times (N >= 1). Builders are passed as rvalue references: their move constructor
// is private, and each step's result is a prvalue, so nothing is ever copied or moved.
template <int N, class B>
auto args(B&& b) {
  if constexpr (N == 1) {
    return std::move(b).template Arg<ffi::AnyBuffer>();
  } else {
    return args<N - 1>(std::move(b).template Arg<ffi::AnyBuffer>());
  }
}

// b.Ret<AnyBuffer>() N times (N >= 1).
template <int N, class B>
auto rets(B&& b) {
  if constexpr (N == 1) {
    return std::move(b).template Ret<ffi::AnyBuffer>();
  } else {
    return rets<N - 1>(std::move(b).template Ret<ffi::AnyBuffer>());
  }
}

// x -> y; algorithm
template <class B>
auto softmax_fwd(B&& b) {
  return rets<1>(args<1>(std::move(b))).template Attr<int64_t>("algorithm");
}
// y, dy -> dx
template <class B>
auto softmax_bwd(B&& b) {
  return rets<1>(args<2>(std::move(b)));
}
// x, scale, bias -> y, mean, rstd; epsilon
template <class B>
auto layer_norm_fwd(B&& b) {
  return rets<3>(args<3>(std::move(b))).template Attr<float>("epsilon");
}
// x, scale, bias, tx, tscale, tbias -> y, ty; epsilon
template <class B>
auto layer_norm_jvp(B&& b) {
  return rets<2>(args<6>(std::move(b))).template Attr<float>("epsilon");
}
// x, scale, mean, rstd, dy -> dx, dscale, dbias, workspace
template <class B>
auto layer_norm_bwd(B&& b) {
  return rets<4>(args<5>(std::move(b)));
}
// x, scale -> y, rstd; epsilon
template <class B>
auto rms_norm_fwd(B&& b) {
  return rets<2>(args<2>(std::move(b))).template Attr<float>("epsilon");
}
// x, scale, tx, tscale -> y, ty; epsilon
template <class B>
auto rms_norm_jvp(B&& b) {
  return rets<2>(args<4>(std::move(b))).template Attr<float>("epsilon");
}
// x, scale, rstd, dy -> dx, dscale, workspace
template <class B>
auto rms_norm_bwd(B&& b) {
  return rets<3>(args<4>(std::move(b)));
}
// x, scale, bias -> y; scale_value, bias_value
template <class B>
auto gelu_fwd(B&& b) {
  return rets<1>(args<3>(std::move(b))).template Attr<float>("scale_value").template Attr<float>("bias_value");
}
// x, scale, bias, tx, tscale, tbias -> y, ty; scale_value, bias_value
template <class B>
auto gelu_jvp(B&& b) {
  return rets<2>(args<6>(std::move(b))).template Attr<float>("scale_value").template Attr<float>("bias_value");
}
// x, scale, bias, dy -> dx, dscale, dbias, workspace; scale_value, bias_value
template <class B>
auto gelu_bwd(B&& b) {
  return rets<4>(args<4>(std::move(b))).template Attr<float>("scale_value").template Attr<float>("bias_value");
}

// x -> y; value (the fusion experiment's unfused pieces: scale, bias, gelu; gelu ignores value)
template <class B>
auto elementwise(B&& b) {
  return rets<1>(args<1>(std::move(b))).template Attr<float>("value");
}

}  // namespace jm::bind
