// LayerNorm / RMSNorm forward v4 (the default for 4-byte types; JAX_MEMOPS_NORM_FWD=v3/v4 force, norm_fwd.cu):
// norm_rows.cuh's register rows with half the packs per thread (kRowPacksHalf = 4: f32 16 elements, 16-bit 32, kept
// raw), twice the threads per row, more threads per SM. Why: ncu on v3 (f32 2048: 78 registers,
// 64-thread CTAs, 37.5% occupancy, DRAM 70%) pointed at too few warps to cover each thread's
// load -> two reductions -> store chain.
// Same geometry (team rows of 4..32 threads in 256-thread blocks, block rows of 64..768 threads), same
// row split (RowSpan: scalar head, 16-byte body, scalar tail; edge0 kept), same exact two-pass
// statistics. Classes at N = 4 (plan_norm_rows<T, kRowPacksHalf>): team rows C <= 32*4*V + V - 1
// (f32 515, 16-bit 1031), block rows C <= 768*4*V + V - 1 (f32 12291, 16-bit 24583); norm_fwd.cu runs
// v3's classes beyond (then v1), and v3 for rows > INT_MAX - 768 (32-bit row indices here).
// Occupancy: block rows are compiled for 2 x 768 threads per SM (<= 40 registers: 1536 threads,
// 75%; v3 768 at <= 80); team rows, whose row state is per thread (several rows per block; block rows
// keep it in uniform registers), for 5 x 256 (RMSNorm, <= 48: 1280, 62.5%) or 4 x 256 (LayerNorm,
// <= 64: 1024, 50%; at 48 it spills).
// What keeps block rows within 40 registers (ptxas -v, no spills; norm_fwd_rows_kernel at N = 4 under
// that bound spills 70-340 bytes): the class is a template argument as in v3, and
//   * a thread's empty slots hold zero packs (load_or): pass 1 (sum x, or x^2) runs without a
//     branch per pack (the conditional loads otherwise leave predicated copies of the packs);
//   * the row geometry by shifts (tpr is a power of two), no integer division;
//   * one 64-bit row offset serves x, y and the edges;
//   * pass 3 takes a pack's parameters 4 columns (one float4 of scale, one of bias) at a time;
//   * divisions by C as products with 1 / C (taken once per thread) and rstd by rsqrtf (MUFU.RSQ;
//     <= 2 ulp): the IEEE division and square root have slow-path subroutine calls, whose clobbered
//     registers cost spills (the results differ from v3 by a few ulp of the statistics);
//   * the parameter row of a row (vmap's row groups) by a 32-bit division (param_row_u32): param_row's
//     64-bit one is a call whose clobbered registers cost spills.
#pragma once

#include "norm_rows.cuh"

namespace jm::cuda {

// param_row for a row r >= 0 of int range: the group index by a 32-bit division (r >= rows_per_group
// there, so the divisor fits too).
__device__ __forceinline__ const float* param_row_u32(const ParamView& p, int r, int64_t cols) {
  if (p.data == nullptr) return nullptr;
  const uint32_t group =
      r < p.rows_per_group ? 0u : static_cast<uint32_t>(r) / static_cast<uint32_t>(p.rows_per_group);
  return p.data + int64_t{group} * cols;
}

// N = kRowPacksTeam6 (16-bit LayerNorm team rows where 6 packs need as many threads per row as v3's 8;
// norm_fwd.cu): 6 packs per thread at 4 x 256 threads per SM (<= 64 registers; ptxas -v: 32 bytes of spill
// stores; RMSNorm, measured in A/B runs, compiled spill-free).
// kCachedIo (v45, norm_fwd.cu's default): x read by __ldg and y written by plain stores (the lean rows' since v44) instead
// of the streaming pair (__ldcs / __stcs): +2.6..6% inside one process (f32 C = 512 team rows, 768 / 1024 / 12288 block
// rows; RESULTS.md "v45"). v20 measured no gain here, one process against another, when these rows ran persistent.
template <typename T, bool kRms, bool kBlockRow, int N = kRowPacksHalf, bool kCachedIo = false>
__global__ void __launch_bounds__(kBlockRow ? kMaxRowBlock : kTeamBlock,
                                  kBlockRow ? 2 : (kRms && N == kRowPacksHalf) ? 5 : 4)
    norm_fwd_half_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, T* __restrict__ y,
                         float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows, int cols,
                         float epsilon, int tpr) {
  static_assert(N == kRowPacksHalf || !kBlockRow, "block rows: 4 packs (their 40-register bound)");
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const int tid = static_cast<int>(threadIdx.x);
  const int shift = kBlockRow ? 0 : __ffs(tpr) - 1;  // log2(tpr) for team rows
  const int lane = kBlockRow ? tid : tid & (tpr - 1);
  const int rt = kBlockRow ? static_cast<int>(blockDim.x) : tpr;
  const int group = kBlockRow ? 0 : tid >> shift;
  const int per_block = kBlockRow ? 1 : static_cast<int>(blockDim.x) >> shift;
  const float inv_cols = 1.0f / static_cast<float>(cols);  // cols > 0 (the host checks)
  int parity = 0;
  for (int64_t base = int64_t{blockIdx.x} * per_block; base < rows;
       base += int64_t{gridDim.x} * per_block, parity ^= 1) {
    const int row = static_cast<int>(base) + group;  // rows <= INT_MAX (the host checks): 32-bit
    const bool valid = row < rows;
    const int64_t off = int64_t{valid ? row : 0} * cols;
    const RowSpan<T, V> sp(x + off, cols, valid);

    P raw[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int i = lane + k * rt;
      raw[k] = load_or<!kCachedIo, V>(x + off + sp.head, i, i < sp.body, 0u);
    }
    const float edge0 = lane < sp.edges() ? to_float(x[off + sp.edge_col(lane, cols)]) : 0.0f;

    // Pass 1: sum(x) (LayerNorm) or sum(x^2) (RMSNorm); the zero packs add nothing.
    float s1[1] = {0.0f};
#pragma unroll
    for (int k = 0; k < N; ++k) {
      float v[V];
      unpack_fresh(raw[k], v);
#pragma unroll
      for (int j = 0; j < V; ++j) s1[0] += kRms ? v[j] * v[j] : v[j];
    }
    s1[0] += kRms ? edge0 * edge0 : edge0;  // 0 where the thread has no edge
    for (int e = lane + rt; e < sp.edges(); e += rt) {  // only when rt < edges (team rows of 4 or 8)
      const float v = to_float(x[off + sp.edge_col(e, cols)]);
      s1[0] += kRms ? v * v : v;
    }
    row_sums<kBlockRow>(s1, tpr, parity);

    float m1 = 0.0f, dmean = 0.0f, rstd;  // y = ((x - m1) - dmean) * rstd * scale + bias (pass 3: as an fma)
    if constexpr (kRms) {
      rstd = rsqrtf(s1[0] * inv_cols + epsilon);
    } else {
      m1 = s1[0] * inv_cols;
      float s2[2] = {0.0f, 0.0f};  // sum(d), sum(d^2), d = x - m1, over the row's elements only
#pragma unroll
      for (int k = 0; k < N; ++k) {
        if (lane + k * rt < sp.body) {
          float v[V];
          unpack_fresh(raw[k], v);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float d = v[j] - m1;
            s2[0] += d;
            s2[1] += d * d;
          }
        }
      }
      for (int e = lane; e < sp.edges(); e += rt) {
        const float d = (e == lane ? edge0 : to_float(x[off + sp.edge_col(e, cols)])) - m1;
        s2[0] += d;
        s2[1] += d * d;
      }
      row_sums<kBlockRow>(s2, tpr, parity);
      dmean = s2[0] * inv_cols;
      rstd = rsqrtf(clamp_var((s2[1] - s2[0] * dmean) * inv_cols) + epsilon);
    }
    if (valid && lane == 0) write_row_stats<kRms>(raw[0], edge0, sp, m1, dmean, rstd, mean_out + row, rstd_out + row);

    // Pass 3: y. Parameters as in norm_fwd_rows_kernel (float4 loads when both start 16-byte aligned
    // at column head + V*i), 4 columns at a time.
    const float* srow = valid ? param_row_u32(scale, row, cols) : nullptr;
    const float* brow = valid && !kRms ? param_row_u32(bias, row, cols) : nullptr;  // RMSNorm: no bias
    const RowParamAccess pa = row_param_access<kRms>(srow, brow, sp.head);
    const float shift = -dmean * rstd;  // y = ((x - m1) * rstd + shift) * scale + bias
    const auto pass3 = [&](auto plan) {
      constexpr ParamLoad kPlan = decltype(plan)::value;
      constexpr bool kDense = kPlan == ParamLoad::kDense;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int i = lane + k * rt;
        if (i < sp.body) {
          float v[V];
          unpack_fresh(raw[k], v);
          P out;
#pragma unroll
          for (int q = 0; q < V / 4; ++q) {
            float s[4], b[4] = {};
            load_param_cols<4, kPlan>(srow, sp.head + i * V + 4 * q, pa.vec, 1.0f, s);
            if (!(kDense && kRms)) load_param_cols<4, kPlan>(brow, sp.head + i * V + 4 * q, pa.vec, 0.0f, b);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const float d = v[4 * q + j] - m1;  // kAny: one register fewer (no `shift`) at 40
              const float t = kPlan == ParamLoad::kAny ? (d - dmean) * rstd : fmaf(d, rstd, shift);
              out.v[4 * q + j] = from_float<T>(t * s[j] + b[j]);
            }
          }
          if constexpr (kCachedIo) {
            store_raw<V>(y + off + sp.head, i, out);
          } else {
            store_stream<V>(y + off + sp.head, i, out);
          }
        }
      }
    };
    if constexpr (kBlockRow && (kRms || sizeof(T) == 2)) {
      pass3(ParamPlan<ParamLoad::kAny>{});  // kDense / kScalar spill here (8-40 bytes at the 40-register bound)
    } else {
      with_param_plan(pa.dense, pa.vec, pass3);
    }
    for (int e = lane; e < sp.edges(); e += rt) {
      const int c = sp.edge_col(e, cols);
      const float s = srow != nullptr ? srow[c] : 1.0f;
      const float b = brow != nullptr ? brow[c] : 0.0f;
      const float v = e == lane ? edge0 : to_float(x[off + c]);
      y[off + c] = from_float<T>(fmaf(v - m1, rstd, shift) * s + b);
    }
  }
}

}  // namespace jm::cuda
