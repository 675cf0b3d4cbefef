// The norms' general backward kernels: norm_bwd_kernel (dx for rows of any length; the parameter gradients then by
// column sums of NormGradElem) and norm_bwd_fused_kernel (one pass over x and dy held in registers: dx and the
// dscale / dbias partials). norm_bwd.cu chooses among them and norm_bwd_lean.cuh's kernel. x and dx have type T, dy
// type Tdy: T's, or the forward's y dtype where the op's `dtype` made it another (norm_bwd.cu's norm_bwd_general;
// every buffer 16-byte aligned and C a multiple of V for V > 1, so dy's packs of V elements are aligned too).
#pragma once

#include "cuda_common.cuh"
#include "partials.cuh"

namespace jm::cuda {

// norm_bwd_kernel's row cache: x's row, then dy's; rows `stride` bytes apart. For one dtype dy's row follows x's
// (2 * C * sizeof(T) bytes a row); for two, dy's starts at the next boundary its packs may start at, and rows at
// boundaries of both.
template <typename T, typename Tdy, int V>
struct BwdRowCache {
  int64_t dy_offset, stride;
  __host__ __device__ explicit BwdRowCache(int64_t cols) {
    if constexpr (std::is_same_v<T, Tdy>) {
      dy_offset = cols * int64_t{sizeof(T)};
      stride = 2 * dy_offset;
    } else {
      constexpr int64_t kDy = alignof(Pack<Tdy, V>), kX = alignof(Pack<T, V>);
      const auto round_up = [](int64_t n, int64_t a) { return (n + a - 1) / a * a; };
      dy_offset = round_up(cols * int64_t{sizeof(T)}, kDy);
      stride = round_up(dy_offset + cols * int64_t{sizeof(Tdy)}, kDy > kX ? kDy : kX);
    }
  }
};

// norm_bwd (dx only): same geometry. Pass 1 caches x and dy and sums g = dy*scale and g*xhat over the
// row, with xhat = (x - x[0] - mean)*rstd (x*rstd for RMS); pass 2 writes
// dx = rstd*(g - mean(g) - xhat*mean(g*xhat)) (no mean(g) for RMS). g is rounded (__fmul_rn, no FMA
// contraction) so that both passes see the same g: with C == 1, dx is exactly 0.
template <typename T, int V, bool kRms, typename Tdy = T>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    norm_bwd_kernel(const T* __restrict__ x, ParamView scale, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const Tdy* __restrict__ dy, T* __restrict__ dx,
                    int64_t rows, int64_t cols, RowPlan plan) {
  const RowSlot slot(plan);
  T* cache_x;
  Tdy* cache_dy;
  if constexpr (std::is_same_v<T, Tdy>) {
    cache_x = slot.cache<T>(plan, 2 * cols);
    cache_dy = cache_x != nullptr ? cache_x + cols : nullptr;
  } else {
    const BwdRowCache<T, Tdy, V> layout(cols);
    unsigned char* cache = slot.cache<unsigned char>(plan, layout.stride);
    cache_x = reinterpret_cast<T*>(cache);
    cache_dy = cache != nullptr ? reinterpret_cast<Tdy*>(cache + layout.dy_offset) : nullptr;
  }
  const int64_t packs = cols / V;
  const float fcols = static_cast<float>(cols);
  for_slot_rows(slot, rows, [&](int64_t row, bool active) {
    const int64_t n = active ? packs : 0;
    const T* xr = x + row * cols;
    // xhat = (x - pivot) * rs: pivot = x[0] + mean (the saved mean is relative to x[0]).
    const float x0 = kRms || !active || cols == 0 ? 0.0f : to_float(xr[0]);
    const float mu = kRms || !active ? 0.0f : mean[row];
    const float rs = active ? rstd[row] : 0.0f;
    const float* scale_row = param_row(scale, row, cols);
    const Tdy* dyr = dy + row * cols;

    float acc[2] = {0.0f, 0.0f};  // Σg, Σg*xhat
    for_row_pack_pair<V, kParamBatchRegs>(xr, dyr, n, slot.lane, plan.tpr, [&](int64_t i, const auto& px,
                                                                               const auto& pd) {
      if (cache_x != nullptr) {
        store_raw<V>(cache_x, i, px);
        store_raw<V>(cache_dy, i, pd);
      }
      float xv[V], dv[V], s[V];
      unpack(px, xv);
      unpack(pd, dv);
      load_param<V>(scale_row, i, 1.0f, s);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float g = __fmul_rn(dv[j], s[j]);
        if constexpr (!kRms) acc[0] += g;
        acc[1] += g * (((xv[j] - x0) - mu) * rs);
      }
    });
    row_reduce(acc, plan.tpr, SumOp{});
    const float mean_g = acc[0] / fcols;
    const float mean_gx = acc[1] / fcols;

    const T* xs = cache_x != nullptr ? cache_x : xr;
    const Tdy* dys = cache_x != nullptr ? cache_dy : dyr;
    T* dxr = dx + row * cols;
    for_row_pack_pair<V, kParamBatchRegs>(xs, dys, n, slot.lane, plan.tpr, [&](int64_t i, const auto& px,
                                                                               const auto& pd) {
      float xv[V], dv[V], s[V];
      unpack(px, xv);
      unpack(pd, dv);
      load_param<V>(scale_row, i, 1.0f, s);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xhat = ((xv[j] - x0) - mu) * rs;
        xv[j] = rs * (__fmul_rn(dv[j], s[j]) - mean_g - xhat * mean_gx);
      }
      store_pack<V>(dxr, i, xv);
    });
  });
}

// Elements per thread of the fused backward (norm_bwd_fused_kernel): the row's x and dy live in
// registers, K = kFusedPacks<V> packs per thread, the dscale/dbias partials in shared memory
// (2 x 48 KiB at 24 elements). 24 elements let 512-thread teams cover C <= 12288 (the largest target
// shape).
// Unvectorized rows (V = 1: C not a multiple of the vector width, or a misaligned buffer) spill at
// 24 scalar packs; they get 8, so C <= 4096 (longer rows take the two-kernel path).
template <int V>
inline constexpr int kFusedPacks = V == 1 ? 8 : 24 / V;

// The long-row class of the fused backward (v17): vectorized rows beyond 512 x 24 elements, with 32
// elements per thread in f32 (x and dy take 64 of the 128 registers) and 48 in 16-bit (48 raw
// registers), the partials in shared memory (2 x 512 x 32 / 48 floats: 128 / 192 KiB, one block per
// SM): f32 C <= 16384, 16-bit C <= 24576 in one pass, where the two-kernel path re-read x and dy. 0: none.
template <typename T, int V, typename Tdy = T>
inline constexpr int kFusedLongPacks = V == 1 ? 0 : (sizeof(T) == 4 || sizeof(Tdy) == 4 ? 32 : 48) / V;

// Where the fused backward keeps its dscale/dbias partials: registers (RegPartials, v3) when they fit
// beside the row — 16-bit packs (K = 3: 24 raw registers for x and dy, 48 for the partials) and scalar
// ones (K = 8: 16 + 16) — else shared memory (f32: 48 raw registers leave no room for 48 more).
template <typename T, int V, typename Tdy = T>
inline constexpr bool kFusedRegPartials = (sizeof(T) == 2 && sizeof(Tdy) == 2) || V == 1;

// Threads per block of the fused backward: the team (tpr threads) but at least kFusedMinBlock. At ~126
// registers (the launch bound allows 128) two blocks of 256 fit an SM and run out of phase: one's loads
// are in flight while the other waits at its barriers (a 512-thread block per SM stalls the whole SM at
// each row's team_sum2 barrier when tpr > 32). Only when the grid (the workspace's G*P, up to 264 = 2
// per SM) gives (nearly) every SM two blocks; rows of 512-thread teams (C > 4096) keep 1 block per SM.
constexpr int kFusedMinBlock = 256;

// norm_bwd_fused: ONE pass over x and dy (see partials.cuh for the geometry). Each team loads its row's
// x and dy into registers (K packs per thread, all loads in flight at once), sums g = dy*scale and
// g*xhat over the row (xhat = (x - x[0] - mean)*rstd, x*rstd for RMS), writes
// dx = rstd*(g - mean(g) - xhat*mean(g*xhat)) (no mean(g) for RMS) and adds dy*xhat (dscale) and dy
// (dbias) to its shared-memory partials. At the end the block's teams combine their partials into its
// workspace row (slab_a: dscale, slab_b: dbias; nullptr when not wanted, both nullptr: dx only). g is rounded
// (__fmul_rn, no FMA contraction) so that the sums and dx see the same g: with C == 1, dx is exactly 0.
template <typename T, int V, bool kRms, int K = kFusedPacks<V>, typename Tdy = T>
__global__ void __launch_bounds__(kTeamThreads, 1)
    norm_bwd_fused_kernel(const T* __restrict__ x, ParamView scale, const float* __restrict__ mean,
                          const float* __restrict__ rstd, const Tdy* __restrict__ dy, T* __restrict__ dx,
                          int64_t rows, int64_t cols, int tpr, int64_t groups, int64_t per_group,
                          float* __restrict__ slab_a, float* __restrict__ slab_b) {
  constexpr bool kReg = kFusedRegPartials<T, V, Tdy> && K == kFusedPacks<V>;
  __shared__ TeamRed red;
  const PartialBlock blk = partial_block(rows, groups, per_group, 1);
  const int lane = static_cast<int>(threadIdx.x) & (tpr - 1);
  const int team = static_cast<int>(threadIdx.x) / tpr;
  const int teams = static_cast<int>(blockDim.x) / tpr;
  const int packs = static_cast<int>(cols / V);  // <= tpr * K (the host checks)
  const float fcols = static_cast<float>(cols);
  const auto [acc_a, acc_b] = partial_accs<V, K>(slab_a, slab_b, static_cast<int>(blockDim.x));
  RegPartials<V, K> reg;  // kReg only (else dead)
  if constexpr (!kReg) {
    zero_partials<V, K>(acc_a);
    zero_partials<V, K>(acc_b);
  }
  int parity = 0;
  for (int64_t base = blk.begin; base < blk.end; base += teams, parity ^= 1) {  // uniform over the block
    const int64_t row = base + team;
    const bool active = row < blk.end;
    const T* xr = x + row * cols;
    const Tdy* dyr = dy + row * cols;
    Pack<T, V> px[K];
    Pack<Tdy, V> pd[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + k * tpr;  // < tpr * K <= 24576: 32-bit
      if (active && i < packs) {
        px[k] = load_raw<V>(xr, i);
        pd[k] = load_raw<V>(dyr, i);
      }
    }
    const float x0 = kRms || !active ? 0.0f : to_float(xr[0]);
    const float mu = kRms || !active ? 0.0f : mean[row];
    const float rs = active ? rstd[row] : 0.0f;
    const float* scale_row = active ? param_row(scale, row, cols) : nullptr;

    float sums[2] = {0.0f, 0.0f};  // Σg, Σg*xhat
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + k * tpr;  // < tpr * K <= 24576: 32-bit
      if (active && i < packs) {
        float xv[V], dv[V], sc[V];
        unpack_fresh(px[k], xv);
        unpack_fresh(pd[k], dv);
        load_param<V>(scale_row, i, 1.0f, sc);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float g = __fmul_rn(dv[j], sc[j]);
          if constexpr (!kRms) sums[0] += g;
          sums[1] += g * (((xv[j] - x0) - mu) * rs);
        }
      }
    }
    team_sum2(sums, tpr, red, parity);
    const float mean_g = sums[0] / fcols;
    const float mean_gx = sums[1] / fcols;

    T* dxr = dx + row * cols;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + k * tpr;  // < tpr * K <= 24576: 32-bit
      if (active && i < packs) {
        float xv[V], dv[V], sc[V], out[V];
        unpack_fresh(px[k], xv);
        unpack_fresh(pd[k], dv);
        load_param<V>(scale_row, i, 1.0f, sc);
        const PartialSlot pa = partial_slot<V, K>(acc_a, k);
        const PartialSlot pb = partial_slot<V, K>(acc_b, k);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xhat = ((xv[j] - x0) - mu) * rs;
          out[j] = rs * (__fmul_rn(dv[j], sc[j]) - mean_g - xhat * mean_gx);
          if constexpr (kReg) {
            reg.a[k][j] += dv[j] * xhat;
            if constexpr (!kRms) reg.b[k][j] += dv[j];
          } else {
            if (pa) pa[j] += dv[j] * xhat;
            if (pb) pb[j] += dv[j];
          }
        }
        store_pack<V>(dxr, i, out);
      }
    }
  }
  if constexpr (kReg) {
    store_partials<V, K>(acc_a, reg.a);
    store_partials<V, K>(acc_b, reg.b);
  }
  if (acc_a != nullptr) finish_partials<V, K>(acc_a, tpr, 0, cols, slab_a, blk.row_out);
  if (acc_b != nullptr) finish_partials<V, K>(acc_b, tpr, 0, cols, slab_b, blk.row_out);
}

// Element (r, c) of the parameter gradients: dscale += dy*xhat, dbias += dy.
template <typename T, bool kRms, typename Tdy = T>
struct NormGradElem {
  const T* x;
  const Tdy* dy;
  const float* mean;
  const float* rstd;
  int64_t cols;

  __device__ void operator()(int64_t r, int64_t c, float& dscale, float& dbias) const {
    const int64_t i = r * cols + c;
    const float x0 = kRms ? 0.0f : to_float(x[r * cols]);
    const float mu = kRms ? 0.0f : mean[r];
    const float g = to_float(dy[i]);
    dscale = g * (((to_float(x[i]) - x0) - mu) * rstd[r]);
    dbias = g;
  }
};

}  // namespace jm::cuda
