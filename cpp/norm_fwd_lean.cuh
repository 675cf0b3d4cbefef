// LayerNorm / RMSNorm forward v23 (norm_fwd.cu's default for bf16 rows of whole packs with one parameter row:
// LayerNorm since v23, RMSNorm since v24): norm_rows.cuh's register rows on the lean backward's diet, for rows of
// whole 16-byte packs and one scale (and bias) row shared by every row. v3's geometry and bounds (team rows of
// tpr = 4..32 threads, block rows of 64..768, a full grid of row groups; 80 registers), the packs v21 gives each
// class (16-bit 8; LayerNorm team rows 6 where v10 takes them), without what v3 spends per pack for rows that need
// it: the scalar head / tail (RowSpan), a test per pack in full rows (packs == NP * tpr: every slot holds a pack;
// elsewhere empty slots hold zeros, which add nothing to Σx), the parameter plan (dense float4 loads of the one
// parameter row), 1 / C (taken on the host). Rows are held as uint4 words (no repacking of 16-bit halves).
// Why: Nsight Compute counted 20 thread instructions per element in v3's bf16 LayerNorm against RMSNorm's 12.5,
// 60% of the H200's issue slots at the copy's rate (RESULTS.md "v22"). Measured against v21's kernels inside one
// process (benchmarks/norm_fwd_ab.cu, three rounds, A/A within 1%): bf16 LayerNorm +1..6% at every width of
// issue 5 (C = 1024, 2048, 12288: +3..6% each round); bf16 RMSNorm +1..2% (v23), -1..+2% at C = 768 / 1024 and
// +1..2% at 2048..12288 in three more rounds (v24); f32 -1..+2% and f32 C = 12288 0.81-0.91 (768-thread blocks at
// 80 registers: one per SM): f32 stayed on v4 (RESULTS.md "v23", "v24"). Since v29 block rows take the packs per
// thread lean_block_packs gives (below), f32 rows of C = 1028..8192 among them.
// Statistics as norm_rows.cuh: exact two passes over the registers, rstd by rsqrtf, y centred on m1 + Σd / C,
// the saved mean relative to x[row, 0] (lane 0's first pack).
#pragma once

#include "norm_rows.cuh"

#include <algorithm>
#include <type_traits>

namespace jm::cuda {

// unpack_words_fresh for pass 1 by byte permutes (bf16; other types: unpack_words_fresh itself). ptxas merges
// identical conversions across the passes whatever the asm's `volatile` asks, when no branch separates them (the
// lean rows have none), and then holds the row as floats: 64 at 8 packs, 52-120 bytes of spill at 80 registers
// (v22). Pass 1's conversions differ from passes 2 and 3's, so they are not reused. f16's cvt has no such twin:
// norm_fwd.cu keeps f16 rows on v3.
template <typename T>
__device__ __forceinline__ void unpack_words_pass1(const uint4& u, float (&out)[kVec<T>]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t lo, hi;
      asm volatile("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(lo) : "r"(w[i]));  // bytes 0, 1 to the top half
      asm volatile("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(hi) : "r"(w[i]));  // bytes 2, 3 kept, the low half 0
      out[2 * i] = __uint_as_float(lo);
      out[2 * i + 1] = __uint_as_float(hi);
    }
  } else {
    unpack_words_fresh<T>(u, out);
  }
}

// Elements 4q .. 4q + 3 of a pack held as words (f32: q = 0, the whole pack).
template <typename T>
__device__ __forceinline__ void quad_fresh(const uint4& u, int q, float (&out)[4]) {
  if constexpr (sizeof(T) == 4) {
    unpack_words_fresh<T>(u, out);
  } else {
    unpack_word_fresh<T>(q == 0 ? u.x : u.z, out[0], out[1]);
    unpack_word_fresh<T>(q == 0 ? u.y : u.w, out[2], out[3]);
  }
}

// (Team rows at >= 4 blocks per SM, 64 registers: 0.89-1.01 of 3 blocks in one process; LayerNorm's statistics by
// one merge of (count, mean, M2) partials, or about the first pack's mean with one reduction: bf16 0.81-0.97 and
// 0.94-0.99 of two reductions. RESULTS.md "v25".)
// kScale / kBias: whether the scale / bias row is present (RMSNorm ignores kBias); an absent one costs no loads
// (v28: bias-free and parameter-free LayerNorms took v3's rows, at 0.73-0.75x the lean rows' speed with both
// parameters from C = 2048). kStaged (v28): team rows read a copy of the parameter rows that the block stages in
// shared memory at its first row (each pack's groups of 4 columns apart, so a warp's 16-byte reads are
// conflict-free), not the rows themselves in pass 3 (v23; JAX_MEMOPS_NORM_FWD=v23). Why: LayerNorm's parameter loads
// cost 5-9% (scale only 1.03-1.07x, neither 1.05-1.10x the speed with both, one process), though they hit L1 (79-88%)
// and add no DRAM or L2 traffic (Nsight Compute): they sit between a row's reductions and its stores, the loads of
// its last step. Measured (one process, two rounds): bf16 LayerNorm C = 768 / 1024 / 2048 +3.3..5.2%, RMSNorm
// +0.6..2%. Block rows (one row per block: nothing to share) load their parameters in pass 3 as before; their first
// pack's parameters loaded beside x instead tied (+0..1.5% against an A/A of +1..2%). RESULTS.md "v28".
// kHold (v44, block rows): the row's parameter packs loaded into registers beside its x, before pass 1, so that their
// latency overlaps x's and pass 3 waits on the reductions alone (f32: 8 floats per pack with both parameters; L1
// prefetches of their lines instead, branch v44-l1: 0.70-0.98x). kCachedIo (v44): x read by __ldg and y written by
// plain stores, as the softmax register rows on their full grid do since v20, instead of the streaming pair (__ldcs /
// __stcs). Measured inside one process (benchmarks/norm_fwd_ab.cu io, two rounds, A/A within 2.5%; RESULTS.md "v44"):
// cached I/O f32 LayerNorm +2..8% at C = 2048-8192, RMSNorm +2..6%, bf16 +1..5% (LayerNorm 12288: a tie); the held
// parameters on top of it f32 LayerNorm 2048 +3.5% (at 4 packs, against 3 without), RMSNorm 2048 / 8192 +2..2.5%,
// but -3..-33% where their registers cost resident rows (LayerNorm 4096 / 8192).
// R (v48, block rows): rows per block. Each thread holds its packs of R rows (R * NP packs), the rows' reductions
// share one barrier each, and pass 3 loads each parameter pack once for all R rows: 1 / R of the parameter loads per
// element (v47 had found the bf16 rows without them at 96-98% of the copy; alone, R = 2 gains 0.5-2.6%, RESULTS.md
// "v48").
// kRegs (v48, block rows): at most that many registers per thread (0: 80, the bound of 768 threads per SM), for blocks of
// at most lean_bound_threads(kRegs) threads: more resident rows where the rows' registers allow.
constexpr int lean_bound_blocks(int regs) { return regs == 0 ? 1 : regs >= 64 ? 2 : 3; }
constexpr int lean_bound_threads(int regs) {
  return regs == 0 ? kMaxRowBlock : 65536 / (regs * lean_bound_blocks(regs)) / 32 * 32;  // whole warps
}

// Pass 3's value of one element (norm_fwd_lean_kernel): x's float v normalized (LayerNorm: (v - m1) * rstd + shift;
// RMSNorm: v * rstd), then the affine step as the parameters present ask (one rounding with both).
template <bool kRms, bool kScale, bool kHasBias>
__device__ __forceinline__ float lean_y(float v, float m1, float rstd, float shift, float sc, float b) {
  const float t = kRms ? v * rstd : fmaf(v - m1, rstd, shift);
  if constexpr (kScale && kHasBias) {
    return fmaf(t, sc, b);
  } else {
    float u = t;
    if constexpr (kScale) u = t * sc;
    if constexpr (kHasBias) u = u + b;
    return u;
  }
}

// kSectors's pass 3 (norm_fwd_lean_kernel): row `yr`'s packs i = lane + k * rt of a 16-bit x (words w) into f32,
// each pack's two halves stored by lane pairs so that each store instruction writes whole 32-byte sectors. Every lane
// of the warp takes part in the shuffles (a team's lanes share their row's bounds; a lane past the row's packs makes
// values it never stores); the even lane holds pack i, the odd one pack i + 1. Lanes swap halves of y, one shuffle per
// float, 8 floats of y held at a time. (Swapping halves of x instead, as v3's rows do, each lane then making 4 floats
// at a time, was the candidate v64: 72 registers against 80 for RMSNorm, yet 1-2% slower on the H200, RESULTS.md
// "v63".)
template <typename T, bool kRms, bool kScale, bool kHasBias, bool kStage, bool kCachedIo, int NP, typename Staged>
__device__ __forceinline__ void sector_stores(const uint4 (&w)[NP], bool valid, float* yr, const float* scale,
                                              const float* bias, const Staged& staged, int lane, int rt, int packs,
                                              bool full, float m1, float rstd, float shift) {
  const auto put = [&](int64_t at, const Pack<float, 4>& p) {
    if constexpr (kCachedIo) {
      store_raw(yr, at, p);
    } else {
      store_stream(yr, at, p);
    }
  };
  const int odd = lane & 1;
#pragma unroll
  for (int k = 0; k < NP; ++k) {
    const int i = lane + k * rt;
    const bool in = full || i < packs;
    Pack<float, 4> half[2];  // y's columns 8i .. 8i + 3 and 8i + 4 .. 8i + 7
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      float sc[4] = {}, b[4] = {}, v[4];
      const auto param4 = [&](int p, const float* prow, float(&dst)[4]) {
        if constexpr (kStage) {
          const float4 f = staged[p][q][i];
          dst[0] = f.x, dst[1] = f.y, dst[2] = f.z, dst[3] = f.w;
        } else {
          load_param_cols<4, ParamLoad::kDense>(prow, i * 8 + 4 * q, true, 0.0f, dst);
        }
      };
      if (in) {
        if constexpr (kScale) param4(0, scale, sc);
        if constexpr (kHasBias) param4(kScale, bias, b);
      }
      quad_fresh<T>(w[k], q, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) half[q].v[j] = lean_y<kRms, kScale, kHasBias>(v[j], m1, rstd, shift, sc[j], b[j]);
    }
    Pack<float, 4> got;  // the even lane's high half, or the odd lane's low half
#pragma unroll
    for (int j = 0; j < 4; ++j) got.v[j] = __shfl_xor_sync(~0u, odd ? half[0].v[j] : half[1].v[j], 1);
    // First instruction: the even lane's sector; second: the odd lane's.
    const int first = odd ? i - 1 : i, second = odd ? i : i + 1;
    if (valid && (full || first < packs)) put(int64_t{first} * 2 + odd, odd ? got : half[0]);
    if (valid && (full || second < packs)) put(int64_t{second} * 2 + odd, odd ? half[1] : got);
  }
}

// Ty (v57): y's type, where it differs from x's (the ops' `dtype`; norm_fwd.cu's lean_mixed_rows says which rows take
// f32 x into bf16 and bf16 x into f32 here). A bf16 x's pack makes 8 floats of y, two 16-byte words: each quarter is
// stored as soon as it is made, so pass 3 holds 4 floats of y per row at a time, not 8.
// kSectors (v62; by default where norm_fwd.cu's lean_sector_stores says: 16-bit x into f32, R = 1, parameters not
// held): a pack's 8 floats of y are one 32-byte sector, and its two 16-byte stores each fill half of it, so a warp's
// store instruction writes half of 32 sectors (Nsight Compute: L2 at 91-94% of its peak in these rows, RESULTS.md
// "v61"). Here lane pairs (adjacent packs) swap halves, one shuffle per float, and each store instruction writes 16
// whole sectors (sector_stores below).
template <typename T, bool kRms, bool kBlockRow, int NP, bool kScale = true, bool kBias = !kRms, bool kStaged = true,
          bool kHold = false, bool kCachedIo = false, int R = 1, int kRegs = 0, typename Ty = T, bool kSectors = false>
__global__ void __launch_bounds__(kBlockRow ? lean_bound_threads(kRegs) : kTeamBlock,
                                  kBlockRow ? lean_bound_blocks(kRegs) : kMaxRowBlock / kTeamBlock)
    norm_fwd_lean_kernel(const T* __restrict__ x, const float* __restrict__ scale, const float* __restrict__ bias,
                         Ty* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows,
                         int cols, float inv_cols, float epsilon, int tpr) {
  static_assert(R >= 1 && (R == 1 || kBlockRow), "several rows per block: block rows only");
  static_assert(kRegs == 0 || kBlockRow, "a register bound: block rows only");
  constexpr int V = kVec<T>;
  constexpr bool kHasBias = !kRms && kBias;
  constexpr int kParams = int{kScale} + int{kHasBias};
  // Team rows (tpr <= 32) of NP packs per thread: at most NP * 32 packs per parameter row.
  constexpr bool kStage = kStaged && !kBlockRow && kParams > 0;
  constexpr int Q = V / 4;  // float4 per pack and parameter
  constexpr bool kQuarterStores = sizeof(Ty) * 4 == 16 && Q > 1;  // y's 4 columns fill a 16-byte word
  static_assert(!kSectors || (kQuarterStores && Q == 2 && R == 1 && !kHold), "whole sectors: bf16 x into f32");
  __shared__ float4 staged[kStage ? kParams : 1][Q][kStage ? NP * 32 : 1];  // [parameter][quarter of a pack][pack]
  constexpr bool kHeld = kHold && kBlockRow && kParams > 0;
  const RowTeam<kBlockRow> tm(tpr);
  const int packs = cols / V;
  const bool full = packs == NP * tm.rt;
  int parity = 0;
  // base: the row group (team rows: the block's first row; block rows: the block's R rows from base * R).
  for (int64_t base = tm.first; base * R < rows; base += tm.step, parity ^= 1) {
    int64_t row[R];
    bool valid[R];
    uint4 w[R][NP];  // packs as words; zeros past the row or past the last row
#pragma unroll
    for (int r = 0; r < R; ++r) {
      row[r] = R == 1 ? base + tm.group : base * R + r;
      valid[r] = row[r] < rows;
      const uint4* xw = reinterpret_cast<const uint4*>(x + (valid[r] ? row[r] : 0) * cols);
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const int i = tm.lane + k * tm.rt;
        w[r][k] = make_uint4(0u, 0u, 0u, 0u);
        if (valid[r] && (full || i < packs)) w[r][k] = kCachedIo ? __ldg(xw + i) : __ldcs(xw + i);
      }
    }
    float4 held[kHeld ? kParams : 1][kHeld ? NP * Q : 1];  // [parameter][pack k, quarter q], zeros past the row
    if constexpr (kHeld) {
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const int i = tm.lane + k * tm.rt;
#pragma unroll
        for (int h = 0; h < Q; ++h) {
          const bool in = full || i < packs;
          const auto param = [&](const float* prow) {
            return in ? __ldg(reinterpret_cast<const float4*>(prow) + Q * i + h) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          };
          if constexpr (kScale) held[0][k * Q + h] = param(scale);
          if constexpr (kHasBias) held[kScale][k * Q + h] = param(bias);
        }
      }
    }
    if constexpr (kStage) {
      if (base == tm.first) {  // the block's first row; uniform over the block, as the barrier needs
        for (int t = static_cast<int>(threadIdx.x); t < packs; t += static_cast<int>(blockDim.x)) {
#pragma unroll
          for (int h = 0; h < Q; ++h) {
            if constexpr (kScale) staged[0][h][t] = __ldg(reinterpret_cast<const float4*>(scale) + Q * t + h);
            if constexpr (kHasBias) staged[kScale][h][t] = __ldg(reinterpret_cast<const float4*>(bias) + Q * t + h);
          }
        }
        __syncthreads();
      }
    }

    // Pass 1: Σx (LayerNorm) or Σx² (RMSNorm) per row; the zero packs add nothing.
    float s1[R] = {};
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        float v[V];
        unpack_words_pass1<T>(w[r][k], v);
#pragma unroll
        for (int j = 0; j < V; ++j) s1[r] = kRms ? fmaf(v[j], v[j], s1[r]) : s1[r] + v[j];
      }
    }
    row_sums<kBlockRow>(s1, tpr, parity);

    float m1[R] = {}, dmean[R] = {}, rstd[R];
    if constexpr (kRms) {
#pragma unroll
      for (int r = 0; r < R; ++r) rstd[r] = rsqrtf(s1[r] * inv_cols + epsilon);
    } else {
      float s2[2 * R] = {};  // per row Σd, Σd², d = x - m1, over the row's elements only
#pragma unroll
      for (int r = 0; r < R; ++r) {
        m1[r] = s1[r] * inv_cols;
#pragma unroll
        for (int k = 0; k < NP; ++k) {
          if (full || tm.lane + k * tm.rt < packs) {
            float v[V];
            unpack_words_fresh<T>(w[r][k], v);
#pragma unroll
            for (int j = 0; j < V; ++j) {
              const float d = v[j] - m1[r];
              s2[2 * r] += d;
              s2[2 * r + 1] = fmaf(d, d, s2[2 * r + 1]);
            }
          }
        }
      }
      row_sums<kBlockRow>(s2, tpr, parity);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        dmean[r] = s2[2 * r] * inv_cols;
        rstd[r] = rsqrtf(clamp_var((s2[2 * r + 1] - s2[2 * r] * dmean[r]) * inv_cols) + epsilon);
      }
    }
    if (tm.lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!valid[r]) continue;
        if constexpr (!kRms) {
          float first[V];
          unpack_words_fresh<T>(w[r][0], first);
          mean_out[row[r]] = (m1[r] - first[0]) + dmean[r];
        }
        rstd_out[row[r]] = rstd[r];
      }
    }

    // Pass 3: y = ((x - m1) * rstd + shift) * scale + bias, the parameters 4 columns at a time, once for the R rows.
    float shift[R];
#pragma unroll
    for (int r = 0; r < R; ++r) shift[r] = -dmean[r] * rstd[r];
    if constexpr (kSectors) {
      const int64_t yrow = valid[0] ? row[0] : 0;  // (a row past the last stores nothing)
      sector_stores<T, kRms, kScale, kHasBias, kStage, kCachedIo, NP>(w[0], valid[0], y + yrow * cols, scale, bias,
                                                                      staged, tm.lane, tm.rt, packs, full, m1[0],
                                                                      rstd[0], shift[0]);
    } else {
#pragma unroll
      for (int k = 0; k < NP; ++k) {
        const int i = tm.lane + k * tm.rt;
        bool any = false;
#pragma unroll
        for (int r = 0; r < R; ++r) any = any || valid[r];
        if (any && (full || i < packs)) {
          // y's pack (or quarter) `p` at index `at` of row r's packs (of quarters).
          const auto put = [&](int r, int64_t at, const auto& p) {
            if constexpr (kCachedIo) {
              store_raw(y + row[r] * cols, at, p);
            } else {
              store_stream(y + row[r] * cols, at, p);
            }
          };
          Pack<Ty, kQuarterStores ? 1 : V> out[R];
#pragma unroll
          for (int q = 0; q < V / 4; ++q) {
            float sc[4] = {}, b[4] = {};
            // Columns i * V + 4q .. + 3 of parameter p (0: scale, kScale: bias), whose row is prow.
            const auto param4 = [&](int p, const float* prow, float(&dst)[4]) {
              if constexpr (kHeld) {
                const float4 f = held[p][k * Q + q];
                dst[0] = f.x, dst[1] = f.y, dst[2] = f.z, dst[3] = f.w;
              } else if constexpr (kStage) {
                const float4 f = staged[p][q][i];
                dst[0] = f.x, dst[1] = f.y, dst[2] = f.z, dst[3] = f.w;
              } else {
                load_param_cols<4, ParamLoad::kDense>(prow, i * V + 4 * q, true, 0.0f, dst);
              }
            };
            if constexpr (kScale) param4(0, scale, sc);
            if constexpr (kHasBias) param4(kScale, bias, b);
#pragma unroll
            for (int r = 0; r < R; ++r) {
              float v[4];
              quad_fresh<T>(w[r][k], q, v);
              Pack<Ty, 4> quad;
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const float u = lean_y<kRms, kScale, kHasBias>(v[j], m1[r], rstd[r], shift[r], sc[j], b[j]);
                if constexpr (kQuarterStores) {
                  quad.v[j] = from_float<Ty>(u);
                } else {
                  out[r].v[4 * q + j] = from_float<Ty>(u);
                }
              }
              if constexpr (kQuarterStores) {
                if (valid[r]) put(r, int64_t{i} * Q + q, quad);
              }
            }
          }
          if constexpr (!kQuarterStores) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
              if (valid[r]) put(r, i, out[r]);
            }
          }
        }
      }
    }
  }
}

// v29: the packs per thread of the lean kernel's block rows for rows of `packs` 16-byte packs where they beat the
// rule before (f32: norm_fwd_half.cuh's 4 packs on half the threads per SM; bf16 LayerNorm: the lean rows at 8
// packs), 0 elsewhere (norm_fwd.cu). Measured inside one process (benchmarks/norm_fwd_ab.cu packs-*, then v29; four
// rounds in two processes, against A/A pairs within +-2%; RESULTS.md "v29"): f32 LayerNorm 3 packs +1.6..3.8% at
// C = 2048, 4 +1.7..3.2% at 4096 / 8192; f32 RMSNorm 2 +3.6..5.1% at 4096, 4 +2.3..3.4% at 8192 (3 at 2048: +0.4..1.4);
// bf16 LayerNorm 4 +3.3..6.4% at 4096. Ties, left as they were: f32 C = 768 / 1024 at 3 packs, bf16 RMSNorm at 3 / 4
// (+2.7..4.5% in one process, -0.9..+1.4% in the other), bf16 LayerNorm 8192 / 12288 at 4. Why fewer packs: fewer bytes
// in flight per thread (a full-grid copy reads 4.2 TB/s at one 16-byte pack per thread, 4.05 at 4, 3.95-3.98 at 8:
// benchmarks/copy_ceiling.cu) where the block's reductions stay cheap (one pack per thread: 0.54-0.98x); f32
// C = 12288 needs 768 threads at 4 packs, whose blocks lose (0.82x LayerNorm, 0.95x RMSNorm).
template <typename T, bool kRms>
inline constexpr bool kLeanTuned = sizeof(T) == 4 || !kRms;  // bf16 RMSNorm: none

template <typename T, bool kRms>
constexpr int lean_block_packs(int64_t packs) {
  int np = 0;
  if constexpr (sizeof(T) == 4) {
    if (packs > 256 && packs <= 2048) np = packs <= 512 ? 3 : packs > 1024 ? 4 : kRms ? 2 : 4;
  } else if constexpr (!kRms) {
    np = packs > 256 && packs <= 512 ? 4 : 0;
  }
  const int64_t threads = np > 0 ? ceil_div(packs, np) : 0;
  return threads > 32 && threads <= kMaxRowBlock ? np : 0;  // block rows (one row per block of 64..768 threads)
}

// v44: the block rows' plan by default — lean_block_packs's packs with the parameters held in registers (the kernel's
// kHold) where that measured faster beside cached I/O (benchmarks/norm_fwd_ab.cu io, two rounds; RESULTS.md "v44"):
// every f32 RMSNorm block row (C = 2048 +2.5%, 4096 +0.6%, 8192 +2% over cached I/O alone) and f32 LayerNorm rows of
// up to 512 packs at 4 packs per thread (C = 2048: +3.5% over 3 packs with cached I/O; the rows of 257-511 packs take
// the same rule unmeasured). Not f32 LayerNorm's longer rows: its 70 registers at 256-512 threads leave fewer rows
// resident (4096: -4%, 8192: -33%).
struct LeanBlock {
  int np;     // packs per thread, 0: not the lean block rows
  bool hold;  // the parameters held in registers
};

// v45 (short_rows, the default; false: v44's plan): f32 rows of 129..256 packs (C = 516..1024), which v44 left on
// norm_fwd_half.cuh's rows (4 packs on 33..64 threads), take the lean block rows with their parameters held at 3 packs
// up to 192 (C = 768: 64 threads), else 4 (C = 1024: 64). Measured inside one process against v4's rows with cached
// I/O (benchmarks/norm_fwd_ab.cu half-io, two rounds; RESULTS.md "v45"): LayerNorm 768 / 1024 +2.0..3.2% / +1.6..2.2%,
// RMSNorm +1.0..1.1% / +1.3..1.4% (over v44: +4..6%); rows of 129..191 and 193..255 packs take the rule unmeasured.
template <typename T, bool kRms>
constexpr LeanBlock lean_block_plan(int64_t packs, bool short_rows = true) {
  if (sizeof(T) == 4 && short_rows && packs > 128 && packs <= 256) return {packs <= 192 ? 3 : 4, true};
  const int np = lean_block_packs<T, kRms>(packs);
  if (sizeof(T) == 4 && np > 0 && kRms) return {np, true};
  if (sizeof(T) == 4 && np > 0 && packs <= 512) return {4, true};  // LayerNorm: 65..128 threads at 4 packs
  return {np, false};
}

// v48 (the default for bf16 rows of 512..1536 packs, C = 4096..12288; norm_fwd.cu): the lean block rows two rows
// per block (R = 2) at NP packs per thread under a bound of `regs` registers — of the candidates below that compile
// without spills (ptxas -v; LayerNorm's 4 packs spill at 56), the one that keeps the most threads resident per SM.
// Measured inside one process against v45's rule (benchmarks/norm_fwd_ab.cu pairs, two rounds per call, A/A within
// 2.4%; RESULTS.md "v48"), the plan's pick: bf16 LayerNorm 4096 +2..4%, 8192 +3..3.5%, 8200 +12..13%, 10000 +7..10%,
// 12288 +2..4%; RMSNorm +1.6..3.7%; in the bench (device timing) LayerNorm 8192 89 -> 92% of the copy, 12288 86 ->
// 88-89%. Why both: the pair halves the parameter loads per element (alone, at 80 registers: +0.5..2.6%), the bound
// keeps more rows resident (alone, 8 packs at 64: -4..+9%; at 56 they spill: -24..-29%).
struct LeanPairs {
  int np = 0;    // packs per thread, 0: not the pair rows
  int regs = 0;  // the kernel's kRegs
};

template <bool kRms>
constexpr LeanPairs lean_pair_plan(int64_t packs) {
  LeanPairs best{};
  if (packs < 512 || packs > 1536) return best;
  // RMSNorm's 4 packs fit 56 registers, and {3, 56} or {4, 56} always keeps more threads resident than a bound of 64.
  constexpr LeanPairs kLayerNorm[] = {{3, 56}, {3, 64}, {4, 64}};
  constexpr LeanPairs kRmsNorm[] = {{3, 56}, {4, 56}};
  const LeanPairs* cands = kRms ? kRmsNorm : kLayerNorm;
  int64_t best_threads = 0;
  for (int i = 0; i < (kRms ? 2 : 3); ++i) {
    const LeanPairs c = cands[i];
    const int64_t block = ceil_div(ceil_div(packs, c.np), 32) * 32;
    if (block > lean_bound_threads(c.regs)) continue;
    const int64_t blocks = std::min<int64_t>(65536 / (block * c.regs), 2048 / block);
    if (blocks * block > best_threads) best_threads = blocks * block, best = c;
  }
  return best;
}

}  // namespace jm::cuda
