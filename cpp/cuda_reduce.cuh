// Reductions: sum and NaN-propagating max over a warp's lane groups, a block or a row's threads; the max of a
// pack; exp2 by the hardware's ex2.
#pragma once

#include "cuda_pack.cuh"

namespace jm::cuda {

struct SumOp {
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Max that propagates NaN (fmaxf drops it), so a NaN anywhere makes a softmax row's max NaN.
struct MaxOp {
  static constexpr float kIdentity = -INFINITY;
  __device__ float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};

// MaxOp in one instruction (max.NaN.f32, sm_80+; MaxOp's select takes two or three): the result is
// NaN when either input is, else the larger.
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return MaxOp()(a, b);
#endif
}

// A variance taken as (Σd² - Σd·dmean) / C around a shift (the norms' corrected two-pass: d = x - shift) is negative
// only by rounding: clamped at 0. `var < 0` is false for NaN, which must propagate to the row's statistics.
__device__ __forceinline__ float clamp_var(float var) { return var < 0.0f ? 0.0f : var; }

// max_nan of m and a pack's elements. 16-bit packs compare in pairs, as they are (one HMNMX2 per two
// elements, exact; no conversion), and convert the pair's result once.
template <int V, typename T>
__device__ __forceinline__ float pack_max_nan(const Pack<T, V>& p, float m) {
  if constexpr (sizeof(T) == 2 && V % 2 == 0) {
    using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    T2 pair[V / 2];
    memcpy(pair, &p, sizeof(pair));
    T2 acc = pair[0];
#pragma unroll
    for (int i = 1; i < V / 2; ++i) acc = __hmax2_nan(acc, pair[i]);
    return max_nan(m, max_nan(to_float(acc.x), to_float(acc.y)));
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) m = max_nan(m, to_float(p.v[j]));
    return m;
  }
}

// 2^a by the hardware's ex2 alone (exp2f adds a subnormal-result fix-up of 2-3 instructions): results
// below 2^-126 flush to 0; -inf gives 0, +inf gives +inf, NaN gives NaN.
__device__ __forceinline__ float ex2_ftz(float a) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(a));
  return r;
}

// Butterfly (xor) reduction within aligned groups of `width` lanes (a power of two <= 32). Every lane
// of a group ends with the bitwise-same result (the ops are commutative). All 32 lanes must call it.
template <class Op, int N>
__device__ __forceinline__ void warp_reduce(float (&v)[N], Op op, int width = 32) {
  for (int offset = width / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int n = 0; n < N; ++n) v[n] = op(v[n], __shfl_xor_sync(0xffffffffu, v[n], offset));
  }
}

// Reduction over the whole block (blockDim.x a multiple of 32; every thread calls it and gets the
// result). Warp partials go through shared memory; the order is fixed, so results are deterministic.
template <class Op, int N>
__device__ __forceinline__ void block_reduce(float (&v)[N], Op op) {
  __shared__ float partial[N][32];
  warp_reduce(v, op);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  __syncthreads();  // the previous call's readers are done with `partial`
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) partial[n][warp] = v[n];
  }
  __syncthreads();
#pragma unroll
  for (int n = 0; n < N; ++n) v[n] = lane < warps ? partial[n][lane] : Op::kIdentity;
  warp_reduce(v, op);
}

__device__ __forceinline__ float warp_reduce_sum(float v, int width = 32) {
  float a[1] = {v};
  warp_reduce(a, SumOp{}, width);
  return a[0];
}
__device__ __forceinline__ float warp_reduce_max(float v, int width = 32) {
  float a[1] = {v};
  warp_reduce(a, MaxOp{}, width);
  return a[0];
}
__device__ __forceinline__ float block_reduce_sum(float v) {
  float a[1] = {v};
  block_reduce(a, SumOp{});
  return a[0];
}
__device__ __forceinline__ float block_reduce_max(float v) {
  float a[1] = {v};
  block_reduce(a, MaxOp{});
  return a[0];
}

// Reduction over the `tpr` threads that share a row (see RowPlan): shuffles when tpr <= 32, else the
// whole block. Uniform across the block, as its callers' row loops are.
template <class Op, int N>
__device__ __forceinline__ void row_reduce(float (&v)[N], int tpr, Op op) {
  if (tpr > 32) {
    block_reduce(v, op);
  } else {
    warp_reduce(v, op, tpr);
  }
}
__device__ __forceinline__ float row_sum(float v, int tpr) {
  return tpr > 32 ? block_reduce_sum(v) : warp_reduce_sum(v, tpr);
}
__device__ __forceinline__ float row_max(float v, int tpr) {
  return tpr > 32 ? block_reduce_max(v) : warp_reduce_max(v, tpr);
}

}  // namespace jm::cuda
