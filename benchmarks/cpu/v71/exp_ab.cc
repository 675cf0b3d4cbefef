// v71's in-process A/B (RESULTS.md "The CPU handlers, v71"): the CPU kernels' inner loops with the exps of v70
// (Horner's rule, 14 dependent steps; GELU's forward through e^-|z|) against cpp/'s (host_math.h's poly_deg7, 8 steps;
// the forward through 2^-|n|), alternated in one process, on 2^22 floats (16 MB: past L2) and on 2^13 (in L1).
// Build as the AVX-512 handlers are built (CMakeLists.txt; the AVX2 build: -mavx2 -mf16c; baseline: neither), then
// run on one core (exp_ab.txt: the three builds):
//   g++ -O3 -std=c++17 -ffp-contract=off -mavx2 -mf16c -mavx512f -mavx512bw -mavx512cd -mavx512dq -mavx512vl
//       -Icpp benchmarks/cpu/v71/exp_ab.cc -o /tmp/exp_ab && taskset -c 0 /tmp/exp_ab
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "gelu_math.h"

namespace v70 {  // host_math.h's exps and gelu_math.h's host GELU as of v70
using namespace jm;
using namespace jm::host;
inline float exp2_nonpositive(float a) {
  const bool tiny = a < -126.0f;
  a = pick(tiny, -126.0f, a);
  const float biased = a + kRoundMagic;
  const float f = a - (biased - kRoundMagic);
  float p = 1.5252733804059841e-5f;
  p = p * f + 1.5403530393381609e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  return pick(tiny, 0.0f, p * pow2_of(biased));
}
inline float exp_nonpositive(float a) {
  const bool tiny = a < -87.5f;
  a = pick(tiny, -87.5f, a);
  const float biased = a * 1.4426950408889634f + kRoundMagic;
  const float n = biased - kRoundMagic;
  const float r = (a - n * 0.693145751953125f) - n * 1.4286068203094172e-6f;
  float p = 1.9841269841269841e-4f;
  p = p * r + 1.3888888888888889e-3f;
  p = p * r + 8.3333333333333333e-3f;
  p = p * r + 4.1666666666666667e-2f;
  p = p * r + 1.6666666666666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return pick(tiny, 0.0f, p * pow2_of(biased));
}
inline float gelu(float u) {
  const float z = kGeluTwoK * u * (1.0f + kGeluCubic * u * u);
  const float e = exp_nonpositive(-fabsf(z));
  return u * (pick(z >= 0.0f, 1.0f, e) / (1.0f + e));
}
inline float gelu_grad(float u) {  // gelu_math.h's, on v70's exp2
  const float w = u * u;
  const float n = u * (kGeluNegCubicL2 * w + kGeluNegL2);
  const float dz = 3.0f * kGeluTwoK * kGeluCubic * w + kGeluTwoK;
  const float e = exp2_nonpositive(-fabsf(n));
  const float inv = 1.0f / (1.0f + e);
  const float ei = e * inv;
  const float g = u * dz * (ei * inv) + pick(n <= 0.0f, inv, ei);
  return pick(fabsf(u) > 1.0e4f, pick(u > 0.0f, 1.0f, 0.0f), g);
}
}  // namespace v70

using Loop = void (*)(const float* __restrict__, const float* __restrict__, float* __restrict__, long);
template <bool kNew>
__attribute__((noinline)) void exp_loop(const float* __restrict__ x, const float*, float* __restrict__ y, long n) {
  for (long i = 0; i < n; ++i) y[i] = kNew ? jm::host::exp_nonpositive(x[i] - 8.0f) : v70::exp_nonpositive(x[i] - 8.0f);
}
template <bool kNew>
__attribute__((noinline)) void gelu_loop(const float* __restrict__ x, const float*, float* __restrict__ y, long n) {
  for (long i = 0; i < n; ++i) y[i] = kNew ? jm::gelu(x[i] * 1.5f + 0.25f) : v70::gelu(x[i] * 1.5f + 0.25f);
}
template <bool kNew>
__attribute__((noinline)) void grad_loop(const float* __restrict__ x, const float* __restrict__ dy,
                                         float* __restrict__ y, long n) {
  for (long i = 0; i < n; ++i) {
    const float u = x[i] * 1.5f + 0.25f;
    y[i] = dy[i] * (kNew ? jm::gelu_grad(u) : v70::gelu_grad(u));
  }
}

int main() {
  const long kBig = 1L << 22, kSmall = 1L << 13;
  std::vector<float> x(kBig), dy(kBig), y(kBig);
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (auto& v : x) v = d(g);
  for (auto& v : dy) v = d(g);
  struct Case { const char* name; Loop old_loop, new_loop; };
  const Case cases[] = {{"exp (softmax's row loop)", exp_loop<false>, exp_loop<true>},
                        {"gelu forward", gelu_loop<false>, gelu_loop<true>},
                        {"dy * gelu'", grad_loop<false>, grad_loop<true>}};
  std::printf("| loop | floats | v70 ms | v71 ms | v70 / v71 |\n|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    for (long n : {kBig, kSmall}) {
      const long reps = kBig / n;  // the same 2^22 elements either way
      std::vector<double> t[2];
      for (int k = 0; k < 31; ++k) {
        for (int v = 0; v < 2; ++v) {
          const Loop f = v ? c.new_loop : c.old_loop;
          const auto t0 = std::chrono::steady_clock::now();
          for (long q = 0; q < reps; ++q) f(x.data(), dy.data(), y.data(), n);
          t[v].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
      }
      for (auto& s : t) std::sort(s.begin(), s.end());
      std::printf("| %s | 2^%d | %.3f | %.3f | %.2f |\n", c.name, n == kBig ? 22 : 13, t[0][15], t[1][15],
                  t[0][15] / t[1][15]);
    }
  }
  return 0;
}
