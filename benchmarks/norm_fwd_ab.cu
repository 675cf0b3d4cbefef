// An A/B of the norms' forward inside one process (RESULTS.md "v23"; the method: inproc_ab.cuh). An A/A pair
// (the default twice) measures the noise that is left.
//
//   copy      a full-grid 16-byte copy of x into y (4 words per thread, streaming hints; not the best copy: XLA's
//             copy of the same bytes read up to 6% faster in another process, RESULTS.md "v23").
//   v21       the default before v23 (norm_fwd.cu's rule): f32 norm_fwd_half.cuh's 4 packs; 16-bit norm_rows.cuh's
//             8 packs, LayerNorm team rows on norm_fwd_half.cuh's 6-pack kernel where v10 takes them; twice (v21,
//             v21b: the A/A pair).
//   lean      norm_fwd_lean.cuh's rows in v21's geometry and packs (v23's default for bf16 LayerNorm; bf16
//             RMSNorm and f32 measured, not adopted).
//
// ln-params (bf16, RESULTS.md "v28"): what LayerNorm's parameter loads cost — the lean rows with scale and bias
// (twice: the A/A pair), scale only, neither, RMSNorm's lean rows (scale), and v21's rows with scale only and with
// neither (the rows bias-free LayerNorms took before v28), all in one rotation. early: the lean rows' parameters
// staged for team rows (v28's kStaged) against v23's loads in pass 3, LayerNorm and RMSNorm.
//
// Every variant's output is checked: y against a float64 reference on sampled rows (relative to the row's
// scale), mean / rstd against v21's, outputs poisoned (NaN bytes) before the first launch.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/norm_fwd_ab.cu \
//        -o /tmp/norm_fwd_ab && /tmp/norm_fwd_ab [ln-bf16 rms-bf16 ln-f32 rms-f32 ln-params early packs-f32 packs-more
//        packs-bf16 v29 early-f32 early-bf16 io v44 half-io pairs]
//   (default: the first four)
#include <algorithm>
#include <cmath>

#include "inproc_ab.cuh"
#include "norm_fwd_half.cuh"
#include "norm_fwd_lean.cuh"
#include "softmax_fwd_regs.cuh"

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
  // The same rows with the given parameters only (the others absent).
  Bufs with_params(bool keep_scale, bool keep_bias) const {
    return {x, keep_scale ? scale : nullptr, keep_bias ? bias : nullptr, rows, cols};
  }
};

template <typename T>
struct Out {
  T* y;
  float *mean, *rstd;
};

unsigned grid_of(int64_t groups) { return static_cast<unsigned>(groups); }

template <typename T, bool kRms, bool kBlockRow, int N, bool kIo = false>
void half_rows(const Bufs<T>& b, const Out<T>& o, const RowsPlan& p) {
  const jm::ParamView sc{b.scale, b.rows}, bi{kRms ? nullptr : b.bias, b.rows};
  jm::cuda::norm_fwd_half_kernel<T, kRms, kBlockRow, N, kIo>
      <<<grid_of((b.rows + p.rows_per_block - 1) / p.rows_per_block), p.block>>>(b.x, sc, bi, o.y, o.mean, o.rstd,
                                                                                  b.rows, b.cols, kEps, p.tpr);
}

// v21's rule (norm_fwd.cu before v23), the kernels and geometry it launches.
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

template <typename T, bool kRms, bool kBlockRow, int N, bool kS = true, bool kB = !kRms, bool kE = true,
          bool kH = false, bool kIo = false>
void lean_rows(const Bufs<T>& b, const Out<T>& o, const RowsPlan& p) {
  jm::cuda::norm_fwd_lean_kernel<T, kRms, kBlockRow, N, kS, kB, kE, kH, kIo>
      <<<grid_of((b.rows + p.rows_per_block - 1) / p.rows_per_block), p.block>>>(
          b.x, b.scale, kRms ? nullptr : b.bias, o.y, o.mean, o.rstd, b.rows, b.cols, 1.0f / static_cast<float>(b.cols),
          kEps, p.tpr);
}

// The lean rows in v21's geometry: f32 4 packs; 16-bit 8, LayerNorm team rows 6 where v10 takes them (bf16
// LayerNorm: v23's default, RMSNorm: v24's, norm_fwd.cu). The kernel's A/B options measured here (RESULTS.md "v24",
// "v25") are on branches v25-merge and v25-pivot.
// kS / kB: scale / bias present (b's pointers must match: the kernel reads what they say); kE: the kernel's kStaged.
// kIo: the kernel's kCachedIo.
template <typename T, bool kRms, bool kS = true, bool kB = !kRms, bool kE = true, bool kIo = false>
void launch_lean(const Bufs<T>& b, const Out<T>& o) {
  constexpr int N = sizeof(T) == 4 ? jm::cuda::kRowPacksHalf : kRowPacks<T>;
  const RowsPlan plan = plan_norm_rows<T, N>(b.cols);
  if (plan.block_rows) return lean_rows<T, kRms, true, N, kS, kB, kE, false, kIo>(b, o, plan);
  if constexpr (!kRms && sizeof(T) == 2) {
    const RowsPlan six = plan_norm_rows<T, kRowPacksTeam6>(b.cols);
    if (six.ok && six.tpr == plan.tpr) {
      return lean_rows<T, kRms, false, kRowPacksTeam6, kS, kB, kE, false, kIo>(b, o, six);
    }
  }
  lean_rows<T, kRms, false, N, kS, kB, kE, false, kIo>(b, o, plan);
}

// v28 (norm_fwd.cu's rule before v29): f32 v4's rows (launch_v21's), bf16 the lean rows at 8 / 6 packs.
template <typename T, bool kRms>
void launch_v28(const Bufs<T>& b, const Out<T>& o) {
  if constexpr (sizeof(T) == 4) {
    launch_v21<T, kRms>(b, o);
  } else {
    launch_lean<T, kRms>(b, o);
  }
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
  if (b.scale != nullptr) {  // absent parameters: scale 1, bias 0
    CK(cudaMemcpy(sc.data(), b.scale, b.cols * 4, cudaMemcpyDeviceToHost));
  } else {
    std::fill(sc.begin(), sc.end(), 1.0f);
  }
  if (b.bias != nullptr) CK(cudaMemcpy(bi.data(), b.bias, b.cols * 4, cudaMemcpyDeviceToHost));
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

// One case: x (2^26 elements), one scale and one bias row, and `n_outs` outputs poisoned with NaN bytes (a row
// left unwritten fails its check).
template <typename T>
struct Case {
  Bufs<T> b;
  std::vector<Out<T>> outs;
  int64_t n;

  Case(int cols, int n_outs) : b{nullptr, nullptr, nullptr, kElems / cols, cols}, outs(n_outs), n(b.rows * cols) {
    CK(cudaMalloc(&b.x, n * sizeof(T)));
    CK(cudaMalloc(&b.scale, cols * 4));
    CK(cudaMalloc(&b.bias, cols * 4));
    fill_x<<<1024, 256>>>(b.x, n, cols, 777u + cols);
    CK(cudaGetLastError());
    inproc::param_rows(b.scale, b.bias, cols);
    for (Out<T>& o : outs) {
      CK(cudaMalloc(&o.y, n * sizeof(T)));
      CK(cudaMalloc(&o.mean, b.rows * 4));
      CK(cudaMalloc(&o.rstd, b.rows * 4));
      CK(cudaMemset(o.y, 0xff, n * sizeof(T)));
      CK(cudaMemset(o.mean, 0xff, b.rows * 4));
      CK(cudaMemset(o.rstd, 0xff, b.rows * 4));
    }
  }
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;
  ~Case() {
    for (Out<T>& o : outs) {
      CK(cudaFree(o.y));
      CK(cudaFree(o.mean));
      CK(cudaFree(o.rstd));
    }
    CK(cudaFree(b.x));
    CK(cudaFree(b.scale));
    CK(cudaFree(b.bias));
  }
  // GB/s of variant i moving `bytes`.
  double gbps(const std::vector<inproc::Variant>& vs, int i, double bytes) const {
    return bytes / inproc::median(vs[i].ms) / 1e6;
  }
};

constexpr int kWidths[] = {768, 1024, 2048, 4096, 8192, 12288};

template <typename T, bool kRms>
bool run_op(const char* title) {
  std::printf("\n**%s**\n\n| C | rows | copy GB/s | v21 GB/s (%% copy) | v21b / v21 (A/A) | lean GB/s (%% copy) | "
              "lean / v21 | lean / v21 per sample (q1, q3) | check |\n"
              "|---|---|---|---|---|---|---|---|---|\n",
              title);
  bool all_ok = true;
  for (int cols : kWidths) {
    Case<T> c(cols, 4);  // outputs: copy, v21, v21b, lean
    const Bufs<T>& b = c.b;
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy", [&] { inproc::copy<4, true>(b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v21", [&] { launch_v21<T, kRms>(b, c.outs[1]); }, {}});
    vs.push_back({"v21b", [&] { launch_v21<T, kRms>(b, c.outs[2]); }, {}});
    vs.push_back({"lean", [&] { launch_lean<T, kRms>(b, c.outs[3]); }, {}});
    inproc::time_rotated(vs, kWarmup, kSamples);
    CK(cudaDeviceSynchronize());
    // Bytes: x read, y written, rstd (and LayerNorm's mean) written (the copy: x and y).
    const double bytes = 2.0 * c.n * sizeof(T) + (kRms ? 4.0 : 8.0) * b.rows;
    const double copy = c.gbps(vs, 0, 2.0 * c.n * sizeof(T));
    const double v21 = c.gbps(vs, 1, bytes), v21b = c.gbps(vs, 2, bytes), lean = c.gbps(vs, 3, bytes);
    double ratio[3];
    inproc::sample_ratio(vs[3], vs[1], ratio);
    std::string why_v21, why_b, why_lean;
    bool ok = check_out<T, kRms>(b, c.outs[1], c.outs[1], &why_v21);
    ok = check_out<T, kRms>(b, c.outs[2], c.outs[1], &why_b) && ok;
    ok = check_out<T, kRms>(b, c.outs[3], c.outs[1], &why_lean) && ok;
    const std::string why = "v21 " + why_v21 + "; lean " + why_lean;
    all_ok = all_ok && ok;
    std::printf("| %d | %lld | %.0f | %.0f (%.0f%%) | %.3f | %.0f (%.0f%%) | %.3f | %.3f (%.3f, %.3f) "
                "| %s %s |\n",
                cols, static_cast<long long>(b.rows), copy, v21, 100 * v21 / copy, v21b / v21, lean, 100 * lean / copy,
                lean / v21, ratio[0], ratio[1], ratio[2], ok ? "ok" : "FAILED",
                why.c_str());
  }
  return all_ok;
}

// ln-params: bf16 LayerNorm's lean rows with scale and bias, scale only, neither, and RMSNorm's (scale), one rotation.
bool run_params() {
  using T = __nv_bfloat16;
  std::printf("\n**LayerNorm's parameter loads, bf16 lean rows** (ratios: scale + bias's time over the variant's, > 1 "
              "where the variant is faster)\n\n"
              "| C | copy GB/s | scale + bias GB/s (%% copy) | A/A | scale only | neither | RMSNorm (scale) | "
              "scale only per sample (q1, q3) | RMSNorm per sample (q1, q3) | v21 scale only, neither (before v28) | "
              "check |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  bool all_ok = true;
  for (int cols : kWidths) {
    Case<T> c(cols, 8);  // outputs: copy, both, both again, scale only, neither, RMSNorm, v21 scale only, v21 neither
    const Bufs<T> only = c.b.with_params(true, false), none = c.b.with_params(false, false);
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy", [&] { inproc::copy<4, true>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"both", [&] { launch_lean<T, false>(c.b, c.outs[1]); }, {}});
    vs.push_back({"both again", [&] { launch_lean<T, false>(c.b, c.outs[2]); }, {}});
    vs.push_back({"scale only", [&] { launch_lean<T, false, true, false>(only, c.outs[3]); }, {}});
    vs.push_back({"neither", [&] { launch_lean<T, false, false, false>(none, c.outs[4]); }, {}});
    vs.push_back({"rms", [&] { launch_lean<T, true>(c.b, c.outs[5]); }, {}});
    vs.push_back({"v21 scale only", [&] { launch_v21<T, false>(only, c.outs[6]); }, {}});
    vs.push_back({"v21 neither", [&] { launch_v21<T, false>(none, c.outs[7]); }, {}});
    inproc::time_rotated(vs, kWarmup, kSamples);
    CK(cudaDeviceSynchronize());
    const double ln_bytes = 2.0 * c.n * sizeof(T) + 8.0 * c.b.rows;
    const double copy = c.gbps(vs, 0, 2.0 * c.n * sizeof(T)), both = c.gbps(vs, 1, ln_bytes);
    const auto rel = [&](int i) { return inproc::median(vs[1].ms) / inproc::median(vs[i].ms); };
    double r_only[3], r_rms[3];
    inproc::sample_ratio(vs[3], vs[1], r_only);
    inproc::sample_ratio(vs[5], vs[1], r_rms);
    std::string w[5];
    bool ok = check_out<T, false>(c.b, c.outs[1], c.outs[1], &w[0]);
    ok = check_out<T, false>(c.b, c.outs[2], c.outs[1], &w[1]) && ok;
    ok = check_out<T, false>(only, c.outs[3], c.outs[1], &w[2]) && ok;
    ok = check_out<T, false>(none, c.outs[4], c.outs[1], &w[3]) && ok;
    ok = check_out<T, true>(c.b, c.outs[5], c.outs[5], &w[4]) && ok;
    std::string w21[2];
    ok = check_out<T, false>(only, c.outs[6], c.outs[1], &w21[0]) && ok;
    ok = check_out<T, false>(none, c.outs[7], c.outs[1], &w21[1]) && ok;
    all_ok = all_ok && ok;
    std::printf("| %d | %.0f | %.0f (%.0f%%) | %.3f | %.3f | %.3f | %.3f | %.3f (%.3f, %.3f) | %.3f (%.3f, %.3f) | "
                "%.3f, %.3f | %s: both %s; scale %s; neither %s; rms %s; v21 %s, %s |\n",
                cols, copy, both, 100 * both / copy, rel(2), rel(3), rel(4), rel(5), r_only[0], r_only[1], r_only[2],
                r_rms[0], r_rms[1], r_rms[2], rel(6), rel(7), ok ? "ok" : "FAILED", w[0].c_str(), w[2].c_str(),
                w[3].c_str(), w[4].c_str(), w21[0].c_str(), w21[1].c_str());
  }
  return all_ok;
}

// early: bf16 LayerNorm's and RMSNorm's lean rows with the team rows' parameters staged in shared memory (kStaged,
// v28) and loaded in pass 3 (v23, twice for LayerNorm: A/A), one rotation. (Its earlier forms, RESULTS.md "v28", ran
// other load options: x not allocated in L1, the parameters evict_last in L1, the first pack's parameters loaded
// beside x; ties.)
bool run_early() {
  using T = __nv_bfloat16;
  std::printf("\n**Team rows' parameters staged, bf16 lean rows** (per sample: median (q1, q3) of v23's time over "
              "v28's)\n\n| C | copy GB/s | LayerNorm v23 GB/s (%% copy) | A/A | LayerNorm v28 / v23 | "
              "RMSNorm v23 GB/s (%% copy) | RMSNorm v28 / v23 | check |\n|---|---|---|---|---|---|---|---|\n");
  bool all_ok = true;
  for (int cols : kWidths) {
    Case<T> c(cols, 6);  // outputs: copy, LayerNorm v23, v23 again, v28, RMSNorm v23, v28
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy", [&] { inproc::copy<4, true>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"ln v23", [&] { launch_lean<T, false, true, true, false>(c.b, c.outs[1]); }, {}});
    vs.push_back({"ln v23 again", [&] { launch_lean<T, false, true, true, false>(c.b, c.outs[2]); }, {}});
    vs.push_back({"ln v28", [&] { launch_lean<T, false>(c.b, c.outs[3]); }, {}});
    vs.push_back({"rms v23", [&] { launch_lean<T, true, true, false, false>(c.b, c.outs[4]); }, {}});
    vs.push_back({"rms v28", [&] { launch_lean<T, true>(c.b, c.outs[5]); }, {}});
    inproc::time_rotated(vs, kWarmup, kSamples);
    CK(cudaDeviceSynchronize());
    const double io = 2.0 * c.n * sizeof(T), copy = c.gbps(vs, 0, io);
    const double ln = c.gbps(vs, 1, io + 8.0 * c.b.rows), rms = c.gbps(vs, 4, io + 4.0 * c.b.rows);
    double aa[3], ln28[3], rms28[3];
    inproc::sample_ratio(vs[2], vs[1], aa);
    inproc::sample_ratio(vs[3], vs[1], ln28);
    inproc::sample_ratio(vs[5], vs[4], rms28);
    std::string why;
    bool ok = true;
    for (int i = 1; i < 6; ++i) {
      std::string w;
      ok = (i < 4 ? check_out<T, false>(c.b, c.outs[i], c.outs[1], &w)
                  : check_out<T, true>(c.b, c.outs[i], c.outs[4], &w)) && ok;
      why += " " + vs[i].name + ": " + w + ";";
    }
    all_ok = all_ok && ok;
    std::printf("| %d | %.0f | %.0f (%.0f%%) | %.3f (%.3f, %.3f) | %.3f (%.3f, %.3f) | %.0f (%.0f%%) | "
                "%.3f (%.3f, %.3f) | %s:%s |\n",
                cols, copy, ln, 100 * ln / copy, aa[0], aa[1], aa[2], ln28[0], ln28[1], ln28[2], rms, 100 * rms / copy,
                rms28[0], rms28[1], rms28[2], ok ? "ok" : "FAILED", why.c_str());
  }
  return all_ok;
}

// packs (RESULTS.md "v29"): the copy ceiling's lesson (copy_ceiling.cu: a full-grid copy of 1 pack per thread reads
// 4168 GB/s, 4 packs 4046, 8 packs 3953, streaming hints 1-2% less) tried on the norms: the lean rows at NP = 1, 2,
// 3, 4 packs per thread (more threads per row: fewer bytes in flight per thread), against the default (norm_fwd.cu's
// rule then: f32 v4's rows, bf16 the lean rows at 8 / 6 packs; twice, the A/A pair) and both copies. v29: the rule
// adopted from it (norm_fwd_lean.cuh's lean_block_packs) against the rule before.
template <int NP, typename T, bool kRms, bool kIo = false>
bool lean_np(const Bufs<T>& b, const Out<T>& o, std::string* plan_name) {
  const RowsPlan p = plan_norm_rows<T, NP>(b.cols);
  if (!p.ok) return false;
  *plan_name = std::to_string(NP) + (p.block_rows ? " x block " : " x team ") + std::to_string(p.tpr);
  if (p.block_rows) {
    lean_rows<T, kRms, true, NP, true, !kRms, true, false, kIo>(b, o, p);
  } else {
    lean_rows<T, kRms, false, NP, true, !kRms, true, false, kIo>(b, o, p);
  }
  return true;
}

template <typename T, bool kRms, bool kIo = false>
void launch_v29(const Bufs<T>& b, const Out<T>& o);

// The lean rows at each of NPs packs per thread against `base` (launch_base; twice, the A/A pair) and both copies, at
// `widths`. packs-f32 / packs-bf16: NP = 1..4 against v28's rule (v29's question); packs-more: f32 NP = 3, 4, 6, 8 at
// C = 2048 / 4096 against v29's rule (fewer threads per row: fewer warps to meet at each reduction's barrier).
template <typename T, bool kRms, int... NPs>
bool run_packs(const char* title, const char* base, void (*launch_base)(const Bufs<T>&, const Out<T>&),
               const std::vector<int>& widths) {
  constexpr int kN = sizeof...(NPs);
  constexpr int kNps[] = {NPs...};
  std::string head = "| C | copy 1 / copy 4s GB/s | " + std::string(base) + " GB/s (%) | A/A |";
  for (int np : kNps) head += " NP = " + std::to_string(np) + " |";
  std::printf("\n**%s: packs per thread** (per sample: median (q1, q3) of %s's time over the variant's; "
              "%% of the 1-pack copy)\n\n%s check |\n|---|---|---|---|", title, base, head.c_str());
  for (int i = 0; i <= kN; ++i) std::printf("---|");
  std::printf("\n");
  bool all_ok = true;
  for (int cols : widths) {
    Case<T> c(cols, 4 + kN);  // outputs: copy 1, copy 4s, base, base again, one per NP
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy 1", [&] { inproc::copy<1, false>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"copy 4s", [&] { inproc::copy<4, true>(c.b.x, c.outs[1].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({base, [&] { launch_base(c.b, c.outs[2]); }, {}});
    vs.push_back({std::string(base) + " again", [&] { launch_base(c.b, c.outs[3]); }, {}});
    std::string names[kN];
    std::vector<int> np_at(kN, -1);  // variant index of NP = kNps[i], -1 where the plan does not take the width
    const auto add = [&](int i, auto np) {
      std::string name;
      if (!lean_np<decltype(np)::value, T, kRms>(c.b, c.outs[4 + i], &name)) return;  // probe (and warm) the plan
      names[i] = name;
      np_at[i] = static_cast<int>(vs.size());
      vs.push_back({name, [&, i] {
                      std::string n;
                      lean_np<decltype(np)::value, T, kRms>(c.b, c.outs[4 + i], &n);
                    }, {}});
    };
    int next = 0;
    (add(next++, std::integral_constant<int, NPs>{}), ...);
    CK(cudaDeviceSynchronize());
    inproc::time_rotated(vs, kWarmup, kSamples);
    CK(cudaDeviceSynchronize());
    const double io = 2.0 * c.n * sizeof(T), bytes = io + (kRms ? 4.0 : 8.0) * c.b.rows;
    const double copy1 = c.gbps(vs, 0, io), copy4 = c.gbps(vs, 1, io), d = c.gbps(vs, 2, bytes);
    double aa[3];
    inproc::sample_ratio(vs[3], vs[2], aa);
    std::string cells, why;
    bool ok = true;
    for (int i = 0; i < kN; ++i) {
      if (np_at[i] < 0) {
        cells += " - |";
        continue;
      }
      double r[3];
      inproc::sample_ratio(vs[np_at[i]], vs[2], r);
      char buf[128];
      std::snprintf(buf, sizeof buf, " %.3f (%.3f, %.3f) %s, %.0f%% |", r[0], r[1], r[2], names[i].c_str(),
                    100 * c.gbps(vs, np_at[i], bytes) / copy1);
      cells += buf;
      std::string w;
      ok = check_out<T, kRms>(c.b, c.outs[4 + i], c.outs[2], &w) && ok;
      why += " NP " + std::to_string(kNps[i]) + ": " + w + ";";
    }
    for (int i = 2; i < 4; ++i) {
      std::string w;
      ok = check_out<T, kRms>(c.b, c.outs[i], c.outs[2], &w) && ok;
      why += " " + vs[i].name + ": " + w + ";";
    }
    all_ok = all_ok && ok;
    std::printf("| %d | %.0f / %.0f | %.0f (%.0f%%) | %.3f (%.3f, %.3f) |%s %s:%s |\n", cols, copy1, copy4, d,
                100 * d / copy1, aa[0], aa[1], aa[2], cells.c_str(), ok ? "ok" : "FAILED", why.c_str());
  }
  return all_ok;
}

// v29 (norm_fwd.cu's rule since v29): block rows at lean_block_packs where it gives packs, else the rule before. kIo
// (the lean kernel's kCachedIo) where the rule takes the lean kernel.
template <typename T, bool kRms, bool kIo>
void launch_v29(const Bufs<T>& b, const Out<T>& o) {
  const int np = jm::cuda::lean_block_packs<T, kRms>(b.cols / jm::cuda::kVec<T>);
  std::string name;
  if (np == 2) {
    if constexpr (sizeof(T) == 4 && kRms) lean_np<2, T, kRms, kIo>(b, o, &name);
  } else if (np == 3) {
    if constexpr (sizeof(T) == 4 || kRms) lean_np<3, T, kRms, kIo>(b, o, &name);
  } else if (np == 4) {
    lean_np<4, T, kRms, kIo>(b, o, &name);
  } else if constexpr (kIo && sizeof(T) == 2) {
    launch_lean<T, kRms, true, !kRms, true, true>(b, o);
  } else {
    launch_v28<T, kRms>(b, o);
  }
}

// v29: the rule since v29 against the rule before (v28, twice: the A/A pair), % of the 1-pack copy.
template <typename T, bool kRms>
bool run_v29(const char* title) {
  std::printf("\n**%s: v29 / v28** (per sample: median (q1, q3) of v28's time over v29's; %% of the 1-pack copy)\n\n"
              "| C | v29's packs | copy 1 GB/s | v28 GB/s (%%) | A/A | v29 GB/s (%%) | v29 / v28 | check |\n"
              "|---|---|---|---|---|---|---|---|\n", title);
  bool all_ok = true;
  for (int cols : kWidths) {
    Case<T> c(cols, 4);  // outputs: copy, v28, v28 again, v29
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy 1", [&] { inproc::copy<1, false>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v28", [&] { launch_v28<T, kRms>(c.b, c.outs[1]); }, {}});
    vs.push_back({"v28 again", [&] { launch_v28<T, kRms>(c.b, c.outs[2]); }, {}});
    vs.push_back({"v29", [&] { launch_v29<T, kRms>(c.b, c.outs[3]); }, {}});
    inproc::time_rotated(vs, kWarmup, kSamples);
    CK(cudaDeviceSynchronize());
    const double io = 2.0 * c.n * sizeof(T), bytes = io + (kRms ? 4.0 : 8.0) * c.b.rows;
    const double copy1 = c.gbps(vs, 0, io), old = c.gbps(vs, 1, bytes), now = c.gbps(vs, 3, bytes);
    double aa[3], r[3];
    inproc::sample_ratio(vs[2], vs[1], aa);
    inproc::sample_ratio(vs[3], vs[1], r);
    std::string why;
    bool ok = true;
    for (int i = 1; i < 4; ++i) {
      std::string w;
      ok = check_out<T, kRms>(c.b, c.outs[i], c.outs[1], &w) && ok;
      why += " " + vs[i].name + ": " + w + ";";
    }
    all_ok = all_ok && ok;
    std::printf("| %d | %d | %.0f | %.0f (%.0f%%) | %.3f (%.3f, %.3f) | %.0f (%.0f%%) | %.3f (%.3f, %.3f) | %s:%s |\n",
                cols, jm::cuda::lean_block_packs<T, kRms>(cols / jm::cuda::kVec<T>), copy1, old, 100 * old / copy1,
                aa[0], aa[1], aa[2], now, 100 * now / copy1, r[0], r[1], r[2], ok ? "ok" : "FAILED", why.c_str());
  }
  return all_ok;
}

// The v44 modes' table cell for variant i: the per-sample ratio of variant 1's time (the baseline) over its time,
// median (q1, q3), and its GB/s moving `bytes` as % of `copy` GB/s; "-" where i < 0 (the variant did not run).
template <typename T>
std::string ratio_cell(const Case<T>& c, const std::vector<inproc::Variant>& vs, int i, double bytes, double copy) {
  if (i < 0) return "-";
  double r[3];
  inproc::sample_ratio(vs[i], vs[1], r);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3f (%.3f, %.3f), %.0f%%", r[0], r[1], r[2], 100 * c.gbps(vs, i, bytes) / copy);
  return buf;
}

// The v44 modes' output checks: each output against output 1's statistics (check_out), the verdicts in `why`.
template <typename T, bool kRms>
struct OutChecks {
  const Case<T>& c;
  bool ok = true;
  std::string why;
  void operator()(const Bufs<T>& bufs, int out, const std::string& name) {
    std::string w;
    ok = check_out<T, kRms>(bufs, c.outs[out], c.outs[1], &w) && ok;
    why += " " + name + ": " + w + ";";
  }
};

// The v44 / v45 modes' measurement of one width: the variants timed in a rotated order (vs[0] the 1-pack copy, vs[1]
// the baseline), then each listed output (index, name) checked against output 1.
template <typename T, bool kRms>
struct Measured {
  double io, bytes, copy1, base;  // x + y bytes, a norm's (with its statistics), GB/s of vs[0] and of vs[1]
  OutChecks<T, kRms> check;
};

template <typename T, bool kRms>
Measured<T, kRms> measure(const Case<T>& c, std::vector<inproc::Variant>& vs,
                          const std::vector<std::pair<int, std::string>>& outs) {
  CK(cudaDeviceSynchronize());
  inproc::time_rotated(vs, kWarmup, kSamples);
  CK(cudaDeviceSynchronize());
  const double io = 2.0 * c.n * sizeof(T), bytes = io + (kRms ? 4.0 : 8.0) * c.b.rows;
  Measured<T, kRms> m{io, bytes, c.gbps(vs, 0, io), c.gbps(vs, 1, bytes), OutChecks<T, kRms>{c}};
  for (const auto& [out, name] : outs) m.check(c.b, out, name);
  return m;
}

// early-f32 / early-bf16 (RESULTS.md "v44"): the block rows with their parameter packs held in registers, loaded
// beside x (the kernel's kHold; f32, at 2, 3 and 4 packs per thread), against v29's rule (twice: the A/A pair) and the
// same rule's kernel without parameters (what their loads cost at most), % of the 1-pack copy. (As measured, a column
// of L1 prefetches of the parameters too: branch v44-l1.)
template <typename T, int NP, bool kRms, bool kHold, bool kParams = true, bool kIo = false>
bool early_np(const Bufs<T>& b, const Out<T>& o) {
  const RowsPlan p = plan_norm_rows<T, NP>(b.cols);
  if (!p.ok || !p.block_rows) return false;
  lean_rows<T, kRms, true, NP, kParams, kParams && !kRms, true, kHold, kIo>(b, o, p);
  return true;
}

template <typename T, bool kRms>
bool run_early_params(const char* title, const std::vector<int>& widths) {
  std::printf("\n**%s: parameters beside x** (per sample: median (q1, q3) of v29's time over the variant's; %% of the "
              "1-pack copy)\n\n| C | v29's packs | copy 1 GB/s | v29 GB/s (%%) | A/A | no parameters | "
              "registers NP = 2 | NP = 3 | NP = 4 | check |\n|---|---|---|---|---|---|---|---|---|---|\n", title);
  bool all_ok = true;
  for (int cols : widths) {
    Case<T> c(cols, 7);  // outputs: copy, v29, v29 again, no parameters, registers at NP = 2, 3, 4
    const Bufs<T> none = c.b.with_params(false, false);
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy 1", [&] { inproc::copy<1, false>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v29", [&] { launch_v29<T, kRms>(c.b, c.outs[1]); }, {}});
    vs.push_back({"v29 again", [&] { launch_v29<T, kRms>(c.b, c.outs[2]); }, {}});
    const int tuned = jm::cuda::lean_block_packs<T, kRms>(cols / jm::cuda::kVec<T>);
    const int np = tuned > 0 ? tuned : sizeof(T) == 4 ? jm::cuda::kRowPacksHalf : kRowPacks<T>;
    // The rule's kernel at np packs without parameters.
    const auto none_at_np = [&] {
      if (np == 2) return early_np<T, 2, kRms, false, false>(none, c.outs[3]);
      if (np == 3) return early_np<T, 3, kRms, false, false>(none, c.outs[3]);
      if (np == 4) return early_np<T, 4, kRms, false, false>(none, c.outs[3]);
      if (np == 8) return early_np<T, 8, kRms, false, false>(none, c.outs[3]);
      return false;
    };
    if (!none_at_np()) {
      std::printf("| %d | %d | (not block rows) |\n", cols, np);
      continue;
    }
    vs.push_back({"none", [&] { none_at_np(); }, {}});
    int at[3] = {-1, -1, -1};
    const auto add = [&](int i, auto n) {
      if constexpr (sizeof(T) == 4) {
        constexpr int kN = decltype(n)::value;
        if (!early_np<T, kN, kRms, true>(c.b, c.outs[4 + i])) return;  // probe (and warm) the plan
        at[i] = static_cast<int>(vs.size());
        vs.push_back({"regs " + std::to_string(kN), [&, i] { early_np<T, kN, kRms, true>(c.b, c.outs[4 + i]); }, {}});
      }
    };
    add(0, std::integral_constant<int, 2>{});
    add(1, std::integral_constant<int, 3>{});
    add(2, std::integral_constant<int, 4>{});
    Measured<T, kRms> m = measure<T, kRms>(c, vs, {{1, "v29"}, {2, "v29 again"}});
    const auto cell = [&](int i) { return ratio_cell(c, vs, i, m.bytes, m.copy1); };
    std::string reg_cells;
    m.check(none, 3, "none");
    for (int i = 0; i < 3; ++i) {
      reg_cells += " " + cell(at[i]) + " |";
      if (at[i] >= 0) m.check(c.b, 4 + i, "regs " + std::to_string(i + 2));
    }
    all_ok = all_ok && m.check.ok;
    std::printf("| %d | %d | %.0f | %.0f (%.0f%%) | %s | %s |%s %s:%s |\n", cols, np, m.copy1, m.base,
                100 * m.base / m.copy1, cell(2).c_str(), cell(3).c_str(), reg_cells.c_str(),
                m.check.ok ? "ok" : "FAILED", m.check.why.c_str());
  }
  return all_ok;
}

// io (RESULTS.md "v44"): the lean rows with x read by __ldg and y stored plainly (the kernel's kCachedIo) at v29's
// rule, for f32 also with the parameters in registers (kHold) at v29's packs and at 4, against v29's rule
// (twice: the A/A pair); beside them the softmax forward's register rows of 4 packs (its f32 default at C <= 4096,
// cached I/O; as a reference of the same bytes: y's rows checked to sum to 1).
template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int cols) {
  int tpr = jm::cuda::smx::kMinTpr;  // the next power of two of the row's threads at 4 packs
  while (tpr * 4 * jm::cuda::kVec<T> < cols) tpr *= 2;
  const int block = tpr <= 32 ? jm::cuda::smx::kSubWarpBlock : tpr;
  jm::cuda::smx::softmax_fwd_regs_kernel<T, 4, sizeof(T) == 4, false, false, true>
      <<<grid_of((rows + block / tpr - 1) / (block / tpr)), block>>>(x, y, rows, cols, tpr);
}

template <typename T>
bool check_softmax(const T* y, int64_t rows, int cols, std::string* why) {
  double worst = 0;
  std::vector<T> row(cols);
  for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 97)) {
    CK(cudaMemcpy(row.data(), y + r * cols, cols * sizeof(T), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += inproc::to_f(row[c]);
    worst = std::max(worst, std::isfinite(sum) ? std::fabs(sum - 1) : 1e30);
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "softmax row sums %.1e off 1", worst);
  *why = buf;
  return worst < (sizeof(T) == 4 ? 1e-4 : 0.05);
}

template <typename T, bool kRms>
bool run_io(const char* title, const std::vector<int>& widths) {
  std::printf("\n**%s: cached I/O** (per sample: median (q1, q3) of v29's time over the variant's; %% of the 1-pack "
              "copy)\n\n| C | v29's packs | copy 1 GB/s | v29 GB/s (%%) | A/A | cached I/O | cached, parameters in "
              "registers | the same at NP = 4 | softmax rows (4 packs, cached) | check |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n", title);
  bool all_ok = true;
  for (int cols : widths) {
    Case<T> c(cols, 7);  // outputs: copy, v29, v29 again, cached, cached + registers, the same at 4, softmax
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy 1", [&] { inproc::copy<1, false>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v29", [&] { launch_v29<T, kRms>(c.b, c.outs[1]); }, {}});
    vs.push_back({"v29 again", [&] { launch_v29<T, kRms>(c.b, c.outs[2]); }, {}});
    vs.push_back({"cached", [&] { launch_v29<T, kRms, true>(c.b, c.outs[3]); }, {}});
    const int np = jm::cuda::lean_block_packs<T, kRms>(cols / jm::cuda::kVec<T>);
    const auto regs_at = [&](int n, const Out<T>& o) {
      if constexpr (sizeof(T) == 4) {
        if (n == 2) return early_np<T, 2, kRms, true, true, true>(c.b, o);
        if (n == 3) return early_np<T, 3, kRms, true, true, true>(c.b, o);
        if (n == 4) return early_np<T, 4, kRms, true, true, true>(c.b, o);
      }
      return false;
    };
    std::vector<std::pair<int, std::string>> outs{{1, "v29"}, {2, "v29 again"}, {3, "cached"}};
    int at_regs = -1, at_regs4 = -1;
    if (regs_at(np, c.outs[4])) {
      at_regs = static_cast<int>(vs.size());
      vs.push_back({"cached + regs", [&] { regs_at(np, c.outs[4]); }, {}});
      outs.push_back({4, "cached + regs"});
    }
    if (np != 4 && regs_at(4, c.outs[5])) {
      at_regs4 = static_cast<int>(vs.size());
      vs.push_back({"cached + regs 4", [&] { regs_at(4, c.outs[5]); }, {}});
      outs.push_back({5, "cached + regs 4"});
    }
    const int at_smx = static_cast<int>(vs.size());
    vs.push_back({"softmax", [&] { softmax_rows(c.b.x, c.outs[6].y, c.b.rows, cols); }, {}});
    const Measured<T, kRms> m = measure<T, kRms>(c, vs, outs);
    const auto cell = [&](int i, double b) { return ratio_cell(c, vs, i, b, m.copy1); };
    std::string w;
    const bool ok = check_softmax(c.outs[6].y, c.b.rows, cols, &w) && m.check.ok;
    const std::string why = m.check.why + " " + w;
    all_ok = all_ok && ok;
    std::printf("| %d | %d | %.0f | %.0f (%.0f%%) | %s | %s | %s | %s | %s | %s:%s |\n", cols, np, m.copy1, m.base,
                100 * m.base / m.copy1, cell(2, m.bytes).c_str(), cell(3, m.bytes).c_str(),
                cell(at_regs, m.bytes).c_str(), cell(at_regs4, m.bytes).c_str(), cell(at_smx, m.io).c_str(),
                ok ? "ok" : "FAILED", why.c_str());
  }
  return all_ok;
}

// v44 (norm_fwd.cu's rule of v44): v44's lean_block_plan packs and held parameters with cached I/O, the lean rows'
// other instances with cached I/O, the rest as v29.
template <typename T, bool kRms>
void launch_v44(const Bufs<T>& b, const Out<T>& o) {
  const jm::cuda::LeanBlock p = jm::cuda::lean_block_plan<T, kRms>(b.cols / jm::cuda::kVec<T>, false);
  std::string name;
  const auto at = [&](auto n) {
    constexpr int kN = decltype(n)::value;
    if (p.hold) {
      if constexpr (sizeof(T) == 4) early_np<T, kN, kRms, true, true, true>(b, o);
    } else {
      lean_np<kN, T, kRms, true>(b, o, &name);
    }
  };
  if (p.np == 2) {
    if constexpr (sizeof(T) == 4 && kRms) at(std::integral_constant<int, 2>{});
  } else if (p.np == 3) {
    if constexpr (sizeof(T) == 4 || kRms) at(std::integral_constant<int, 3>{});
  } else if (p.np == 4) {
    at(std::integral_constant<int, 4>{});
  } else {
    launch_v29<T, kRms, true>(b, o);
  }
}

// v44: the rule since v44 against v29's (twice: the A/A pair), % of the 1-pack copy; for bf16 also the lean block rows
// with cached I/O at 4 and 6 packs per thread where those are block rows.
template <typename T, bool kRms>
bool run_v44(const char* title) {
  std::printf("\n**%s: v44 / v29** (per sample: median (q1, q3) of v29's time over the variant's; %% of the 1-pack "
              "copy)\n\n| C | v44's plan (packs, held) | copy 1 GB/s | v29 GB/s (%%) | A/A | v44 | cached NP = 4 | "
              "cached NP = 6 | check |\n|---|---|---|---|---|---|---|---|---|\n", title);
  bool all_ok = true;
  for (int cols : kWidths) {
    Case<T> c(cols, 6);  // outputs: copy, v29, v29 again, v44, cached at 4, at 6
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy 1", [&] { inproc::copy<1, false>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v29", [&] { launch_v29<T, kRms>(c.b, c.outs[1]); }, {}});
    vs.push_back({"v29 again", [&] { launch_v29<T, kRms>(c.b, c.outs[2]); }, {}});
    vs.push_back({"v44", [&] { launch_v44<T, kRms>(c.b, c.outs[3]); }, {}});
    const auto block_np = [&](auto n, const Out<T>& o) {
      constexpr int kN = decltype(n)::value;
      const RowsPlan p = plan_norm_rows<T, kN>(cols);
      if (sizeof(T) == 4 || !p.ok || !p.block_rows) return false;
      lean_rows<T, kRms, true, kN, true, !kRms, true, false, true>(c.b, o, p);
      return true;
    };
    std::vector<std::pair<int, std::string>> outs{{1, "v29"}, {2, "v29 again"}, {3, "v44"}};
    int at4 = -1, at6 = -1;
    if (block_np(std::integral_constant<int, 4>{}, c.outs[4])) {
      at4 = static_cast<int>(vs.size());
      vs.push_back({"cached 4", [&] { block_np(std::integral_constant<int, 4>{}, c.outs[4]); }, {}});
      outs.push_back({4, "cached 4"});
    }
    if (block_np(std::integral_constant<int, 6>{}, c.outs[5])) {
      at6 = static_cast<int>(vs.size());
      vs.push_back({"cached 6", [&] { block_np(std::integral_constant<int, 6>{}, c.outs[5]); }, {}});
      outs.push_back({5, "cached 6"});
    }
    const Measured<T, kRms> m = measure<T, kRms>(c, vs, outs);
    const auto cell = [&](int i) { return ratio_cell(c, vs, i, m.bytes, m.copy1); };
    all_ok = all_ok && m.check.ok;
    const jm::cuda::LeanBlock p = jm::cuda::lean_block_plan<T, kRms>(cols / jm::cuda::kVec<T>, false);
    std::printf("| %d | %d, %s | %.0f | %.0f (%.0f%%) | %s | %s | %s | %s | %s:%s |\n", cols, p.np,
                p.hold ? "held" : "-", m.copy1, m.base, 100 * m.base / m.copy1, cell(2).c_str(), cell(3).c_str(),
                cell(at4).c_str(), cell(at6).c_str(), m.check.ok ? "ok" : "FAILED", m.check.why.c_str());
  }
  return all_ok;
}

// half-io (RESULTS.md "v45"): the f32 widths v44's rule leaves on norm_fwd_half.cuh's rows (C = 768, 1024, 12288 of
// issue 5; 512, team rows) with that kernel's kCachedIo, and the lean rows with cached I/O at other packs per thread
// (team rows of one warp, block rows, block rows holding their parameters), against v44's rule there (v4's rows,
// streaming; twice: the A/A pair), % of the 1-pack copy.
template <typename T, bool kIo>
void launch_half(const Bufs<T>& b, const Out<T>& o, bool rms) {
  const RowsPlan p = plan_norm_rows<T, jm::cuda::kRowPacksHalf>(b.cols);
  const auto go = [&](auto r) {
    constexpr bool kR = decltype(r)::value;
    if (p.block_rows) return half_rows<T, kR, true, jm::cuda::kRowPacksHalf, kIo>(b, o, p);
    half_rows<T, kR, false, jm::cuda::kRowPacksHalf, kIo>(b, o, p);
  };
  rms ? go(std::true_type{}) : go(std::false_type{});
}

// f(std::integral_constant<int, np>) for np of 3, 4, 6, 8; false for any other.
template <typename F>
bool with_np(int np, F&& f) {
  switch (np) {
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return false;
  }
}

template <bool kRms>
bool run_half_io(const char* title) {
  using T = float;
  std::printf("\n**%s: v4's rows with cached I/O** (per sample: median (q1, q3) of v44's time over the variant's; "
              "%% of the 1-pack copy)\n\n| C | copy 1 GB/s | v44 GB/s (%%) | A/A | v4 cached | lean cached (plan) | "
              "lean block cached (plan) | lean block cached, held | check |\n|---|---|---|---|---|---|---|---|---|\n",
              title);
  struct Width {
    int cols, np_a, np_b, np_held;
  };
  const Width widths[] = {{512, 4, 0, 0}, {768, 6, 3, 3}, {1024, 8, 4, 4}, {12288, 8, 6, 0}};  // 512: v4's team rows
  bool all_ok = true;
  for (const Width& w : widths) {
    Case<T> c(w.cols, 7);  // outputs: copy, v44, v44 again, v4 cached, lean a, lean b, lean held
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy 1", [&] { inproc::copy<1, false>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v44", [&] { launch_half<T, false>(c.b, c.outs[1], kRms); }, {}});
    vs.push_back({"v44 again", [&] { launch_half<T, false>(c.b, c.outs[2], kRms); }, {}});
    vs.push_back({"v4 cached", [&] { launch_half<T, true>(c.b, c.outs[3], kRms); }, {}});
    std::string plan_a = "-", plan_b = "-";
    const auto lean_at = [&](int np, int out, std::string* name) {
      return with_np(np, [&](auto n) { return lean_np<decltype(n)::value, T, kRms, true>(c.b, c.outs[out], name); });
    };
    const auto held_at = [&](int np, int out) {
      return with_np(np, [&](auto n) {
        return early_np<T, decltype(n)::value, kRms, true, true, true>(c.b, c.outs[out]);
      });
    };
    std::vector<std::pair<int, std::string>> outs{{1, "v44"}, {2, "v44 again"}, {3, "v4 cached"}};
    int at[3] = {-1, -1, -1};
    if (lean_at(w.np_a, 4, &plan_a)) {
      at[0] = static_cast<int>(vs.size());
      vs.push_back({"lean a", [&] { std::string n; lean_at(w.np_a, 4, &n); }, {}});
      outs.push_back({4, "lean " + plan_a});
    }
    if (lean_at(w.np_b, 5, &plan_b)) {
      at[1] = static_cast<int>(vs.size());
      vs.push_back({"lean b", [&] { std::string n; lean_at(w.np_b, 5, &n); }, {}});
      outs.push_back({5, "lean " + plan_b});
    }
    if (held_at(w.np_held, 6)) {
      at[2] = static_cast<int>(vs.size());
      vs.push_back({"lean held", [&] { held_at(w.np_held, 6); }, {}});
      outs.push_back({6, "lean held"});
    }
    const Measured<T, kRms> m = measure<T, kRms>(c, vs, outs);
    const auto cell = [&](int i) { return ratio_cell(c, vs, i, m.bytes, m.copy1); };
    all_ok = all_ok && m.check.ok;
    std::printf("| %d | %.0f | %.0f (%.0f%%) | %s | %s | %s (%s) | %s (%s) | %s | %s:%s |\n", w.cols, m.copy1, m.base,
                100 * m.base / m.copy1, cell(2).c_str(), cell(3).c_str(), cell(at[0]).c_str(), plan_a.c_str(),
                cell(at[1]).c_str(), plan_b.c_str(), cell(at[2]).c_str(), m.check.ok ? "ok" : "FAILED",
                m.check.why.c_str());
  }
  return all_ok;
}

// pairs (RESULTS.md "v48"): the lean block rows holding R rows per block (the kernel's R: each parameter pack loaded
// once for the R rows) and under register bounds (the kernel's kRegs: more resident rows), cached I/O, against v45's
// rule (launch_v44: the same for 16-bit rows; twice: the A/A pair) and the 8-pack rows without parameters (the bound
// v47 measured), % of the 1-pack copy.
template <typename T, bool kRms, int NP, int R, int kRegs = 0>
bool multi_rows(const Bufs<T>& b, const Out<T>& o) {
  const RowsPlan p = plan_norm_rows<T, NP>(b.cols);
  if (!p.ok || !p.block_rows || b.cols % jm::cuda::kVec<T> != 0 || p.block > jm::cuda::lean_bound_threads(kRegs)) {
    return false;
  }
  const bool s = b.scale != nullptr, bi = !kRms && b.bias != nullptr;
  const auto go = [&](auto kernel) {
    kernel<<<grid_of((b.rows + R - 1) / R), p.block>>>(b.x, b.scale, kRms ? nullptr : b.bias, o.y, o.mean, o.rstd,
                                                       b.rows, b.cols, 1.0f / static_cast<float>(b.cols), kEps, p.tpr);
  };
  if (s && (kRms || bi)) {
    go(jm::cuda::norm_fwd_lean_kernel<T, kRms, true, NP, true, !kRms, true, false, true, R, kRegs>);
  } else {
    go(jm::cuda::norm_fwd_lean_kernel<T, kRms, true, NP, false, false, true, false, true, R, kRegs>);
  }
  return true;
}

template <typename T, bool kRms>
bool run_pairs(const char* title, const std::vector<int>& widths) {
  using Fn = bool (*)(const Bufs<T>&, const Out<T>&);
  const std::pair<Fn, const char*> multis[] = {
      {multi_rows<T, kRms, 4, 2, 64>, "R = 2, NP = 4, 64 registers"},
      {multi_rows<T, kRms, 4, 2, 56>, "R = 2, NP = 4, 56"},
      {multi_rows<T, kRms, 3, 2, 64>, "R = 2, NP = 3, 64"},
      {multi_rows<T, kRms, 3, 2, 56>, "R = 2, NP = 3, 56"},
      {multi_rows<T, kRms, 6, 1, 64>, "NP = 6, 64"},
      {multi_rows<T, kRms, 2, 4, 64>, "R = 4, NP = 2, 64"},
      {multi_rows<T, kRms, 2, 4, 56>, "R = 4, NP = 2, 56"},
      // The thirty-third session's question: three rows per block where ptxas fits them without a spill (LayerNorm,
      // bf16): NP = 6 at 128 registers (256 threads at 12288: 2 blocks and 6 rows per SM, where v48's pick holds 4)
      // and NP = 3 at 80 (at most 384 threads: C <= 9216). [r3]
      {multi_rows<T, kRms, 6, 3, 128>, "R = 3, NP = 6, 128 [r3]"},
      {multi_rows<T, kRms, 3, 3, 80>, "R = 3, NP = 3, 80 [r3]"}};
  constexpr int kMulti = sizeof(multis) / sizeof(multis[0]);
  std::printf("\n**%s: R rows per block, register bounds** (per sample: median (q1, q3) of v45's time over the "
              "variant's; %% of the 1-pack copy)\n\n| C | copy 1 GB/s | v45 GB/s (%%) | A/A | no parameters |", title);
  for (const auto& m : multis) std::printf(" %s |", m.second);
  std::printf(" check |\n|---|---|---|---|---|");
  for (int i = 0; i < kMulti; ++i) std::printf("---|");
  std::printf("---|\n");
  bool all_ok = true;
  for (int cols : widths) {
    Case<T> c(cols, 4 + kMulti);  // outputs: copy, v45, v45 again, none, the variants
    const Bufs<T> none = c.b.with_params(false, false);
    std::vector<inproc::Variant> vs;
    vs.push_back({"copy 1", [&] { inproc::copy<1, false>(c.b.x, c.outs[0].y, c.n * int64_t{sizeof(T)}); }, {}});
    vs.push_back({"v45", [&] { launch_v44<T, kRms>(c.b, c.outs[1]); }, {}});
    vs.push_back({"v45 again", [&] { launch_v44<T, kRms>(c.b, c.outs[2]); }, {}});
    vs.push_back({"none", [&] { multi_rows<T, kRms, 8, 1>(none, c.outs[3]); }, {}});
    std::vector<std::pair<int, std::string>> outs{{1, "v45"}, {2, "v45 again"}};
    std::vector<int> at(kMulti, -1);
    for (int i = 0; i < kMulti; ++i) {
      if (!multis[i].first(c.b, c.outs[4 + i])) continue;  // probe: a plan of block rows within the bound
      at[i] = static_cast<int>(vs.size());
      vs.push_back({multis[i].second, [&, i] { multis[i].first(c.b, c.outs[4 + i]); }, {}});
      outs.push_back({4 + i, multis[i].second});
    }
    Measured<T, kRms> m = measure<T, kRms>(c, vs, outs);
    m.check(none, 3, "none");
    const auto cell = [&](int i) { return ratio_cell(c, vs, i, m.bytes, m.copy1); };
    all_ok = all_ok && m.check.ok;
    std::printf("| %d | %.0f | %.0f (%.0f%%) | %s | %s |", cols, m.copy1, m.base, 100 * m.base / m.copy1,
                cell(2).c_str(), cell(3).c_str());
    for (int i = 0; i < kMulti; ++i) std::printf(" %s |", cell(at[i]).c_str());
    std::printf(" %s:%s |\n", m.check.ok ? "ok" : "FAILED", m.check.why.c_str());
  }
  return all_ok;
}

}  // namespace

// Arguments: the ops to run, of ln-bf16 rms-bf16 ln-f32 rms-f32 (default these four), ln-params, early, packs-f32,
// packs-more, packs-bf16, v29, early-f32, early-bf16, io, v44, half-io and pairs.
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
  if (argc > 1 && want("ln-params")) ok = run_params() && ok;
  if (argc > 1 && want("early")) ok = run_early() && ok;
  const std::vector<int> all_widths(std::begin(kWidths), std::end(kWidths));
  if (argc > 1 && want("packs-f32")) {
    ok = run_packs<float, false, 1, 2, 3, 4>("LayerNorm, f32", "v28", launch_v28<float, false>, all_widths) && ok;
    ok = run_packs<float, true, 1, 2, 3, 4>("RMSNorm, f32", "v28", launch_v28<float, true>, all_widths) && ok;
  }
  if (argc > 1 && want("packs-more")) {
    ok = run_packs<float, false, 3, 4, 6, 8>("LayerNorm, f32", "v29", launch_v29<float, false>, {2048, 4096}) && ok;
    ok = run_packs<float, true, 3, 4, 6, 8>("RMSNorm, f32", "v29", launch_v29<float, true>, {2048, 4096}) && ok;
  }
  if (argc > 1 && want("v29")) {
    ok = run_v29<float, false>("LayerNorm, f32") && ok;
    ok = run_v29<float, true>("RMSNorm, f32") && ok;
    ok = run_v29<__nv_bfloat16, false>("LayerNorm, bf16") && ok;
    ok = run_v29<__nv_bfloat16, true>("RMSNorm, bf16") && ok;
  }
  if (argc > 1 && want("early-f32")) {
    ok = run_early_params<float, false>("LayerNorm, f32", {2048, 4096, 8192}) && ok;
    ok = run_early_params<float, true>("RMSNorm, f32", {2048, 4096, 8192}) && ok;
  }
  if (argc > 1 && want("early-bf16")) {
    ok = run_early_params<__nv_bfloat16, false>("LayerNorm, bf16", {4096, 8192, 12288}) && ok;
    ok = run_early_params<__nv_bfloat16, true>("RMSNorm, bf16", {4096, 8192, 12288}) && ok;
  }
  if (argc > 1 && want("v44")) {
    ok = run_v44<float, false>("LayerNorm, f32") && ok;
    ok = run_v44<float, true>("RMSNorm, f32") && ok;
    ok = run_v44<__nv_bfloat16, false>("LayerNorm, bf16") && ok;
    ok = run_v44<__nv_bfloat16, true>("RMSNorm, bf16") && ok;
  }
  if (argc > 1 && want("io")) {
    ok = run_io<float, false>("LayerNorm, f32", {2048, 4096, 8192}) && ok;
    ok = run_io<float, true>("RMSNorm, f32", {2048, 4096, 8192}) && ok;
    ok = run_io<__nv_bfloat16, false>("LayerNorm, bf16", {768, 1024, 2048, 4096, 8192, 12288}) && ok;
    ok = run_io<__nv_bfloat16, true>("RMSNorm, bf16", {768, 1024, 2048, 4096, 8192, 12288}) && ok;
  }
  if (argc > 1 && want("half-io")) {
    ok = run_half_io<false>("LayerNorm, f32") && ok;
    ok = run_half_io<true>("RMSNorm, f32") && ok;
  }
  if (argc > 1 && want("pairs")) {
    ok = run_pairs<__nv_bfloat16, false>("LayerNorm, bf16", {4096, 8192, 8200, 10000, 12288}) && ok;
    ok = run_pairs<__nv_bfloat16, true>("RMSNorm, bf16", {4096, 8192, 12288}) && ok;
  }
  if (argc > 1 && want("packs-bf16")) {
    ok = run_packs<__nv_bfloat16, false, 1, 2, 3, 4>("LayerNorm, bf16", "v28", launch_v28<__nv_bfloat16, false>,
                                                     all_widths) && ok;
    ok = run_packs<__nv_bfloat16, true, 1, 2, 3, 4>("RMSNorm, bf16", "v28", launch_v28<__nv_bfloat16, true>,
                                                    all_widths) && ok;
  }
  std::printf("\n%s\n", ok ? "all outputs checked: ok" : "SOME OUTPUTS FAILED THEIR CHECK");
  return ok ? 0 : 1;
}
