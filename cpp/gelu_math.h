// The tanh-form GELU and its derivative, shared by the CPU and CUDA kernels.
//   gelu(u) = 0.5 u (1 + tanh(z/2)) = u * sigmoid(z),  z = 2k (u + 0.044715 u^3),  k = sqrt(2/pi)
// The sigmoid form has no 1 + tanh(..) cancellation for u << 0, and sigmoid is evaluated from
// e = exp(-|z|) <= 1 so nothing overflows for any finite u.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define JM_HD __host__ __device__ __forceinline__
#else
#define JM_HD inline
#endif

namespace jm {

constexpr float kGeluTwoK = 1.5957691216057308f;  // 2 * sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

JM_HD float gelu_z(float u) { return kGeluTwoK * u * (1.0f + kGeluCubic * u * u); }

JM_HD float gelu(float u) {
  const float z = gelu_z(u);
  const float e = expf(-fabsf(z));
  const float sig = (z >= 0.0f ? 1.0f : e) / (1.0f + e);
  return u * sig;
}

// d gelu / du = sigmoid(z) + u sigmoid(z) (1 - sigmoid(z)) z',  z' = 2k (1 + 3 * 0.044715 u^2).
JM_HD float gelu_grad(float u) {
  if (fabsf(u) > 1.0e4f) return u > 0.0f ? 1.0f : 0.0f;  // beyond float resolution; avoids 0 * inf
  const float z = gelu_z(u);
  const float e = expf(-fabsf(z));
  const float inv = 1.0f / (1.0f + e);
  const float sig = (z >= 0.0f ? 1.0f : e) * inv;
  const float dsig = e * inv * inv;  // sigmoid(z) (1 - sigmoid(z)) without cancellation
  const float dz = kGeluTwoK * (1.0f + 3.0f * kGeluCubic * u * u);
  return sig + u * dsig * dz;
}

}  // namespace jm
