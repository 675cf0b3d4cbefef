// Branch-free float helpers of the CPU kernels, in plain arithmetic that GCC vectorizes: `pick`, a select, and
// e^a and 2^a for a <= 0 (libm's expf / exp2f are calls, which kept every loop around them scalar: the CPU
// softmax and GELU forwards spent most of their time there; RESULTS.md "v24"). The exps take the CPU kernels'
// arguments only: a <= 0, -inf (gives 0) or NaN (gives NaN).
//   2^a: a = n + f, n = round(a), |f| <= 1/2; 2^f by a degree-7 polynomial; 2^n from exponent bits.
//   e^a: n = round(a log2 e), r = a - n ln 2 (Cody-Waite: ln 2 in two parts, n ln2_hi exact), |r| <= 0.35;
//        e^r by its degree-7 Taylor polynomial.
// The polynomials' truncation error is below 6e-9 relative (|r|^8 / 8!). They are evaluated as four linear pairs
// combined by Horner's rule in r^2 (poly_deg7, v71): 8 dependent steps where plain Horner takes 14, and the exps'
// loops are bound by that chain, not by their operations (one core, every build: the exp loop 1.10-1.18x faster). The
// results are within 2 float ulp of the exact values (sampled: 1.33 ulp for e^a, 1.37 for 2^a; plain Horner 1.21,
// 1.10; Estrin's scheme, 6 steps, 1.8; test_softmax.py: test_cpu_exp_accuracy_f32). 2^n is one normal
// power of two: arguments are clamped where n would pass -126 (e^a: -87.5, 2^a: -126) and give 0 beyond, results just
// above the clamp are p * 2^-126 (subnormal for p < 1). XLA runs the CPU handlers with subnormals flushed to zero (as
// its own exp), so all of those came out 0 before too, when 2^n was two factors whose product rounded a subnormal
// once. One factor takes 5-6 vector operations fewer per element: the CPU softmax row loop 8-12% faster, GELU 7-14%,
// the same bits (RESULTS.md "The CPU handlers, v52").
#pragma once

#include <cstdint>
#include <cstring>

// The exps' helpers are inlined wherever they are called: an out-of-line call in an element loop keeps it scalar.
// GCC's heuristics stopped inlining exp_nonpositive once a file called it from five loops (v91's softmax: its CPU
// forward 6-10x slower everywhere until this).
#if defined(__GNUC__)
#define JM_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define JM_ALWAYS_INLINE inline
#endif

namespace jm {

// A float's bits and back.
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// c ? a : b on the host, without a branch: GCC branches on such a select, and with signs that change at random
// (GELU's inputs) it mispredicts half the time: half the CPU f32 forward's time (RESULTS.md "The CPU handlers");
// nested ternaries keep a loop from vectorizing at all ("control flow in loop"). pick_bits on 32-bit words (the
// f16 conversions of cpu_common.h), pick on floats. (The device selects in one instruction; its code keeps the
// plain ternaries, the cubin unchanged.)
inline uint32_t pick_bits(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}
inline float pick(bool c, float a, float b) { return bits_float(pick_bits(c, float_bits(a), float_bits(b))); }

namespace host {

// 2^n for an integer n in [-126, 0] given as the low bits of `biased` (round(x) + 0x4B400000, the bit pattern of
// x + 1.5 * 2^23). (A NaN's bits give some power; the polynomial is NaN then, and so is the result.)
inline float pow2_of(float biased) { return bits_float((float_bits(biased) - 0x4B400000u + 127u) << 23); }

constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: x + this rounds x to an integer (|x| < 2^22)

// c[0] + c[1] r + ... + c[7] r^7 as (c0 + c1 r) + r^2 ((c2 + c3 r) + r^2 ((c4 + c5 r) + r^2 (c6 + c7 r))).
JM_ALWAYS_INLINE float poly_deg7(float r, const float (&c)[8]) {
  const float r2 = r * r;
  const float p67 = c[6] + c[7] * r, p45 = c[4] + c[5] * r, p23 = c[2] + c[3] * r, p01 = c[0] + c[1] * r;
  return p01 + r2 * (p23 + r2 * (p45 + r2 * p67));
}

// 2^a for a <= 0 (NaN stays NaN: the comparisons are false; below 2^-126 the result is 0).
JM_ALWAYS_INLINE float exp2_nonpositive(float a) {
  const bool tiny = a < -126.0f;
  a = pick(tiny, -126.0f, a);  // a select GCC keeps (a ternary became a branch: the loop stayed scalar)
  const float biased = a + kRoundMagic;
  const float f = a - (biased - kRoundMagic);  // exact
  constexpr float kC[8] = {1.0f,                    // (ln 2)^k / k!, k = 0 .. 7
                           6.9314718055994531e-1f, 2.4022650695910071e-1f, 5.5504108664821580e-2f,
                           9.6181291076284772e-3f, 1.3333558146428443e-3f, 1.5403530393381609e-4f,
                           1.5252733804059841e-5f};
  return pick(tiny, 0.0f, poly_deg7(f, kC) * pow2_of(biased));
}

// e^a for a <= 0 (NaN stays NaN; below -87.5, where n = round(a log2 e) would pass -126, the result is 0).
JM_ALWAYS_INLINE float exp_nonpositive(float a) {
  const bool tiny = a < -87.5f;
  a = pick(tiny, -87.5f, a);
  const float biased = a * 1.4426950408889634f + kRoundMagic;
  const float n = biased - kRoundMagic;
  const float r = (a - n * 0.693145751953125f) - n * 1.4286068203094172e-6f;  // ln 2 = hi + lo, hi 16 bits
  constexpr float kC[8] = {1.0f, 1.0f, 0.5f, 1.6666666666666667e-1f,  // 1 / k!, k = 0 .. 7
                           4.1666666666666667e-2f, 8.3333333333333333e-3f, 1.3888888888888889e-3f,
                           1.9841269841269841e-4f};
  return pick(tiny, 0.0f, poly_deg7(r, kC) * pow2_of(biased));
}

}  // namespace host
}  // namespace jm
