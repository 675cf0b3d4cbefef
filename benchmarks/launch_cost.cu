// What a launch of the softmax forward's long-row kernels costs before any row (RESULTS.md "The long rows' cost per
// launch", question (a)): the bulk-copy kernels of the default's plans — f32 C = 50257 (registers (8), k = 8), f32
// 131072 (registers (8), k = 16), bf16 131072 (one buffer, k = 4) — launched over no rows (every CTA starts, sets up
// its barriers, meets its cluster and exits), beside empty kernels of the same grid: plain, in clusters of k, and in
// clusters of k with the same dynamic shared memory. Each plan's grid is its resident clusters (launch_fwd_tma's
// persistent grid). Timed by CUDA events in a rotated order (inproc_ab.cuh), AB_SPIN_US (here 50 unless set) keeping
// the host's launch path out of the intervals; medians of kSamples.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/launch_cost.cu \
//        cpp/softmax_ladder.cu -o /tmp/launch_cost && /tmp/launch_cost
#include "softmax_ab_common.cuh"
#include "softmax_fwd.cu"

namespace {

namespace smx = jm::cuda::smx;

__global__ void empty_kernel() {}

// `kernel` in `ctas` CTAs of 256 threads, in clusters of k, with `smem` bytes of dynamic shared memory (opted in).
template <typename... P, typename... A>
void launch_clusters(void (*kernel)(P...), int ctas, int k, int smem, A... args) {
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = jm::cuda::cluster_config(dim3(static_cast<unsigned>(ctas)), 256, k, nullptr, &attr,
                                                          static_cast<size_t>(smem));
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

// One plan: Kernel (a softmax_fwd_tma_kernel) at cluster size k over rows of `cols` elements of T.
template <auto Kernel, typename T>
void add_plan(std::vector<inproc::Variant>& vs, const jm::cuda::DeviceInfo& dev, const char* name, int cols, int k,
              int64_t max_chunk) {
  const int64_t packs = (cols + jm::cuda::kVec<T> - 1) / jm::cuda::kVec<T>;
  const jm::cuda::TmaPlan p = jm::cuda::tma_plan<Kernel>(dev, packs, k, 1, max_chunk, 256);
  if (p.score == 0) {
    std::printf("| %s | no plan |\n", name);
    return;
  }
  const int ctas = p.active * k, smem = static_cast<int>(p.smem), chunk = static_cast<int>(p.chunk);
  const std::string tag = std::string(name) + " (" + std::to_string(ctas) + " CTAs, k = " + std::to_string(k) + ", " +
                          std::to_string(smem / 1024) + " KB)";
  vs.push_back({tag + ": empty kernel, no cluster", [ctas] { empty_kernel<<<ctas, 256>>>(); }, {}});
  vs.push_back({tag + ": empty kernel in clusters", [ctas, k] { launch_clusters(empty_kernel, ctas, k, 0); }, {}});
  vs.push_back({tag + ": empty kernel in clusters, the shared memory",
                [ctas, k, smem] { launch_clusters(empty_kernel, ctas, k, smem); }, {}});
  vs.push_back({tag + ": the softmax kernel over no rows", [ctas, k, smem, chunk, cols] {
                  launch_clusters(Kernel, ctas, k, smem, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                                  int64_t{0}, cols, chunk, 0, -1);
                },
                {}});
}

}  // namespace

int main() {
  setenv("AB_SPIN_US", "50", 0);
  jm::cuda::DeviceInfo dev;
  if (jm::cuda::device_info(&dev).failure()) return 1;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; launches over no rows, %d samples, AB_SPIN_US=%s\n\n| launch | µs (median) |\n|---|---|\n",
              prop.name, prop.multiProcessorCount, inproc::kSamples, std::getenv("AB_SPIN_US"));
  CK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dev.max_smem_optin));
  CK(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  std::vector<inproc::Variant> vs;
  add_plan<smx::softmax_fwd_tma_kernel<float, 1, 8, 256, true, true, true>, float>(vs, dev, "f32 50257, registers (8)",
                                                                                   50257, 8, 8 * 256);
  add_plan<smx::softmax_fwd_tma_kernel<float, 1, 8, 256, true, true, true>, float>(vs, dev, "f32 131072, registers (8)",
                                                                                   131072, 16, 8 * 256);
  add_plan<smx::softmax_fwd_tma_kernel<__nv_bfloat16, 1, 0, 256, true, true, false>, __nv_bfloat16>(
      vs, dev, "bf16 131072, one buffer", 131072, 4, INT_MAX);
  inproc::time_rotated(vs, inproc::kWarmup, inproc::kSamples);
  CK(cudaDeviceSynchronize());
  for (const inproc::Variant& v : vs) std::printf("| %s | %.1f |\n", v.name.c_str(), 1e3 * inproc::median(v.ms));
  return 0;
}
