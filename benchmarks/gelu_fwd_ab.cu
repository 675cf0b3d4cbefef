// The GELU forward's batch inside one process (issue 6; RESULTS.md "v29"; the method: inproc_ab.cuh). The bench reads
// our f32 forward at 0.98x XLA's fused chain (both near its copy); copy_ceiling.cu reads a full-grid copy at 4.2 TB/s
// with one 16-byte pack per thread, 4.05 with four. gelu.cu's forward loaded kBatch = 4 packs per thread (v3), a
// stride of the whole grid apart; since v29 (from this harness) 2 for f32 with parameter arrays, 1 with attributes.
// Variants of that kernel (its body, gelu.cu's gelu_fwd_kernel, with the batch a template argument): 4 packs (v3's;
// twice: the A/A pair), 2, 1, each on its full grid (elementwise_grid), beside a copy of 1 pack per thread and one of
// 4 with streaming hints. Per-feature scale and bias rows (ParamMode kRows) and scalar attributes (kScalars), f32 and
// bf16, rows = 2^26 / C. Every variant's output must equal the 4-pack one's bitwise (the same math per element), and
// that one is checked against float64 on sampled elements.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/gelu_fwd_ab.cu \
//        -o /tmp/gelu_fwd_ab && /tmp/gelu_fwd_ab
#include <cmath>
#include <cstring>

#include "inproc_ab.cuh"
#include "cuda_common.cuh"
#include "gelu_math.h"

namespace {

using jm::ParamView;
using jm::cuda::kElemBlock;
using jm::cuda::ParamMode;
using inproc::kElems;

template <typename T>
inline constexpr int kBlocksPerSm = sizeof(T) == 2 ? 3 : 4;  // gelu.cu's kFwdBlocksPerSm

// gelu.cu's gelu_fwd_kernel with its batch budget kRegs a template argument (16: 4 packs, v3's).
template <typename T, int V, ParamMode M, int kRegs>
__global__ void __launch_bounds__(kElemBlock, kBlocksPerSm<T>)
    gelu_fwd_batch(const T* __restrict__ x, ParamView scale, ParamView bias, float scale_value, float bias_value,
                   T* __restrict__ y, int64_t rows, int64_t cols) {
  jm::cuda::for_grid_packs<V, kRegs>({x}, rows * cols / V, cols,
                                     [&](int64_t q, const jm::cuda::RowColCursor& at, const auto& p) {
                                       float v[V], s[V], b[V];
                                       jm::cuda::unpack_fresh(p[0], v);
                                       jm::cuda::load_param_at<M>(scale, at, cols, scale_value, s);
                                       jm::cuda::load_param_at<M>(bias, at, cols, bias_value, b);
#pragma unroll
                                       for (int j = 0; j < V; ++j) v[j] = jm::gelu(v[j] * s[j] + b[j]);
                                       jm::cuda::store_pack<V>(y, q, v);
                                     });
}

template <typename T, ParamMode M, int kRegs>
void launch(const T* x, const float* s, const float* b, T* y, int64_t rows, int64_t cols) {
  constexpr int V = jm::cuda::kVec<T>;
  constexpr int B = jm::cuda::kBatch<T, V, 1, kRegs>;
  const int64_t packs = rows * cols / V;
  const unsigned grid = static_cast<unsigned>((packs + int64_t{kElemBlock} * B - 1) / (int64_t{kElemBlock} * B));
  const ParamView sv{M == ParamMode::kRows ? s : nullptr, rows}, bv{M == ParamMode::kRows ? b : nullptr, rows};
  gelu_fwd_batch<T, V, M, kRegs><<<grid, kElemBlock>>>(x, sv, bv, 1.5f, 0.25f, y, rows, cols);
}

template <typename T>
__global__ void fill(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(inproc::hash(static_cast<uint32_t>(i), seed) & 0xffffff) / 2097152.0f - 4.0f;
    x[i] = jm::cuda::from_float<T>(u);  // uniform in [-4, 4)
  }
}

template <typename T>
bool check(const T* x_d, const float* s_d, const float* b_d, const std::vector<T*>& ys, int64_t n, int64_t cols,
           bool rows_mode, std::string* why) {
  std::vector<T> x(n), y0(n), y(n);
  std::vector<float> s(cols), b(cols);
  CK(cudaMemcpy(x.data(), x_d, n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y0.data(), ys[0], n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(s.data(), s_d, cols * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), b_d, cols * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int64_t i = 0; i < n; i += 997) {
    const int64_t c = i % cols;
    const double u = static_cast<double>(inproc::to_f(x[i])) * (rows_mode ? s[c] : 1.5) + (rows_mode ? b[c] : 0.25);
    const double want = 0.5 * u * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (u + 0.044715 * u * u * u)));
    const double got = inproc::to_f(y0[i]);
    worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want) / (std::fabs(want) + 1.0) : 1e30);
  }
  int differ = 0;
  for (size_t k = 1; k < ys.size(); ++k) {
    CK(cudaMemcpy(y.data(), ys[k], n * sizeof(T), cudaMemcpyDeviceToHost));
    differ += std::memcmp(y.data(), y0.data(), n * sizeof(T)) != 0;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "default vs float64 %.1e; %d variants not bitwise equal", worst, differ);
  *why = buf;
  return worst < (sizeof(T) == 4 ? 1e-5 : 1.0 / 64) && differ == 0;
}

template <typename T, ParamMode M>
bool run(const char* title, int64_t cols) {
  const int64_t rows = kElems / cols, n = rows * cols;
  T* x;
  float *s, *b;
  std::vector<T*> ys(6);
  CK(cudaMalloc(&x, n * sizeof(T)));
  CK(cudaMalloc(&s, cols * 4));
  CK(cudaMalloc(&b, cols * 4));
  for (T*& y : ys) {
    CK(cudaMalloc(&y, n * sizeof(T)));
    CK(cudaMemset(y, 0xff, n * sizeof(T)));
  }
  fill<<<1024, 256>>>(x, n, 4242u);
  inproc::param_rows(s, b, cols);
  const int64_t bytes = n * int64_t{sizeof(T)};
  std::vector<inproc::Variant> vs;
  vs.push_back({"copy 1", [&] { inproc::copy<1, false>(x, ys[5], bytes); }, {}});
  vs.push_back({"copy 4s", [&] { inproc::copy<4, true>(x, ys[5], bytes); }, {}});
  vs.push_back({"4 packs", [&] { launch<T, M, 16>(x, s, b, ys[0], rows, cols); }, {}});
  vs.push_back({"4 packs again", [&] { launch<T, M, 16>(x, s, b, ys[1], rows, cols); }, {}});
  vs.push_back({"2 packs", [&] { launch<T, M, 8>(x, s, b, ys[2], rows, cols); }, {}});
  vs.push_back({"1 pack", [&] { launch<T, M, 4>(x, s, b, ys[3], rows, cols); }, {}});
  inproc::time_rotated(vs, inproc::kWarmup, inproc::kSamples);
  CK(cudaDeviceSynchronize());
  const auto gbs = [&](int i) { return 2.0 * bytes / inproc::median(vs[i].ms) / 1e6; };
  double r[4][3];
  for (int i = 0; i < 3; ++i) inproc::sample_ratio(vs[3 + i], vs[2], r[i]);
  std::string why;
  const bool ok = check<T>(x, s, b, {ys[0], ys[1], ys[2], ys[3]}, n, cols, M == ParamMode::kRows, &why);
  std::printf("| %s | %lld | %.0f / %.0f | %.0f (%.0f%%) | %.3f (%.3f, %.3f) | %.3f (%.3f, %.3f), %.0f%% | "
              "%.3f (%.3f, %.3f), %.0f%% | %s: %s |\n",
              title, static_cast<long long>(cols), gbs(0), gbs(1), gbs(2), 100 * gbs(2) / gbs(0), r[0][0], r[0][1],
              r[0][2], r[1][0], r[1][1], r[1][2], 100 * gbs(4) / gbs(0), r[2][0], r[2][1], r[2][2],
              100 * gbs(5) / gbs(0), ok ? "ok" : "FAILED", why.c_str());
  for (T* y : ys) CK(cudaFree(y));
  CK(cudaFree(x));
  CK(cudaFree(s));
  CK(cudaFree(b));
  return ok;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; %d samples, each variant once per sample in a rotated order\n\n", prop.name,
              prop.multiProcessorCount, inproc::kSamples);
  std::printf("| case | C | copy 1 / copy 4s GB/s | 4 packs GB/s (%% of copy 1) | A/A | 2 packs / 4 | 1 pack / 4 | "
              "check |\n|---|---|---|---|---|---|---|---|\n");
  bool ok = true;
  for (int64_t cols : {768, 4096}) {
    ok = run<float, ParamMode::kRows>("f32, scale / bias rows", cols) && ok;
    ok = run<__nv_bfloat16, ParamMode::kRows>("bf16, scale / bias rows", cols) && ok;
  }
  ok = run<float, ParamMode::kScalars>("f32, scalar attributes", 4096) && ok;
  ok = run<__nv_bfloat16, ParamMode::kScalars>("bf16, scalar attributes", 4096) && ok;
  std::printf("\n%s\n", ok ? "all outputs checked: ok" : "SOME OUTPUTS FAILED THEIR CHECK");
  return ok ? 0 : 1;
}
