// cpu_common.h's branch-free f16 conversions against the branching forms they replaced (RESULTS.md "The CPU
// handlers, v25"), exhaustively: every half to float, every float to half (round to nearest, ties to even; NaN
// quiet; inf from 65520 up), bit for bit; with the argument "ftz" under flush-to-zero and denormals-are-zero, as
// XLA runs the CPU handlers. Then the row conversions (to_floats, from_floats) against the scalar ones, which in
// builds with F16C are the hardware's: build it with each CPU build's flags too (-mavx2 -mf16c; -mavx512f ... -mf16c).
//
//   g++ -O3 -std=c++17 -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp \
//       benchmarks/f16_convert_check.cc -o /tmp/f16_check && /tmp/f16_check && /tmp/f16_check ftz
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cpu_common.h"

namespace {

using jm::bits_float;
using jm::cpu::f16;
using jm::float_bits;

float branching_to_float(f16 v) {
  const uint32_t sign = uint32_t(v.bits & 0x8000) << 16;
  const uint32_t exp = (v.bits >> 10) & 0x1f, man = v.bits & 0x3ff;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  const float sub = std::ldexp(static_cast<float>(man), -24);  // subnormal or zero
  return sign ? -sub : sub;
}

uint16_t branching_from_float(float v) {
  const uint32_t u = float_bits(v);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to >= 65520: inf
  if (a < 0x38800000u) return uint16_t(sign | uint16_t(std::nearbyint(bits_float(a) * 16777216.0f)));
  return uint16_t(sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13));
}

// NaNs quieted: the hardware's f16 -> float quiets a signaling NaN, which to_float keeps (cpu_common.h).
uint32_t quieted(float f) { return std::isnan(f) ? float_bits(f) | 0x00400000u : float_bits(f); }

// The row conversions (to_floats / from_floats: the hardware's in builds with F16C) against the scalar ones, for
// every half and every float, in rows of an odd length (their vector loops and scalar tails both run).
long check_rows() {
  constexpr int64_t kRow = 4099;
  std::vector<f16> halves(kRow);
  std::vector<float> floats(kRow);
  long to_bad = 0, from_bad = 0;
  for (uint32_t h0 = 0; h0 < 65536; h0 += kRow) {
    const int64_t n = std::min<int64_t>(kRow, 65536 - h0);
    for (int64_t i = 0; i < n; ++i) halves[i].bits = uint16_t(h0 + i);
    jm::cpu::to_floats(halves.data(), floats.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (quieted(floats[i]) != quieted(jm::cpu::to_float(halves[i])) && to_bad++ < 5) {
        std::printf("to_floats(0x%04x): 0x%08x, want 0x%08x\n", halves[i].bits, float_bits(floats[i]),
                    float_bits(jm::cpu::to_float(halves[i])));
      }
    }
  }
  for (uint64_t u0 = 0; u0 < (uint64_t{1} << 32); u0 += kRow) {
    const int64_t n = static_cast<int64_t>(std::min<uint64_t>(kRow, (uint64_t{1} << 32) - u0));
    for (int64_t i = 0; i < n; ++i) floats[i] = bits_float(uint32_t(u0 + i));
    jm::cpu::from_floats(floats.data(), halves.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = jm::cpu::from_float<f16>(floats[i]).bits;
      if (halves[i].bits != want && from_bad++ < 5) {
        std::printf("from_floats(0x%08x): 0x%04x, want 0x%04x\n", float_bits(floats[i]), halves[i].bits, want);
      }
    }
  }
  std::printf("rows (%s): to_floats %ld of 65536 differ, from_floats %ld of 2^32 differ\n",
#if defined(__F16C__)
              "F16C",
#else
              "software",
#endif
              to_bad, from_bad);
  return to_bad + from_bad;
}

}  // namespace

int main(int argc, char** argv) {
  const bool ftz = argc > 1 && std::string(argv[1]) == "ftz";
  if (ftz) {
    _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
    _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
  }
  long to_bad = 0, from_bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const f16 v{uint16_t(h)};
    if (float_bits(jm::cpu::to_float(v)) != float_bits(branching_to_float(v)) && to_bad++ < 5) {
      std::printf("to_float(0x%04x): 0x%08x, want 0x%08x\n", h, float_bits(jm::cpu::to_float(v)),
                  float_bits(branching_to_float(v)));
    }
  }
  uint32_t u = 0;
  do {
    const float f = bits_float(u);
    const uint16_t got = jm::cpu::from_float<f16>(f).bits, want = branching_from_float(f);
    if (got != want && from_bad++ < 5) std::printf("from_float(0x%08x): 0x%04x, want 0x%04x\n", u, got, want);
  } while (++u != 0);
  std::printf("%s: to_float %ld of 65536 differ, from_float %ld of 2^32 differ\n", ftz ? "FTZ/DAZ" : "IEEE", to_bad,
              from_bad);
  const long rows_bad = check_rows();
  return to_bad == 0 && from_bad == 0 && rows_bad == 0 ? 0 : 1;
}
