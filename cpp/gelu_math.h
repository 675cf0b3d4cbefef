// The tanh-form GELU and its derivative, shared by the CPU and CUDA kernels.
//   gelu(u) = 0.5 u (1 + tanh(z/2)) = u * sigmoid(z),  z = 2k (u + 0.044715 u^3),  k = sqrt(2/pi)
// The sigmoid form has no 1 + tanh(..) cancellation for u << 0, and sigmoid is evaluated from
// e = exp(-|z|) <= 1 so nothing overflows for any finite u.
//
// On the GPU exp and the division use the hardware intrinsics (__expf: ex2.approx of a pre-scaled
// argument; __fdividef: 2 ulp). With the accurate expf and IEEE division the kernel was compute-bound on
// the H200 (bf16 at 2^28 elements: 2.4 TB/s against a 3.9 TB/s copy). Their error here stays a few
// float32 ulp: the argument of exp is <= 0 and the divisor 1 + e lies in [1, 2], where both are at their
// best; a large |z| only perturbs e, which is then negligible beside 1. (tanh.approx, ~2^-11 relative,
// is not used.)
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define JM_HD __host__ __device__ __forceinline__
#else
#define JM_HD inline
#endif

namespace jm {

// exp(a) for a <= 0 and n / d for d in [1, 2]: fast intrinsics on the device, the libm versions on the host.
JM_HD float exp_nonpositive(float a) {
#if defined(__CUDA_ARCH__)
  return __expf(a);
#else
  return std::exp(a);
#endif
}
JM_HD float div_by_1_to_2(float n, float d) {
#if defined(__CUDA_ARCH__)
  return __fdividef(n, d);
#else
  return n / d;
#endif
}

constexpr float kGeluTwoK = 1.5957691216057308f;  // 2 * sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

JM_HD float gelu_z(float u) { return kGeluTwoK * u * (1.0f + kGeluCubic * u * u); }

JM_HD float gelu(float u) {
  const float z = gelu_z(u);
  const float e = exp_nonpositive(-fabsf(z));
  const float sig = div_by_1_to_2(z >= 0.0f ? 1.0f : e, 1.0f + e);
  return u * sig;
}

// d gelu / du = sigmoid(z) + u sigmoid(z) (1 - sigmoid(z)) z',  z' = 2k (1 + 3 * 0.044715 u^2).
JM_HD float gelu_grad(float u) {
  if (fabsf(u) > 1.0e4f) return u > 0.0f ? 1.0f : 0.0f;  // beyond float resolution; avoids 0 * inf
  const float z = gelu_z(u);
  const float e = exp_nonpositive(-fabsf(z));
  const float inv = div_by_1_to_2(1.0f, 1.0f + e);
  const float sig = (z >= 0.0f ? 1.0f : e) * inv;
  const float dsig = e * inv * inv;  // sigmoid(z) (1 - sigmoid(z)) without cancellation
  const float dz = kGeluTwoK * (1.0f + 3.0f * kGeluCubic * u * u);
  return sig + u * dsig * dz;
}

}  // namespace jm
