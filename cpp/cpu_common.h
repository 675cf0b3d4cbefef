// CPU side of the dtype dispatch: 16-bit float storage types with exact conversions to and from float
// (round to nearest even), so the CPU handlers need no compiler extension or CUDA header.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "ffi_common.h"

namespace jm::cpu {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float to_float(float v) { return v; }
inline float to_float(bf16 v) { return bits_float(uint32_t(v.bits) << 16); }
inline float to_float(f16 v) {
  uint32_t sign = uint32_t(v.bits & 0x8000) << 16;
  uint32_t exp = (v.bits >> 10) & 0x1f, man = v.bits & 0x3ff;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  float sub = std::ldexp(static_cast<float>(man), -24);                   // subnormal or zero
  return sign ? -sub : sub;
}

template <typename T>
T from_float(float v);

template <>
inline float from_float<float>(float v) {
  return v;
}

template <>
inline bf16 from_float<bf16>(float v) {
  uint32_t u = float_bits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

template <>
inline f16 from_float<f16>(float v) {
  uint32_t u = float_bits(v);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f16{uint16_t(sign | 0x7e00)};     // NaN
  if (a >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00)};    // rounds to >= 65520: inf
  if (a < 0x38800000u) {                                         // below 2^-14: subnormal half
    float r = std::nearbyint(bits_float(a) * 16777216.0f);       // units of 2^-24, ties to even
    return f16{uint16_t(sign | static_cast<uint16_t>(r))};
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);              // round mantissa to 10 bits
  return f16{uint16_t(sign | ((rounded - 0x38000000u) >> 13))};
}

template <ffi::DataType D>
struct Elem;
template <>
struct Elem<ffi::DataType::F32> {
  using type = float;
};
template <>
struct Elem<ffi::DataType::BF16> {
  using type = bf16;
};
template <>
struct Elem<ffi::DataType::F16> {
  using type = f16;
};

// The CPU element type of a dispatch tag: `using T = elem_t<decltype(tag)>;`
template <typename Tag>
using elem_t = typename Elem<Tag::value>::type;

// Parameter value of column c for row r (absent -> fallback).
inline float param_at(const ParamView& p, int64_t r, int64_t c, int64_t cols, float fallback) {
  return p.data ? p.data[(r / p.rows_per_group) * cols + c] : fallback;
}

}  // namespace jm::cpu
