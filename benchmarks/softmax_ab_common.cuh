// The softmax forward harnesses' shared pieces (softmax_fwd_ab.cu, softmax_long_ab.cu): x uniform in [-8, 8),
// each output compared with float64 on sampled rows, the copies timed beside the variants, and main's case loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cuda_common.cuh"
#include "inproc_ab.cuh"

template <typename T>
__global__ void fill_x(T* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float u = static_cast<float>(inproc::hash(static_cast<uint32_t>(i), seed) & 0xffffff) / 1048576.0f - 8;
    x[i] = jm::cuda::from_float<T>(u);  // uniform in [-8, 8): exps over ~7 decades
  }
}

// Max over sampled rows of max |y - softmax(x)| / max softmax(x) (float64); 1e30 where any element of y is not
// finite (the outputs start as NaN: a row left unwritten shows even where no sample falls).
template <typename T>
double check_rows(const T* xd, const T* yd, int64_t rows, int cols) {
  const int64_t n = rows * cols;
  std::vector<T> x(n), y(n);
  CK(cudaMemcpy(x.data(), xd, n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y.data(), yd, n * sizeof(T), cudaMemcpyDeviceToHost));
  for (const T& v : y) {
    if (!std::isfinite(inproc::to_f(v))) return 1e30;
  }
  double worst = 0;
  for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 211)) {
    const T* xr = x.data() + r * cols;
    double m = -INFINITY, s = 0, top = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, double(inproc::to_f(xr[c])));
    for (int c = 0; c < cols; ++c) s += std::exp(double(inproc::to_f(xr[c])) - m);
    for (int c = 0; c < cols; ++c) top = std::max(top, std::exp(double(inproc::to_f(xr[c])) - m) / s);
    for (int c = 0; c < cols; ++c) {
      const double want = std::exp(double(inproc::to_f(xr[c])) - m) / s, got = inproc::to_f(y[r * cols + c]);
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want) / top : 1e30);
    }
  }
  return worst;
}

// The three copies each harness times beside its variants, of x into ys[0..2] (the same bytes, one read and one write).
inline void add_copies(std::vector<inproc::Variant>& vs, const void* x, void* const* ys, int64_t bytes) {
  void *y0 = ys[0], *y1 = ys[1], *y2 = ys[2];
  vs.push_back({"copy: 4 words per thread, streaming", [=] { inproc::copy<4, true>(x, y0, bytes); }, {}});
  vs.push_back({"copy: 4 words per thread, plain", [=] { inproc::copy<4, false>(x, y1, bytes); }, {}});
  vs.push_back({"copy: 1 word per thread, plain", [=] { inproc::copy<1, false>(x, y2, bytes); }, {}});
}

// A table's check cell for output y of x: "ok" or "FAILED" and check_rows' error (bound 1e-5 for f32, 1/64 for
// 16-bit types); *ok turns false on a failure.
template <typename T>
std::string check_cell(const T* x, const T* y, int64_t rows, int cols, bool* ok) {
  const double err = check_rows(x, y, rows, cols);
  const bool good = err < (sizeof(T) == 4 ? 1e-5 : 1.0 / 64);
  *ok = *ok && good;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s %.1e", good ? "ok" : "FAILED", err);
  return buf;
}

// A harness's main: the cases dtype:C (f32 or bf16) of argv, else `defaults`, each run by f32 or bf16 (its table,
// true where every output checked ok), after a line naming the device and `what`. Exit status: 0 all ok, 1 a
// failed check, 2 a malformed case.
inline int run_cases(int argc, char** argv, std::vector<std::string> defaults, const char* what,
                     bool (*f32)(const char*, int, int), bool (*bf16)(const char*, int, int)) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, L2 %d MB; %s, %d samples, each variant once per sample in a rotated order\n", prop.name,
              sms, prop.l2CacheSize >> 20, what, inproc::kSamples);
  std::vector<std::string> cases(argv + 1, argv + argc);
  if (cases.empty()) cases = std::move(defaults);
  bool ok = true;
  for (const std::string& c : cases) {
    const size_t colon = c.find(':');
    const std::string dtype = c.substr(0, colon);
    const int cols = colon == std::string::npos ? 0 : std::atoi(c.c_str() + colon + 1);
    if (cols <= 0 || (dtype != "f32" && dtype != "bf16")) {
      std::fprintf(stderr, "bad case %s: expected f32:C or bf16:C\n", c.c_str());
      return 2;
    }
    ok = (dtype == "f32" ? f32("f32", cols, sms) : bf16("bf16", cols, sms)) && ok;
  }
  std::printf("\n%s\n", ok ? "all outputs checked: ok" : "SOME OUTPUTS FAILED THEIR CHECK");
  return ok ? 0 : 1;
}
