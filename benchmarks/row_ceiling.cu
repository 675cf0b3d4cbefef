// The structure ceiling of the softmax forward's long rows (issue 4; RESULTS.md "v18"): how fast can a
// kernel move a tensor through HBM when it holds each row on chip between its read and its write, with
// the softmax's arithmetic taken out? Standalone (no JAX), f32, 2^26 elements, CUDA events, median of
// REPS launches after warm-up, every output checked against its input (poisoned before each case).
//
//   copy        grid-stride 16-byte copy, and one 4-pack tile per thread on a full grid: the ceiling.
//   regs NT x NP  one row per CTA of NT threads, NP packs per thread in registers: load, a block sum (so
//               every load has landed), store (v9's block rows: f32 16384 = 512 x 8, 32768 = 1024 x 8).
//   tma k       the one-buffer bulk-copy cluster (v5's f32 kernel): a persistent grid of k-CTA clusters
//               of 256 threads, each CTA's share of the row bulk-copied into shared memory, one pass over
//               it (a block sum), a cluster barrier ("sync") or none ("free": the CTAs do not wait for
//               each other), then the share written by 16-byte streaming stores ("st") or by one bulk
//               store from shared memory ("bulk").
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp \
//        benchmarks/row_ceiling.cu -o /tmp/row_ceiling && /tmp/row_ceiling
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "inproc_ab.cuh"  // CK, hash, count_diff
#include "softmax_rows.cuh"

namespace {

using jm::cuda::block_reduce_sum;
using jm::cuda::bulk_load;
using jm::cuda::fence_proxy_async_smem;
using jm::cuda::mbar_arrive_expect;
using jm::cuda::mbar_init;
using jm::cuda::mbar_wait;
using jm::cuda::smem_addr;

constexpr int kReps = 30;
constexpr int64_t kElems = int64_t{1} << 26;

// f = 1 + 0 * t: 1 for a finite sum, but the compiler must wait for t (IEEE: 0 * inf is NaN).
__device__ __forceinline__ float4 scaled(float4 v, float f) { return {v.x * f, v.y * f, v.z * f, v.w * f}; }
__device__ __forceinline__ float sum4(float4 v) { return v.x + v.y + v.z + v.w; }

__global__ void fill(float* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = static_cast<float>(inproc::hash(static_cast<uint32_t>(i), seed) & 0xffffff) / 16777216.0f - 0.5f;
  }
}

template <bool kGridStride>
__global__ void copy_kernel(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
  constexpr int U = 4;
  const int64_t step = kGridStride ? int64_t{gridDim.x} * blockDim.x * U : 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} * U + threadIdx.x; i < n4; i += step) {
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * blockDim.x < n4) v[u] = __ldcs(x + i + u * blockDim.x);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * blockDim.x < n4) __stcs(y + i + u * blockDim.x, v[u]);
    }
    if (!kGridStride) break;
  }
}

template <int NT, int NP>
__global__ void __launch_bounds__(NT, 1024 / NT) regs_rows(const float4* __restrict__ x, float4* __restrict__ y,
                                                         int packs) {
  const float4* xr = x + blockIdx.x * int64_t{packs};
  float4* yr = y + blockIdx.x * int64_t{packs};
  float4 v[NP];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    if (threadIdx.x + k * NT < packs) v[k] = __ldcs(xr + threadIdx.x + k * NT);
  }
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    if (threadIdx.x + k * NT < packs) s += sum4(v[k]);
  }
  const float f = 1.0f + 0.0f * block_reduce_sum(s);
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    if (threadIdx.x + k * NT < packs) __stcs(yr + threadIdx.x + k * NT, scaled(v[k], f));
  }
}

__device__ __forceinline__ void bulk_store(float4* dst, const float4* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(src)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void bulk_store_read_done() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
__device__ __forceinline__ void bulk_store_done() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// One buffer per CTA (v5-s1's structure): the copy of the next row is issued after this row's stores.
template <bool kSync, bool kBulkStore>
__global__ void __launch_bounds__(256, 1) tma_rows(const float4* __restrict__ x, float4* __restrict__ y,
                                                   int64_t rows, int packs, int chunk) {
  namespace cg = cooperative_groups;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float4* buf = reinterpret_cast<float4*>(smem_raw);
  __shared__ uint64_t bar;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int k = static_cast<int>(cluster.num_blocks());
  const int lo = rank * chunk;
  const int n = max(0, min(chunk, packs - lo));
  if (threadIdx.x == 0) mbar_init(&bar);
  __syncthreads();
  uint32_t parity = 0;
  for (int64_t row = blockIdx.x / k; row < rows; row += gridDim.x / k, parity ^= 1) {
    __syncthreads();  // every thread is done with the buffer
    if (threadIdx.x == 0) {
      if constexpr (kBulkStore) bulk_store_read_done();
      fence_proxy_async_smem();
      mbar_arrive_expect(&bar, static_cast<uint32_t>(n) * 16);
      if (n > 0) bulk_load(buf, x + row * packs + lo, static_cast<uint32_t>(n) * 16, &bar);
    }
    mbar_wait(&bar, parity);
    float s = 0.0f;
    for (int q = threadIdx.x; q < n; q += blockDim.x) s += sum4(buf[q]);
    const float f = 1.0f + 0.0f * block_reduce_sum(s);
    if constexpr (kSync) cluster.sync();
    float4* yr = y + row * packs + lo;
    if constexpr (kBulkStore) {
      for (int q = threadIdx.x; q < n; q += blockDim.x) buf[q] = scaled(buf[q], f);
      fence_proxy_async_smem();
      __syncthreads();
      if (threadIdx.x == 0 && n > 0) bulk_store(yr, buf, static_cast<uint32_t>(n) * 16);
    } else {
      for (int q = threadIdx.x; q < n; q += blockDim.x) __stcs(yr + q, scaled(buf[q], f));
    }
  }
  if constexpr (kBulkStore) {
    if (threadIdx.x == 0) bulk_store_done();
  }
  cluster.sync();
}

struct Bufs {
  float* x;
  float* y;
  int64_t n;
};

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times launch() (REPS launches after 3 warm-ups), checks y == x; the GB/s of one read and one write.
float run_case(const std::string& name, const Bufs& b, const std::function<void()>& launch, float copy_gbs) {
  CK(cudaMemset(b.y, 0xff, b.n * 4));  // NaN
  for (int i = 0; i < 3; ++i) launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  unsigned long long* bad;
  CK(cudaMallocManaged(&bad, sizeof(*bad)));
  *bad = 0;
  inproc::count_diff<<<1024, 256>>>(b.x, b.y, b.n, bad);
  CK(cudaDeviceSynchronize());
  const unsigned long long nbad = *bad;
  CK(cudaFree(bad));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < kReps; ++r) {
    CK(cudaEventRecord(e0));
    launch();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CK(cudaGetLastError());
  const float t = median(ms);
  const float gbs = 2.0f * b.n * 4 / (t * 1e6f);
  std::printf("| %-34s | %8.4f | %7.0f | %5.1f%% | %s |\n", name.c_str(), t, gbs,
              copy_gbs > 0 ? 100.0f * gbs / copy_gbs : 100.0f, nbad ? "WRONG" : "ok");
  if (nbad) std::printf("  %llu of %lld elements differ\n", nbad, static_cast<long long>(b.n));
  return gbs;
}

template <bool kSync, bool kBulkStore>
void tma_case(const Bufs& b, int64_t rows, int packs, int k, float copy_gbs, int sms) {
  auto kernel = tma_rows<kSync, kBulkStore>;
  const int chunk = (packs + k - 1) / k;
  const int smem = ((chunk * 16 + 1023) / 1024) * 1024;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = k;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(256);
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  cfg.gridDim = dim3(k * sms * 8);
  int active = 0;
  CK(cudaOccupancyMaxActiveClusters(&active, kernel, &cfg));
  const int clusters = static_cast<int>(std::min<int64_t>(rows, active));
  cfg.gridDim = dim3(clusters * k);
  const float4* x = reinterpret_cast<const float4*>(b.x);
  float4* y = reinterpret_cast<float4*>(b.y);
  char name[96];
  std::snprintf(name, sizeof name, "tma k=%d %s %s (%d KB, %.1f/SM)", k, kSync ? "sync" : "free",
                kBulkStore ? "bulk" : "st", smem / 1024, double(clusters) * k / sms);
  run_case(name, b, [&] { CK(cudaLaunchKernelEx(&cfg, kernel, x, y, rows, packs, chunk)); }, copy_gbs);
}

template <int NT, int NP>
void regs_case(const Bufs& b, int64_t rows, int packs, float copy_gbs) {
  const float4* x = reinterpret_cast<const float4*>(b.x);
  float4* y = reinterpret_cast<float4*>(b.y);
  char name[64];
  std::snprintf(name, sizeof name, "regs %d x %d", NT, NP);
  run_case(name, b, [&] { regs_rows<NT, NP><<<static_cast<unsigned>(rows), NT>>>(x, y, packs); }, copy_gbs);
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MB\n\n", prop.name, sms, prop.l2CacheSize >> 20);
  Bufs b{nullptr, nullptr, kElems};
  CK(cudaMalloc(&b.x, kElems * 4));
  CK(cudaMalloc(&b.y, kElems * 4));
  fill<<<1024, 256>>>(b.x, kElems, 12345u);
  CK(cudaGetLastError());
  const int64_t n4 = kElems / 4;
  const float4* x4 = reinterpret_cast<const float4*>(b.x);
  float4* y4 = reinterpret_cast<float4*>(b.y);
  std::printf("| case | ms | GB/s | of copy | check |\n|---|---|---|---|---|\n");
  float copy = 0;
  for (int per_sm : {4, 8}) {
    char name[64];
    std::snprintf(name, sizeof name, "copy grid-stride (%d x 256 / SM)", per_sm);
    copy = std::max(copy, run_case(name, b, [&] { copy_kernel<true><<<sms * per_sm, 256>>>(x4, y4, n4); }, 0));
  }
  copy = std::max(copy, run_case("copy full grid (4 packs / thread)", b, [&] {
    copy_kernel<false><<<static_cast<unsigned>((n4 + 1023) / 1024), 256>>>(x4, y4, n4);
  }, 0));
  std::printf("| copy (best of the three) | | %7.0f | 100%% | |\n", copy);
  // Rows of C columns over (nearly) 2^26 elements; C a multiple of 4 (50260 stands for 50257).
  for (int cols : {16384, 32768, 50260, 131072}) {
    const int packs = cols / 4;
    const int64_t rows = kElems / cols;
    Bufs r{b.x, b.y, rows * cols};
    std::printf("| **C = %d, %lld rows** | | | | |\n", cols, static_cast<long long>(rows));
    if (cols == 16384) regs_case<512, 8>(r, rows, packs, copy);
    if (cols == 32768) regs_case<1024, 8>(r, rows, packs, copy);
    const int k0 = cols == 16384 ? 1 : cols == 32768 ? 2 : cols == 50260 ? 4 : 8;
    for (int k : {k0 / 2, k0, k0 * 2}) {
      if (k < 1 || k > 8) continue;
      tma_case<true, false>(r, rows, packs, k, copy, sms);
      tma_case<false, false>(r, rows, packs, k, copy, sms);
      tma_case<true, true>(r, rows, packs, k, copy, sms);
    }
  }
  CK(cudaFree(b.x));
  CK(cudaFree(b.y));
  return 0;
}
