// v71's accuracy check (RESULTS.md "The CPU handlers, v71"): the exps and GELU of v70 (exp_ab.cc's namespace v70)
// and of cpp/ against double precision, in float ulp of the exact value (results below the smallest normal float
// skipped: XLA flushes them). e^a: 6e7 arguments drawn over [-87, 0] (half of them scaled by 1e-3); 2^a: the same
// times 1.44; GELU and its derivative: about every third float of 1e-3 <= |u| <= 12 where the exact GELU is above
// 1e-30 (its tail below that ends where the exps are clamped, at 2^-126; there, the float rounding of z, ~|z| ulp of
// e^z, dominates); the derivative crosses 0 near u = -0.75, so its error is absolute, in units of 2^-24.
//   g++ -O2 -std=c++17 -ffp-contract=off -Icpp benchmarks/cpu/v71/accuracy.cc -o /tmp/accuracy && /tmp/accuracy
#include <cmath>
#include <cstdint>
#include <cstdio>

#define main exp_ab_main
#include "exp_ab.cc"
#undef main

namespace {
double ulps(float got, double ref, double floor = 1.17549435e-38) {
  if (std::fabs(ref) < floor) return 0.0;
  const float r = static_cast<float>(ref);
  return std::fabs(got - ref) / (std::nextafter(std::fabs(r), INFINITY) - std::fabs(static_cast<double>(r)));
}
double gelu64(double u) { return u / (1.0 + std::exp(-1.5957691216057308 * (u + 0.044715 * u * u * u))); }
double gelu_grad64(double u) {
  const double k = 1.5957691216057308, z = k * (u + 0.044715 * u * u * u), s = 1.0 / (1.0 + std::exp(-z));
  return s + u * s * (1.0 - s) * k * (1.0 + 3.0 * 0.044715 * u * u);
}
}  // namespace

int main() {
  double m[8] = {};
  uint64_t s = 88172645463325252ull;
  for (long i = 0; i < 60000000; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    float a = -static_cast<float>((s >> 11) * (1.0 / 9007199254740992.0)) * 87.0f;
    if (i & 1) a *= 1e-3f;
    const double e = std::exp(static_cast<double>(a)), e2 = std::exp2(static_cast<double>(a * 1.44f));
    m[0] = std::max(m[0], ulps(v70::exp_nonpositive(a), e));
    m[1] = std::max(m[1], ulps(jm::host::exp_nonpositive(a), e));
    m[2] = std::max(m[2], ulps(v70::exp2_nonpositive(a * 1.44f), e2));
    m[3] = std::max(m[3], ulps(jm::host::exp2_nonpositive(a * 1.44f), e2));
  }
  for (float a = 1e-3f; a <= 12.0f; a += a * 3e-7f) {  // about every third float
    for (float u : {a, -a}) {
      m[4] = std::max(m[4], ulps(v70::gelu(u), gelu64(u), 1e-30));
      m[5] = std::max(m[5], ulps(jm::gelu(u), gelu64(u), 1e-30));
      m[6] = std::max(m[6], std::fabs(v70::gelu_grad(u) - gelu_grad64(u)) * 0x1p24);  // crosses 0: absolute
      m[7] = std::max(m[7], std::fabs(jm::gelu_grad(u) - gelu_grad64(u)) * 0x1p24);
    }
  }
  std::printf("| function | v70 max ulp | v71 max ulp |\n|---|---|---|\n");
  const char* names[] = {"e^a", "2^a", "gelu", "gelu' (absolute error in units of 2^-24)"};
  for (int k = 0; k < 4; ++k) std::printf("| %s | %.2f | %.2f |\n", names[k], m[2 * k], m[2 * k + 1]);
}
