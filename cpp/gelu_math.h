// The tanh-form GELU and its derivative, shared by the CPU and CUDA kernels.
//   gelu(u) = 0.5 u (1 + tanh(z/2)) = u * sigmoid(z),  z = 2k (u + 0.044715 u^3),  k = sqrt(2/pi)
// The sigmoid form has no 1 + tanh(..) cancellation for u << 0, and sigmoid is evaluated from
// e = exp(-|z|) <= 1 so nothing overflows for any finite u.
//
// On the GPU exp and the division use the hardware's approximations (ex2.approx.ftz of a pre-scaled
// argument; rcp.approx.ftz, 1 ulp), and the forward a shorter form (gelu below). With the accurate expf
// and IEEE division the kernel was compute-bound on the H200 (bf16 at 2^28 elements: 2.4 TB/s against
// a 3.9 TB/s copy). Their error here stays a few float32 ulp: the argument of exp is <= 0 and the
// divisor 1 + e lies in [1, 2], where both are at their best; a large |z| only perturbs e, which is then
// negligible beside 1. (tanh.approx, ~2^-11 relative, is not used.)
#pragma once

#include <cmath>

#include "host_math.h"

#if defined(__CUDACC__)
#define JM_HD __host__ __device__ __forceinline__
#else
#define JM_HD JM_ALWAYS_INLINE  // host_math.h: scalar loops otherwise, where a file calls these from many loops
#endif

namespace jm {

#if defined(__CUDA_ARCH__)
// 2^a and 1/d, one special-function-unit instruction each. The .ftz forms: without it ptxas wraps each
// MUFU op in a denormal range fix-up (compare, scale, scale back), which __expf / __fdividef carried
// (v2). Flushing is harmless here: 2^a underflows only where it is negligible beside 1, and 1/d only
// for d > 2^126, where the sigmoid is 0 anyway.
__device__ __forceinline__ float ex2_approx_ftz(float a) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}
__device__ __forceinline__ float rcp_approx_ftz(float d) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  return r;
}
#endif

constexpr float kLog2E = 1.4426950408889634f;

// a * b + c: one fused instruction on the device; on the host a product and a sum (without hardware FMA in the
// build's baseline, fmaf is a libm call that keeps the loop around it scalar and costs tens of cycles).
JM_HD float mul_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return a * b + c;
#endif
}

// exp(a) for a <= 0 and n / d for d in [1, 2]: fast intrinsics on the device; on the host host_math.h's
// polynomials (within 2 ulp; vectorizable, where libm's calls are not) and IEEE division (host_math.h also holds
// `pick`, the host's branch-free select).
JM_HD float exp_nonpositive(float a) {
#if defined(__CUDA_ARCH__)
  return ex2_approx_ftz(a * kLog2E);
#else
  return host::exp_nonpositive(a);
#endif
}
// 2^a for a <= 0.
JM_HD float exp2_nonpositive(float a) {
#if defined(__CUDA_ARCH__)
  return ex2_approx_ftz(a);
#else
  return host::exp2_nonpositive(a);
#endif
}
JM_HD float div_by_1_to_2(float n, float d) {
#if defined(__CUDA_ARCH__)
  return n * rcp_approx_ftz(d);
#else
  return n / d;
#endif
}

constexpr float kGeluTwoK = 1.5957691216057308f;  // 2 * sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// -z * log2(e) = u * (kGeluNegL2 + kGeluNegCubicL2 * u^2).
constexpr float kGeluNegL2 = -2.302208198144325f;        // -2k log2(e)
constexpr float kGeluNegCubicL2 = -0.1029432395800235f;  // -2k * 0.044715 * log2(e)

JM_HD float gelu(float u) {
#if defined(__CUDA_ARCH__)
  // u * sigmoid(z) = u / (1 + 2^(-z log2 e)): 4 FP32 operations and 2 MUFU (v3; the |z| / select form
  // below took about twice the instructions, and 16-bit data is issue-bound on them). No cancellation
  // anywhere: 1 + e >= 1. For z << 0, e overflows to inf and u * (1 / inf) = -0 (u finite); u = +-inf
  // give inf and NaN as the form below does.
  const float e = ex2_approx_ftz(u * fmaf(kGeluNegCubicL2, u * u, kGeluNegL2));
  return u * rcp_approx_ftz(1.0f + e);
#else
  // The sigmoid from 2^-|n|, n = -z log2(e) formed as the device forms it and as gelu_grad does: 2^a needs no
  // argument reduction by ln 2 (v71: with the exps' shorter chain, host_math.h, the CPU forward loop 1.29-1.35x).
  const float n = u * mul_add(kGeluNegCubicL2, u * u, kGeluNegL2);
  const float e = exp2_nonpositive(-fabsf(n));
  const float sig = div_by_1_to_2(pick(n <= 0.0f, 1.0f, e), 1.0f + e);
  return u * sig;
#endif
}

// d gelu / du = sigmoid(z) + u sigmoid(z) (1 - sigmoid(z)) z',  z' = 2k (1 + 3 * 0.044715 u^2).
// With n = -z log2(e) (the forward's exponent) and e = 2^-|n| = exp(-|z|) <= 1: inv = 1 / (1 + e),
// sigmoid(z) = inv (z >= 0) or e * inv, and sigmoid(z) (1 - sigmoid(z)) = e * inv^2 without cancellation.
// Branch-free (v8): the |u| > 1e4 limit is a select after the arithmetic, whose 0 * inf there is
// discarded; the former branch per element cost ~5 control instructions of ~30 in the bf16 backward.
JM_HD float gelu_grad(float u) {
  const float w = u * u;
  const float n = u * mul_add(kGeluNegCubicL2, w, kGeluNegL2);
  const float dz = mul_add(3.0f * kGeluTwoK * kGeluCubic, w, kGeluTwoK);
  const float e = exp2_nonpositive(-fabsf(n));
  const float inv = div_by_1_to_2(1.0f, 1.0f + e);
  const float ei = e * inv;
#if defined(__CUDA_ARCH__)
  const float g = fmaf(u * dz, ei * inv, n <= 0.0f ? inv : ei);
  return fabsf(u) > 1.0e4f ? (u > 0.0f ? 1.0f : 0.0f) : g;  // beyond float resolution
#else
  const float g = mul_add(u * dz, ei * inv, pick(n <= 0.0f, inv, ei));
  return pick(fabsf(u) > 1.0e4f, pick(u > 0.0f, 1.0f, 0.0f), g);
#endif
}
}  // namespace jm
