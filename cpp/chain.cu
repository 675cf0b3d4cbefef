// The fusion experiment's unfused pieces (issue 6): y = x * value, y = x + value and y = gelu(x), each
// its own kernel behind its own FFI target (JmScaleCuda, JmBiasCuda, JmGeluOnlyCuda). Chained as three
// custom calls they move 6 tensors where the fused scale_bias_gelu moves 2 — the seeds' 2.94x. Beside them the
// bench's device copy (JmCopyCuda): y = x by the driver's device-to-device copy.
#include "bindings.h"
#include "cuda_common.cuh"
#include "gelu_math.h"
#include "handlers.h"

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

struct Scale {
  float value;
  __device__ float operator()(float v) const { return v * value; }
};
struct Bias {
  float value;
  __device__ float operator()(float v) const { return v + value; }
};
struct Gelu {
  float unused;
  __device__ float operator()(float v) const { return gelu(v); }
};

// y = f(x) over the flat tensor: grid-stride over V-element packs (16-byte when n % V == 0).
template <typename T, int V, class F>
__global__ void __launch_bounds__(kElemBlock)
    map_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, F f) {
  for_grid_packs<V>({x}, n / V, n, [&](int64_t q, const RowColCursor&, const auto& p) {
    float v[V];
    unpack(p[0], v);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = f(v[j]);
    store_pack<V>(y, q, v);
  });
}

template <class F>
ffi::Error map(cudaStream_t stream, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float value,
               const char* what) {
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  const int64_t n = static_cast<int64_t>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    return with_vec<T>(vectorizable<T>(n, {xp, yp}), [&](auto vec) {
      constexpr int V = decltype(vec)::value;
      return launch(map_kernel<T, V, F>, elementwise_grid(dev, n / V, kBatch<T, V, 1, 0>), dim3(kElemBlock), 0,
                    stream, what, xp, yp, n, F{value});
    });
  });
}

ffi::Error ScaleOp(cudaStream_t s, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float value) {
  return map<Scale>(s, x, y, value, "scale");
}
ffi::Error BiasOp(cudaStream_t s, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float value) {
  return map<Bias>(s, x, y, value, "bias");
}
ffi::Error GeluOp(cudaStream_t s, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float value) {
  return map<Gelu>(s, x, y, value, "gelu");
}

// The device's copy, the bench's second ceiling (RESULTS.md "v29"): on the H200 the driver's copy reads 4.17-4.20 TB/s
// at 256 MB timed on the device, as a full-grid kernel of one 16-byte pack per thread does.
ffi::Error CopyOp(cudaStream_t s, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, float) {
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  if (x.size_bytes() == 0) return ffi::Error::Success();
  return check_cuda(cudaMemcpyAsync(y->untyped_data(), x.untyped_data(), x.size_bytes(), cudaMemcpyDeviceToDevice, s),
                    "copy: cudaMemcpyAsync");
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmScaleCuda, jm::cuda::ScaleOp,
                              jm::bind::elementwise(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmBiasCuda, jm::cuda::BiasOp,
                              jm::bind::elementwise(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluOnlyCuda, jm::cuda::GeluOp,
                              jm::bind::elementwise(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmCopyCuda, jm::cuda::CopyOp,
                              jm::bind::elementwise(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
