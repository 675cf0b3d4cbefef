// Shared pieces of the in-process A/B harnesses (norm_fwd_ab.cu, softmax_fwd_ab.cu; RESULTS.md "v23"): the
// bench's A/B runs one process per version, and processes differ by up to ~10% at these 70-130 µs kernels, which
// hides a kernel's few percent. Here each sample launches every variant once, in an order rotated per sample,
// timed by CUDA events; medians after warm-up.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace inproc {

// The environment's integer `name`, clamped to [lo, hi]; `fallback` where it is unset.
inline int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  return std::clamp(v != nullptr ? std::atoi(v) : fallback, lo, hi);
}

constexpr int kSamples = 40;                    // timed samples per variant
constexpr int kWarmup = 5;                      // untimed rounds first
// Elements per tensor: 2^26 as the bench (4x L2 even in bf16), or 2^AB_ELEMS_LOG2 (20..30): how a kernel's share of the
// copy moves with the tensor's size tells a cost per launch (ramp, tail) from a cost per byte.
inline const int64_t kElems = int64_t{1} << env_int("AB_ELEMS_LOG2", 26, 20, 30);

// A host value as float (f32 or bf16), for the float64 references.
template <typename T>
float to_f(T v) {
  if constexpr (sizeof(T) == 4) {
    return v;
  } else {
    return __bfloat162float(v);
  }
}

inline void check(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "line %d: %s: %s\n", line, what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define CK(call) inproc::check((call), #call, __LINE__)

__host__ __device__ inline uint32_t hash(uint32_t i, uint32_t seed) {
  uint32_t h = i * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return h;
}

// The harnesses' parameter rows of `cols` columns, copied to scale and bias on the device: a scale in [0.5, 1.5] and
// a bias in [-0.5, 0.5], both varying by column. Returns them as the host holds them (for the references).
inline std::pair<std::vector<float>, std::vector<float>> param_rows(float* scale, float* bias, int64_t cols) {
  std::vector<float> sc(cols), bi(cols);
  for (int64_t c = 0; c < cols; ++c) {
    sc[c] = 0.5f + static_cast<float>((c * 37) % 101) / 100.0f;
    bi[c] = static_cast<float>((c * 53) % 41) / 40.0f - 0.5f;
  }
  CK(cudaMemcpy(scale, sc.data(), cols * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bias, bi.data(), cols * 4, cudaMemcpyHostToDevice));
  return {sc, bi};
}

// How many of n elements differ (a NaN counts as different: outputs are poisoned with NaN before a run).
template <typename T>
__global__ void count_diff(const T* x, const T* y, int64_t n, unsigned long long* bad) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if (!(x[i] == y[i])) atomicAdd(bad, 1ull);
  }
}

// A full-grid copy of n16 16-byte words, U per thread (streaming hints, or plain loads and stores).
template <int U, bool kStream>
__global__ void copy_kernel(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t n16) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} * U + threadIdx.x;
  uint4 v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (i + u * blockDim.x < n16) v[u] = kStream ? __ldcs(x + i + u * blockDim.x) : x[i + u * blockDim.x];
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (i + u * blockDim.x >= n16) continue;
    if (kStream) {
      __stcs(y + i + u * blockDim.x, v[u]);
    } else {
      y[i + u * blockDim.x] = v[u];
    }
  }
}

template <int U, bool kStream>
void copy(const void* x, void* y, int64_t bytes) {
  const int64_t n16 = bytes / 16;
  copy_kernel<U, kStream><<<static_cast<unsigned>((n16 + 256 * U - 1) / (256 * U)), 256>>>(
      static_cast<const uint4*>(x), static_cast<uint4*>(y), n16);
}

// Spins for `ns` nanoseconds of the device's global timer (one thread).
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

// AB_SPIN_US=N (0..1000, default 0): before each timed launch, a kernel that keeps the device busy for N µs, so that the
// host has enqueued the start event, the launch and the end event before the device reaches them and the interval holds
// the kernel alone. Without it the device, idle after the previous sample's synchronization, runs the start event at once
// and then waits for the launch: the interval also holds the host's launch path (longer for the library's handlers, which
// plan and launch clusters through cudaLaunchKernelEx, than for the copies' <<<>>>). The bench's device timing (CUPTI's
// kernel spans) counts no such gap.
inline unsigned long long spin_ns() {
  static const unsigned long long ns = 1000ull * static_cast<unsigned>(env_int("AB_SPIN_US", 0, 0, 1000));
  return ns;
}

// AB_BURST=N (1..64, default 1): each sample times N launches of the variant back to back between its two events, per
// launch: the stream's throughput, gaps between kernels counted, where a launch may overlap the previous one's tail
// (programmatic dependent launch: RESULTS.md "v82", refuted). With AB_SPIN_US long enough for the host to enqueue all N.
inline int burst() {
  static const int n = env_int("AB_BURST", 1, 1, 64);
  return n;
}

struct Variant {
  std::string name;
  std::function<void()> launch;
  std::vector<float> ms;
};

// Every variant once per sample, the order rotated by one each sample; ms of the samples after `warmup`.
inline void time_rotated(std::vector<Variant>& vs, int warmup, int samples) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (Variant& v : vs) v.ms.clear();
  const size_t n = vs.size();
  for (int s = 0; s < warmup + samples; ++s) {
    for (size_t j = 0; j < n; ++j) {
      Variant& v = vs[(j + s) % n];
      if (spin_ns() > 0) spin_kernel<<<1, 1>>>(spin_ns());
      CK(cudaEventRecord(e0));
      for (int b = 0; b < burst(); ++b) v.launch();
      CK(cudaGetLastError());
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (s >= warmup) v.ms.push_back(ms / burst());
    }
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

inline double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The per-sample ratio a / b (b's time over a's: > 1 where a is faster): median, first and third quartiles.
inline void sample_ratio(const Variant& a, const Variant& b, double out[3]) {
  std::vector<float> r;
  for (size_t s = 0; s < a.ms.size(); ++s) r.push_back(b.ms[s] / a.ms[s]);
  std::sort(r.begin(), r.end());
  out[0] = r[r.size() / 2];
  out[1] = r[r.size() / 4];
  out[2] = r[3 * r.size() / 4];
}

}  // namespace inproc
