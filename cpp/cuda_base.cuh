// The base of the CUDA helpers (cuda_common.cuh includes them all): the XLA FFI headers, element types, error
// checks, device properties, kernel launches and their grids, the A/B switches' environment variables.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

// The XLA FFI headers trip two EDG front-end warnings under nvcc (#940: no return after an exhaustive
// switch, #2473: always_inline on a non-inline function) and, with -Wall -Wextra, host-compiler
// ones; silence them for those headers only.
#pragma nv_diag_suppress 940
#pragma nv_diag_suppress 2473
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wreturn-type"
#endif
#include "ffi_common.h"
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#pragma nv_diag_default 940
#pragma nv_diag_default 2473

namespace jm::cuda {

namespace ffi = xla::ffi;

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- Element types ------------------------------------------------------------------------------

template <ffi::DataType D>
struct ElemOf;
template <>
struct ElemOf<ffi::DataType::F32> {
  using type = float;
};
template <>
struct ElemOf<ffi::DataType::BF16> {
  using type = __nv_bfloat16;
};
template <>
struct ElemOf<ffi::DataType::F16> {
  using type = __half;
};

// The CUDA element type of a dispatch_float tag: `using T = elem_t<decltype(tag)>;`.
template <typename Tag>
using elem_t = typename ElemOf<Tag::value>::type;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

// float -> T with round-to-nearest-even.
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// ---- Errors, device properties, launches -----------------------------------------------------------------

// Environment variable `name`, "" when unset: the kernels' A/B switches, each read once per process.
inline std::string env_value(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The value that `choices` pairs with environment variable `name`'s value, `otherwise` when it is unset or
// names none of them (the A/B switches' parsing; each caller keeps the result in a function-local static).
template <typename E>
E env_choice(const char* name, std::initializer_list<std::pair<std::string_view, E>> choices, E otherwise) {
  const std::string v = env_value(name);
  for (const auto& [key, value] : choices) {
    if (v == key) return value;
  }
  return otherwise;
}

// The start of every CUDA handler's FFI binding: the stream context; each op's buffers and attributes
// follow from cpp/bindings.h (returned as a prvalue: the builder is never copied or moved).
inline auto cuda_binding() { return ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>(); }

inline ffi::Error check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ffi::Error::Success();
  return ffi::Error::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

// The error of the last kernel launch, if any.
inline ffi::Error check_launch(const char* what) { return check_cuda(cudaGetLastError(), what); }

// The first failure among checks evaluated in order (braced lists evaluate left to right).
inline ffi::Error first_error(std::initializer_list<ffi::Error> errors) {
  for (const ffi::Error& err : errors) {
    if (err.failure()) return err;
  }
  return ffi::Error::Success();
}

struct DeviceInfo {
  int device = 0;          // the current device's index (cudaGetDevice)
  int sm_count = 0;
  int max_smem_optin = 0;  // bytes of shared memory a block may use after opting in
  int cc_major = 0;        // compute capability (9: Hopper, thread-block clusters)
  int l2_bytes = 0;        // L2 cache size
};

// Properties of the current device, queried once per device (host-side only, no stream work).
inline ffi::Error device_info(DeviceInfo* out) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> sm_counts[kMaxDevices];
  static std::atomic<int> smem_sizes[kMaxDevices];
  static std::atomic<int> cc_majors[kMaxDevices];
  static std::atomic<int> l2_sizes[kMaxDevices];
  int dev = 0;
  if (auto err = check_cuda(cudaGetDevice(&dev), "cudaGetDevice"); err.failure()) return err;
  out->device = dev;
  const bool cacheable = dev >= 0 && dev < kMaxDevices;
  if (cacheable) {
    out->sm_count = sm_counts[dev].load(std::memory_order_relaxed);
    out->max_smem_optin = smem_sizes[dev].load(std::memory_order_relaxed);
    out->cc_major = cc_majors[dev].load(std::memory_order_relaxed);
    out->l2_bytes = l2_sizes[dev].load(std::memory_order_relaxed);
    if (out->sm_count > 0 && out->max_smem_optin > 0 && out->cc_major > 0) return ffi::Error::Success();
  }
  if (auto err = first_error(
          {check_cuda(cudaDeviceGetAttribute(&out->sm_count, cudaDevAttrMultiProcessorCount, dev),
                      "cudaDeviceGetAttribute(MultiProcessorCount)"),
           check_cuda(cudaDeviceGetAttribute(&out->max_smem_optin,
                                             cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                      "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)"),
           check_cuda(cudaDeviceGetAttribute(&out->cc_major, cudaDevAttrComputeCapabilityMajor, dev),
                      "cudaDeviceGetAttribute(ComputeCapabilityMajor)"),
           check_cuda(cudaDeviceGetAttribute(&out->l2_bytes, cudaDevAttrL2CacheSize, dev),
                      "cudaDeviceGetAttribute(L2CacheSize)")});
      err.failure()) {
    return err;
  }
  if (cacheable) {
    sm_counts[dev].store(out->sm_count, std::memory_order_relaxed);
    smem_sizes[dev].store(out->max_smem_optin, std::memory_order_relaxed);
    cc_majors[dev].store(out->cc_major, std::memory_order_relaxed);
    l2_sizes[dev].store(out->l2_bytes, std::memory_order_relaxed);
  }
  return ffi::Error::Success();
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) and checks the launch. Static plus dynamic
// shared memory above 48 KiB needs an opt-in; our kernels' static part is under 1 KiB.
template <typename... P, typename... A>
ffi::Error launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                  const char* what, A... args) {
  if (smem > 47 * 1024) {
    if (auto err = check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(smem)),
                              what);
        err.failure()) {
      return err;
    }
  }
  kernel<<<grid, block, smem, stream>>>(args...);
  return check_launch(what);
}

// The grid of a row kernel whose CTAs loop over row groups. kPersistent: at most the CTAs resident at
// once (no partial last wave). kFull: one CTA per row group, so a CTA that finishes its rows frees its
// slot for a fresh one whose loads start at once, while the others still drain their stores. Measured
// on the H200 (RESULTS.md, "v6", "v7"), full / persistent for the register kernels (softmax forward
// C <= 8192 / 16384 and backward C <= 8192, the norms' forward): 1.02-1.13 in f32, median 1.02-1.05 in
// bf16; they take it by default, the cluster, stream and norm backward kernels stay persistent.
// JAX_MEMOPS_GRID=persistent|full (read once per process; A/B benchmarks and tests) overrides the default of every
// kernel launched through grid_for or grid_mode (the norm backward's CTAs own workspace rows: not those); since v69
// the softmax's cluster kernels (softmax_launch.cuh cluster_grid) and its L2 two-pass rows too.
enum class Grid { kPersistent, kFull };
inline Grid grid_mode(Grid preferred) {
  static const std::optional<Grid> forced = env_choice<std::optional<Grid>>(
      "JAX_MEMOPS_GRID", {{"full", Grid::kFull}, {"persistent", Grid::kPersistent}}, std::nullopt);
  return forced.value_or(preferred);
}
inline int64_t grid_for(int64_t groups, int64_t resident, Grid preferred) {
  constexpr int64_t kMaxGrid = 0x7fffffff;  // the row loops take any rows beyond
  const int64_t want = grid_mode(preferred) == Grid::kFull ? groups : std::min(groups, resident);
  return std::max<int64_t>(1, std::min(want, kMaxGrid));
}

// Blocks of `block` threads (with `smem` dynamic shared memory) of `kernel` that the whole GPU holds at
// once: the grid of a persistent kernel (no partial last wave). Host-side query, no stream work.
template <typename... P>
ffi::Error resident_blocks(void (*kernel)(P...), int block, size_t smem, const char* what, int64_t* out) {
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  int per_sm = 0;
  if (auto err = check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, smem), what);
      err.failure()) {
    return err;
  }
  *out = int64_t{std::max(per_sm, 1)} * dev.sm_count;
  return ffi::Error::Success();
}

}  // namespace jm::cuda
