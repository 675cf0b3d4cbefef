// What is the copy ceiling on this GPU? (issues 4, 5; RESULTS.md "v29".) The bench divides every figure by
// XLA's jitted copy (3.7-3.97 TB/s by process) and row_ceiling.cu's best kernel copy read 3.94 TB/s, yet the
// device notes saw a device-to-device copy through PyTorch move ~4.3 TB/s (4.3 GB buffers). Standalone (no JAX):
// the driver's cudaMemcpyAsync against kernel copies of several shapes and cache hints, a bulk-copy (TMA)
// copy, read-only and write-only streams, two buffer sizes, the output at several offsets from the input, and
// two ways of timing (one launch between events, or ten back to back). Each sample runs every case once in an
// order rotated per sample; medians of kSamples; every copy checked (output poisoned before each case).
//
//   nvcc -std=c++17 -O3 -arch=sm_90 -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp \
//        benchmarks/copy_ceiling.cu -o /tmp/copy_ceiling && /tmp/copy_ceiling
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda_common.cuh"
#include "inproc_ab.cuh"  // CK, hash, median, count_diff

namespace {

using jm::cuda::bulk_load;
using jm::cuda::fence_proxy_async_smem;
using jm::cuda::mbar_arrive_expect;
using jm::cuda::mbar_init;
using jm::cuda::mbar_wait;
using jm::cuda::smem_addr;

constexpr int kSamples = 15;
constexpr int kLoop = 10;  // launches between one event pair in the "loop" timing

__global__ void fill_random(uint32_t* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = inproc::hash(static_cast<uint32_t>(i), seed);
  }
}

enum class Hint { kPlain, kStream, kNoL1 };

template <Hint H>
__device__ __forceinline__ uint4 load(const uint4* p) {
  if constexpr (H == Hint::kStream) return __ldcs(p);
  if constexpr (H == Hint::kNoL1) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  }
  return *p;
}
template <Hint H>
__device__ __forceinline__ void store(uint4* p, uint4 v) {
  if constexpr (H == Hint::kStream) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// U packs per thread, a warp's u-th loads adjacent (pack t + u * blockDim); full grid (kGridStride false)
// or a grid-stride loop over such tiles.
template <int U, Hint H, bool kGridStride>
__global__ void copy_tiles(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t n4) {
  const int64_t tile = int64_t{blockDim.x} * U;
  const int64_t step = kGridStride ? int64_t{gridDim.x} * tile : n4;
  for (int64_t i = blockIdx.x * tile + threadIdx.x; i < n4; i += step) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * blockDim.x < n4) v[u] = load<H>(x + i + u * blockDim.x);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (i + u * blockDim.x < n4) store<H>(y + i + u * blockDim.x, v[u]);
    }
  }
}

// Each thread U adjacent packs (64 bytes at U = 4): every load instruction of a warp touches U times the lines.
template <int U>
__global__ void copy_runs(const uint4* __restrict__ x, uint4* __restrict__ y, int64_t n4) {
  const int64_t i = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * U;
  uint4 v[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (i + u < n4) v[u] = x[i + u];
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (i + u < n4) y[i + u] = v[u];
  }
}

__device__ __forceinline__ void bulk_store(void* dst, const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(src)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// A persistent grid of one-thread-issued bulk copies: chunks of kChunk bytes global -> shared -> global,
// two buffers per CTA (the next chunk's load is in flight while this one is stored).
constexpr uint32_t kChunk = 32768;
__global__ void copy_bulk(const char* __restrict__ x, char* __restrict__ y, int64_t chunks) {
  extern __shared__ __align__(128) char buf[];
  __shared__ uint64_t bar[2];
  if (threadIdx.x != 0) return;
  mbar_init(&bar[0]);
  mbar_init(&bar[1]);
  int64_t c = blockIdx.x;
  if (c < chunks) {
    mbar_arrive_expect(&bar[0], kChunk);
    bulk_load(buf, x + c * kChunk, kChunk, &bar[0]);
  }
  for (int k = 0; c < chunks; c += gridDim.x, ++k) {
    const int s = k & 1;
    const int64_t next = c + gridDim.x;
    if (next < chunks) {
      mbar_arrive_expect(&bar[s ^ 1], kChunk);
      bulk_load(buf + (s ^ 1) * kChunk, x + next * kChunk, kChunk, &bar[s ^ 1]);
    }
    mbar_wait(&bar[s], static_cast<uint32_t>(k >> 1) & 1u);
    bulk_store(y + c * kChunk, buf + s * kChunk, kChunk);  // waits until the buffer has been read
    fence_proxy_async_smem();
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Read-only: every pack summed (one store per thread keeps the loads); write-only: a constant stored.
template <int U>
__global__ void read_tiles(const uint4* __restrict__ x, uint32_t* __restrict__ sink, int64_t n4) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} * U + threadIdx.x;
  uint32_t s = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (i + u * blockDim.x < n4) {
      const uint4 v = __ldcs(x + i + u * blockDim.x);
      s ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  if (s == 0x9e3779b9u) sink[0] = s;  // almost never: the loads stay, the stores do not
}
template <int U>
__global__ void write_tiles(uint4* __restrict__ y, int64_t n4, uint32_t value) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} * U + threadIdx.x;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (i + u * blockDim.x < n4) __stcs(y + i + u * blockDim.x, make_uint4(value, value, value, value));
  }
}

struct Case {
  std::string name;
  double bytes;                   // moved per launch (read + write)
  std::function<void()> launch;
  const uint32_t* x = nullptr;    // copies: checked y == x over n words
  uint32_t* y = nullptr;
  int64_t n = 0;
  std::vector<float> single, loop;
};

void verify(Case& c) {
  if (c.y == nullptr) return;
  CK(cudaMemset(c.y, 0xff, c.n * 4));
  c.launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  unsigned long long* bad;
  CK(cudaMallocManaged(&bad, sizeof(*bad)));
  *bad = 0;
  inproc::count_diff<<<1024, 256>>>(c.x, c.y, c.n, bad);
  CK(cudaDeviceSynchronize());
  if (*bad) {
    std::printf("WRONG: %s: %llu of %lld words differ\n", c.name.c_str(), *bad, static_cast<long long>(c.n));
    std::exit(1);
  }
  CK(cudaFree(bad));
}

void sample(Case& c, cudaEvent_t e0, cudaEvent_t e1) {
  float t;
  CK(cudaEventRecord(e0));
  c.launch();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&t, e0, e1));
  c.single.push_back(t);
  CK(cudaEventRecord(e0));
  for (int i = 0; i < kLoop; ++i) c.launch();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaEventElapsedTime(&t, e0, e1));
  c.loop.push_back(t / kLoop);
  CK(cudaGetLastError());
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MB, memory bus %d bits\n\n", prop.name, sms, prop.l2CacheSize >> 20,
              prop.memoryBusWidth);
  const int64_t small = int64_t{1} << 28, large = int64_t{1} << 31;  // bytes per tensor: 256 MB, 2 GB
  const int64_t pool_bytes = 2 * large + (int64_t{64} << 20);
  char* pool;
  CK(cudaMalloc(&pool, pool_bytes));
  fill_random<<<4096, 256>>>(reinterpret_cast<uint32_t*>(pool), large / 4, 12345u);
  CK(cudaGetLastError());
  uint32_t* sink;
  CK(cudaMalloc(&sink, 64));
  CK(cudaFuncSetAttribute(copy_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, 2 * kChunk));

  std::vector<Case> cases;
  const auto add_copy = [&](const std::string& name, int64_t bytes, int64_t offset, auto&& kernel_launch) {
    const uint32_t* x = reinterpret_cast<const uint32_t*>(pool);
    uint32_t* y = reinterpret_cast<uint32_t*>(pool + large + offset);
    const int64_t n4 = bytes / 16;
    const auto go = [=] { kernel_launch(reinterpret_cast<const uint4*>(x), reinterpret_cast<uint4*>(y), n4); };
    Case c{name, 2.0 * bytes, go, x, y, bytes / 4};
    cases.push_back(std::move(c));
  };
  const auto grid = [](int64_t n4, int threads, int u) {
    return static_cast<unsigned>((n4 + threads * u - 1) / (threads * u));
  };
  for (const int64_t bytes : {small, large}) {
    const std::string mb = std::to_string(bytes >> 20) + " MB: ";
    add_copy(mb + "cudaMemcpyAsync", bytes, 0, [](const uint4* x, uint4* y, int64_t n4) {
      CK(cudaMemcpyAsync(y, x, n4 * 16, cudaMemcpyDeviceToDevice));
    });
    add_copy(mb + "tiles 256 x 4, plain", bytes, 0, [&](const uint4* x, uint4* y, int64_t n4) {
      copy_tiles<4, Hint::kPlain, false><<<grid(n4, 256, 4), 256>>>(x, y, n4);
    });
    add_copy(mb + "tiles 256 x 4, streaming", bytes, 0, [&](const uint4* x, uint4* y, int64_t n4) {
      copy_tiles<4, Hint::kStream, false><<<grid(n4, 256, 4), 256>>>(x, y, n4);
    });
    add_copy(mb + "grid-stride 8 x 256 / SM x 4, streaming", bytes, 0, [&](const uint4* x, uint4* y, int64_t n4) {
      copy_tiles<4, Hint::kStream, true><<<sms * 8, 256>>>(x, y, n4);
    });
    add_copy(mb + "bulk copy 32 KB x 2 buffers, 3 / SM", bytes, 0, [&](const uint4* x, uint4* y, int64_t n4) {
      copy_bulk<<<sms * 3, 32, 2 * kChunk>>>(reinterpret_cast<const char*>(x), reinterpret_cast<char*>(y),
                                             n4 * 16 / kChunk);
    });
  }
  // 256 MB only: shapes and hints, the output's offset from the input.
  add_copy("256 MB: tiles 256 x 1, plain", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_tiles<1, Hint::kPlain, false><<<grid(n4, 256, 1), 256>>>(x, y, n4);
  });
  add_copy("256 MB: tiles 256 x 2, plain", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_tiles<2, Hint::kPlain, false><<<grid(n4, 256, 2), 256>>>(x, y, n4);
  });
  add_copy("256 MB: tiles 256 x 8, plain", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_tiles<8, Hint::kPlain, false><<<grid(n4, 256, 8), 256>>>(x, y, n4);
  });
  add_copy("256 MB: tiles 128 x 4, plain", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_tiles<4, Hint::kPlain, false><<<grid(n4, 128, 4), 128>>>(x, y, n4);
  });
  add_copy("256 MB: tiles 1024 x 4, plain", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_tiles<4, Hint::kPlain, false><<<grid(n4, 1024, 4), 1024>>>(x, y, n4);
  });
  add_copy("256 MB: tiles 256 x 4, nc no-L1 L2::256B", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_tiles<4, Hint::kNoL1, false><<<grid(n4, 256, 4), 256>>>(x, y, n4);
  });
  add_copy("256 MB: runs of 4 packs per thread", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_runs<4><<<grid(n4, 256, 4), 256>>>(x, y, n4);
  });
  add_copy("256 MB: grid-stride 4 x 256 / SM x 4, plain", small, 0, [&](const uint4* x, uint4* y, int64_t n4) {
    copy_tiles<4, Hint::kPlain, true><<<sms * 4, 256>>>(x, y, n4);
  });
  for (const int64_t off : {int64_t{1} << 10, int64_t{64} << 10, int64_t{1} << 20, int64_t{5} << 19,
                            int64_t{33} << 20}) {
    const std::string name = "256 MB: tiles 256 x 4 plain, y + " + std::to_string(off >> 10) + " KB";
    add_copy(name, small, off, [&](const uint4* x, uint4* y, int64_t n4) {
      copy_tiles<4, Hint::kPlain, false><<<grid(n4, 256, 4), 256>>>(x, y, n4);
    });
    add_copy("256 MB: cudaMemcpyAsync, y + " + std::to_string(off >> 10) + " KB", small, off,
             [](const uint4* x, uint4* y, int64_t n4) {
               CK(cudaMemcpyAsync(y, x, n4 * 16, cudaMemcpyDeviceToDevice));
             });
  }
  for (const int64_t bytes : {small, large}) {
    const std::string mb = std::to_string(bytes >> 20) + " MB: ";
    const uint4* x = reinterpret_cast<const uint4*>(pool);
    uint4* y = reinterpret_cast<uint4*>(pool + large);
    const int64_t n4 = bytes / 16;
    cases.push_back(Case{mb + "read only (tiles 256 x 4)", double(bytes),
                         [=] { read_tiles<4><<<grid(n4, 256, 4), 256>>>(x, sink, n4); }});
    cases.push_back(Case{mb + "write only (tiles 256 x 4)", double(bytes),
                         [=] { write_tiles<4><<<grid(n4, 256, 4), 256>>>(y, n4, 7u); }});
    cases.push_back(Case{mb + "cudaMemsetAsync", double(bytes), [=] { CK(cudaMemsetAsync(y, 7, bytes)); }});
  }

  for (Case& c : cases) verify(c);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (Case& c : cases) {  // warm-up
    c.launch();
    c.launch();
  }
  CK(cudaDeviceSynchronize());
  for (int s = 0; s < kSamples; ++s) {
    for (size_t k = 0; k < cases.size(); ++k) sample(cases[(k + s) % cases.size()], e0, e1);
  }
  std::printf("| case | single launch: ms | GB/s | %d back to back: ms | GB/s | spread of the loop (max/min) |\n",
              kLoop);
  std::printf("|---|---|---|---|---|---|\n");
  for (Case& c : cases) {
    const double s = inproc::median(c.single), l = inproc::median(c.loop);
    const auto [lo, hi] = std::minmax_element(c.loop.begin(), c.loop.end());
    std::printf("| %s | %.4f | %.0f | %.4f | %.0f | %.3f |\n", c.name.c_str(), s, c.bytes / (s * 1e6), l,
                c.bytes / (l * 1e6), *hi / *lo);
  }
  CK(cudaFree(pool));
  CK(cudaFree(sink));
  return 0;
}
