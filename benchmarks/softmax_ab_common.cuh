// The softmax forward harnesses' inputs and checks (softmax_fwd_ab.cu, softmax_long_ab.cu): x uniform in [-8, 8),
// each output compared with float64 on sampled rows.
#pragma once

#include <algorithm>
#include <cmath>
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

// Max over sampled rows of max |y - softmax(x)| / max softmax(x) (float64).
template <typename T>
double check_rows(const T* xd, const T* yd, int64_t rows, int cols) {
  const int64_t n = rows * cols;
  std::vector<T> x(n), y(n);
  CK(cudaMemcpy(x.data(), xd, n * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(y.data(), yd, n * sizeof(T), cudaMemcpyDeviceToHost));
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
