// An A/B of the norms' forward inside one process (RESULTS.md "v23"; the method: inproc_ab.cuh). An A/A pair
// (the default twice) measures the noise that is left.
//
//   copy      a full-grid 16-byte copy of x into y (4 words per thread, streaming hints; not the best copy: XLA's
//             copy of the same bytes read up to 6% faster in another process, RESULTS.md "v23").
//   v21       the default before v23 (norms.cu's rule): f32 norm_fwd_half.cuh's 4 packs; 16-bit norm_rows.cuh's
//             8 packs, LayerNorm team rows on norm_fwd_half.cuh's 6-pack kernel where v10 takes them; twice (v21,
//             v21b: the A/A pair).
//   lean      norm_fwd_lean.cuh's rows in v21's geometry and packs (v23's default for bf16 LayerNorm; bf16
//             RMSNorm and f32 measured, not adopted).
//
// Every variant's output is checked: y against a float64 reference on sampled rows (relative to the row's
// scale), mean / rstd against v21's, outputs poisoned (NaN bytes) before the first launch.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/norm_fwd_ab.cu \
//        -o /tmp/norm_fwd_ab && /tmp/norm_fwd_ab [ln-bf16 rms-bf16 ln-f32 rms-f32]   (default: all four)
#include <cmath>

#include "inproc_ab.cuh"
#include "norm_fwd_half.cuh"
#include "norm_fwd_lean.cuh"

namespace {

using jm::cuda::kRowPacks;
using jm::cuda::kRowPacksTeam6;
using jm::cuda::kTeamBlock;
using jm::cuda::plan_norm_rows;
using jm::cuda::RowsPlan;

using inproc::kElems;
using inproc::kSamples;
using inproc::kWarmup;
constexpr float kEps = 1e-5f;

// x: a per-row offset (up to ±4) plus uniform noise in [-1, 1): rows whose mean is not zero.
template <typename T>
__global__ void fill_x(T* x, int64_t n, int cols, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint32_t row_hash = inproc::hash(static_cast<uint32_t>(i / cols), seed ^ 0x9e37u);
    const float row_off = static_cast<float>(row_hash & 0xff) / 32.0f - 4;
    const float u = static_cast<float>(inproc::hash(static_cast<uint32_t>(i), seed) & 0xffffff) / 8388608.0f - 1.0f;
    x[i] = jm::cuda::from_float<T>(row_off + u);
  }
}

template <typename T>
struct Bufs {
  T* x;
  float *scale, *bias;
  int64_t rows;
  int cols;
};

template <typename T>
struct Out {
  T* y;
  float *mean, *rstd;
};

unsigned grid_of(int64_t groups) { return static_cast<unsigned>(groups); }

template <typename T, bool kRms, bool kBlockRow, int N>
void half_rows(const Bufs<T>& b, const Out<T>& o, const RowsPlan& p) {
  const jm::ParamView sc{b.scale, b.rows}, bi{kRms ? nullptr : b.bias, b.rows};
  jm::cuda::norm_fwd_half_kernel<T, kRms, kBlockRow, N>
      <<<grid_of((b.rows + p.rows_per_block - 1) / p.rows_per_block), p.block>>>(b.x, sc, bi, o.y, o.mean, o.rstd,
                                                                                  b.rows, b.cols, kEps, p.tpr);
}

// v21's rule (norms.cu before v23), the kernels and geometry it launches.
template <typename T, bool kRms>
void launch_v21(const Bufs<T>& b, const Out<T>& o) {
  if constexpr (sizeof(T) == 4) {
    const RowsPlan p = plan_norm_rows<T, jm::cuda::kRowPacksHalf>(b.cols);
    if (p.block_rows) return half_rows<T, kRms, true, jm::cuda::kRowPacksHalf>(b, o, p);
    return half_rows<T, kRms, false, jm::cuda::kRowPacksHalf>(b, o, p);
  } else {
    const RowsPlan plan = plan_norm_rows<T>(b.cols);
    const jm::ParamView sc{b.scale, b.rows}, bi{kRms ? nullptr : b.bias, b.rows};
    if (!kRms && !plan.block_rows) {
      const RowsPlan six = plan_norm_rows<T, kRowPacksTeam6>(b.cols);
      if (six.ok && six.tpr == plan.tpr) return half_rows<T, kRms, false, kRowPacksTeam6>(b, o, six);
    }
    const unsigned grid = grid_of((b.rows + plan.rows_per_block - 1) / plan.rows_per_block);
    if (plan.block_rows) {
      jm::cuda::norm_fwd_rows_kernel<T, kRms, true><<<grid, plan.block>>>(b.x, sc, bi, o.y, o.mean, o.rstd, b.rows,
                                                                           b.cols, kEps, plan.tpr);
    } else {
      jm::cuda::norm_fwd_rows_kernel<T, kRms, false><<<grid, plan.block>>>(b.x, sc, bi, o.y, o.mean, o.rstd, b.rows,
                                                                            b.cols, kEps, plan.tpr);
    }
  }
}

template <typename T, bool kRms, bool kBlockRow, int N>
void lean_rows(const Bufs<T>& b, const Out<T>& o, const RowsPlan& p) {
  jm::cuda::norm_fwd_lean_kernel<T, kRms, kBlockRow, N>
      <<<grid_of((b.rows + p.rows_per_block - 1) / p.rows_per_block), p.block>>>(
          b.x, b.scale, kRms ? nullptr : b.bias, o.y, o.mean, o.rstd, b.rows, b.cols, 1.0f / static_cast<float>(b.cols),
          kEps, p.tpr);
}

// The lean rows in v21's geometry: f32 4 packs; 16-bit 8, LayerNorm team rows 6 where v10 takes them (bf16
// LayerNorm: v23's default, RMSNorm: v24's, norms.cu). The kernel's A/B options measured here (RESULTS.md "v24",
// "v25") are on branches v25-merge and v25-pivot.
template <typename T, bool kRms>
void launch_lean(const Bufs<T>& b, const Out<T>& o) {
  constexpr int N = sizeof(T) == 4 ? jm::cuda::kRowPacksHalf : kRowPacks<T>;
  const RowsPlan plan = plan_norm_rows<T, N>(b.cols);
  if (plan.block_rows) return lean_rows<T, kRms, true, N>(b, o, plan);
  if constexpr (!kRms && sizeof(T) == 2) {
    const RowsPlan six = plan_norm_rows<T, kRowPacksTeam6>(b.cols);
    if (six.ok && six.tpr == plan.tpr) return lean_rows<T, kRms, false, kRowPacksTeam6>(b, o, six);
  }
  lean_rows<T, kRms, false, N>(b, o, plan);
}

// y of sampled rows against float64 (error relative to the row's largest |y|; bf16 rounds at ~2^-8), rstd (and
// LayerNorm's mean) against the reference variant's (the same f32 statistics up to summation order).
template <typename T, bool kRms>
bool check_out(const Bufs<T>& b, const Out<T>& v, const Out<T>& ref, std::string* why) {
  const int64_t n = b.rows * b.cols;
  std::vector<T> x(n), y(n);
  std::vector<float> sc(b.cols), bi(b.cols), m(b.rows), r(b.rows), mr(b.rows), rr(b.rows);
  CK(cudaMemcpy(x.data(), b.x, n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y.data(), v.y, n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sc.data(), b.scale, b.cols * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(bi.data(), b.bias, b.cols * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(m.data(), v.mean, b.rows * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), v.rstd, b.rows * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(mr.data(), ref.mean, b.rows * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rr.data(), ref.rstd, b.rows * 4, cudaMemcpyDeviceToHost));
  double worst = 0, worst_stat = 0;
  for (int64_t row = 0; row < b.rows; row += std::max<int64_t>(1, b.rows / 97)) {
    const T* xr = x.data() + row * b.cols;
    double mu = 0, var = 0, ymax = 0;
    if (!kRms) {
      for (int c = 0; c < b.cols; ++c) mu += inproc::to_f(xr[c]);
      mu /= b.cols;
    }
    for (int c = 0; c < b.cols; ++c) var += (inproc::to_f(xr[c]) - mu) * (inproc::to_f(xr[c]) - mu);
    var /= b.cols;
    const double rs = 1.0 / std::sqrt(var + kEps);
    std::vector<double> want(b.cols);
    for (int c = 0; c < b.cols; ++c) {
      want[c] = (inproc::to_f(xr[c]) - mu) * rs * sc[c] + (kRms ? 0.0 : bi[c]);
      ymax = std::max(ymax, std::fabs(want[c]));
    }
    for (int c = 0; c < b.cols; ++c) {
      const double got = inproc::to_f(y[row * b.cols + c]);
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want[c]) / ymax : 1e30);
    }
  }
  for (int64_t row = 0; row < b.rows; ++row) {
    const double dm = kRms ? 0.0 : std::fabs(static_cast<double>(m[row]) - mr[row]) / (std::fabs(mr[row]) + 1e-3);
    const double dr = std::fabs(static_cast<double>(r[row]) - rr[row]) / std::fabs(rr[row]);
    worst_stat = std::max({worst_stat, std::isfinite(dm) ? dm : 1e30, std::isfinite(dr) ? dr : 1e30});
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "y %.1e, stats %.1e", worst, worst_stat);
  *why = buf;
  return worst < (sizeof(T) == 4 ? 1e-5 : 1.0 / 64) && worst_stat < 1e-4;
}

template <typename T, bool kRms>
bool run_op(const char* title) {
  std::printf("\n**%s**\n\n| C | rows | copy GB/s | v21 GB/s (%% copy) | v21b / v21 (A/A) | lean GB/s (%% copy) | "
              "lean / v21 | lean / v21 per sample (q1, q3) | check |\n"
              "|---|---|---|---|---|---|---|---|---|\n",
              title);
  bool all_ok = true;
  for (int cols : {768, 1024, 2048, 4096, 8192, 12288}) {
    Bufs<T> b{nullptr, nullptr, nullptr, kElems / cols, cols};
    const int64_t n = b.rows * cols;
    CK(cudaMalloc(&b.x, n * sizeof(T)));
    CK(cudaMalloc(&b.scale, cols * 4));
    CK(cudaMalloc(&b.bias, cols * 4));
    fill_x<<<1024, 256>>>(b.x, n, cols, 777u + cols);
    CK(cudaGetLastError());
    std::vector<float> sc(cols), bi(cols);
    for (int c = 0; c < cols; ++c) {
      sc[c] = 0.5f + static_cast<float>((c * 37) % 101) / 100.0f;
      bi[c] = static_cast<float>((c * 53) % 41) / 40.0f - 0.5f;
    }
    CK(cudaMemcpy(b.scale, sc.data(), cols * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.bias, bi.data(), cols * 4, cudaMemcpyHostToDevice));
    // Outputs: copy, v21, v21b, lean.
    std::vector<Out<T>> outs(4);
    for (Out<T>& o : outs) {
      CK(cudaMalloc(&o.y, n * sizeof(T)));
      CK(cudaMalloc(&o.mean, b.rows * 4));
      CK(cudaMalloc(&o.rstd, b.rows * 4));
      CK(cudaMemset(o.y, 0xff, n * sizeof(T)));  // NaN bytes: a row left unwritten fails the check
      CK(cudaMemset(o.mean, 0xff, b.rows * 4));
      CK(cudaMemset(o.rstd, 0xff, b.rows * 4));
    }
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy", [&] { inproc::copy<4, true>(b.x, outs[0].y, n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v21", [&] { launch_v21<T, kRms>(b, outs[1]); }, {}});
    vs.push_back({"v21b", [&] { launch_v21<T, kRms>(b, outs[2]); }, {}});
    vs.push_back({"lean", [&] { launch_lean<T, kRms>(b, outs[3]); }, {}});
    inproc::time_rotated(vs, kWarmup, kSamples);
    CK(cudaDeviceSynchronize());
    // Bytes: x read, y written, rstd (and LayerNorm's mean) written (the copy: x and y).
    const double bytes = 2.0 * n * sizeof(T) + (kRms ? 4.0 : 8.0) * b.rows;
    const double copy = 2.0 * n * sizeof(T) / inproc::median(vs[0].ms) / 1e6;
    const double v21 = bytes / inproc::median(vs[1].ms) / 1e6, v21b = bytes / inproc::median(vs[2].ms) / 1e6;
    const double lean = bytes / inproc::median(vs[3].ms) / 1e6;
    double ratio[3];
    inproc::sample_ratio(vs[3], vs[1], ratio);
    std::string why_v21, why_b, why_lean;
    bool ok = check_out<T, kRms>(b, outs[1], outs[1], &why_v21);
    ok = check_out<T, kRms>(b, outs[2], outs[1], &why_b) && ok;
    ok = check_out<T, kRms>(b, outs[3], outs[1], &why_lean) && ok;
    const std::string why = "v21 " + why_v21 + "; lean " + why_lean;
    all_ok = all_ok && ok;
    std::printf("| %d | %lld | %.0f | %.0f (%.0f%%) | %.3f | %.0f (%.0f%%) | %.3f | %.3f (%.3f, %.3f) "
                "| %s %s |\n",
                cols, static_cast<long long>(b.rows), copy, v21, 100 * v21 / copy, v21b / v21, lean, 100 * lean / copy,
                lean / v21, ratio[0], ratio[1], ratio[2], ok ? "ok" : "FAILED",
                why.c_str());
    for (Out<T>& o : outs) {
      CK(cudaFree(o.y));
      CK(cudaFree(o.mean));
      CK(cudaFree(o.rstd));
    }
    CK(cudaFree(b.x));
    CK(cudaFree(b.scale));
    CK(cudaFree(b.bias));
  }
  return all_ok;
}

}  // namespace

// Arguments: the ops to run, of ln-bf16 rms-bf16 ln-f32 rms-f32 (default all).
int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MB; %d samples, each variant once per sample in a rotated order\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, kSamples);
  const auto want = [&](const char* op) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == op) return true;
    }
    return false;
  };
  bool ok = true;
  if (want("ln-bf16")) ok = run_op<__nv_bfloat16, false>("LayerNorm, bf16") && ok;
  if (want("rms-bf16")) ok = run_op<__nv_bfloat16, true>("RMSNorm, bf16") && ok;
  if (want("ln-f32")) ok = run_op<float, false>("LayerNorm, f32") && ok;
  if (want("rms-f32")) ok = run_op<float, true>("RMSNorm, f32") && ok;
  std::printf("\n%s\n", ok ? "all outputs checked: ok" : "SOME OUTPUTS FAILED THEIR CHECK");
  return ok ? 0 : 1;
}
