// cpu_common.h's branch-free f16 conversions against the branching forms they replaced (RESULTS.md "The CPU
// handlers, v25"), exhaustively: every half to float, every float to half (round to nearest, ties to even; NaN
// quiet; inf from 65520 up), bit for bit; with the argument "ftz" under flush-to-zero and denormals-are-zero, as
// XLA runs the CPU handlers.
//
//   g++ -O3 -std=c++17 -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp \
//       benchmarks/f16_convert_check.cc -o /tmp/f16_check && /tmp/f16_check && /tmp/f16_check ftz
#include <pmmintrin.h>
#include <xmmintrin.h>

#include <cmath>
#include <cstdio>
#include <string>

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
  return to_bad == 0 && from_bad == 0 ? 0 : 1;
}
