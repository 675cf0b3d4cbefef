// LayerNorm / RMSNorm forward with each row on chip, in registers: x is read from HBM once (16-byte
// evict-first loads, all of a thread's issued before any is used), y written once (evict-first), the
// statistics taken exactly in two passes over the registers. norm_fwd.cu picks the class per launch.
//
// Size classes (N = kRowPacks = 8 packs of 16 bytes per thread: f32 32 elements, bf16/f16 64 (kept raw,
// converted at each use, unpack_fresh); V = kVec<T> elements per pack; a row's aligned body has at
// most floor(C / V) packs, so a row of C elements needs ceil(floor(C / V) / N) threads):
//   * team rows: tpr = 4, 8, 16 or 32 threads per row (the smallest with tpr * N >= C / V), blocks of
//     kTeamBlock = 256 threads, 256 / tpr rows per block; reductions are xor shuffles within the row's
//     lane group, no barrier. C <= 32 * N * V + V - 1 (f32 1027, bf16/f16 2055).
//   * block rows: one row per block of rt = ceil(C / V / N) threads rounded up to a warp (64 .. 768);
//     reductions: shuffles, then the warps' sums through shared memory (one barrier each, double-
//     buffered by row parity). C <= 768 * N * V + V - 1 (f32 24579, bf16/f16 49159).
// Both: __launch_bounds__ for 768 threads per SM (<= 80 registers, ptxas -v: 71-80, no spills); 128
// bytes of loads in flight per thread, ~96 KiB per SM. A persistent grid of exactly the resident
// blocks (resident_blocks), rows strided over it, so no partial last wave: a block does at most one
// row more than another. Longer rows, or x and y at different addresses modulo 16, take the v1 row
// kernel of norm_fwd.cu (row cached in shared memory, batched loads).
//
// Rows need not start on a 16-byte boundary (C % V != 0): each row is split into a scalar head, an
// aligned body of 16-byte packs and a scalar tail (RowSpan). The edges (head + tail, < 2V elements) go
// to lanes 0, 1, ...: a thread's first edge is loaded with its body packs and kept (edge0); further
// ones (only when the row has fewer threads than edges) are re-read by each pass (L1 hits).
// The parameters (f32) of a misaligned row's pack start at column head + V*i, 16-byte aligned only when
// head % 4 == 0 (and the parameter row is aligned); otherwise scalar loads (load_param_cols).
//
// Statistics (LayerNorm): m1 = sum(x) / C, then d = x - m1, mean = m1 + sum(d) / C and
// var = (sum(d^2) - sum(d) * sum(d) / C) / C (sum(d) only removes m1's rounding error; there is no
// E[x^2] - E[x]^2 cancellation), y = fma(x - m1, rstd, -rstd * sum(d)/C) * scale + bias: centred on
// the mean without rounding it to f32 (x = 1e4 + 1e-2 noise keeps its accuracy). The saved mean is relative to
// x[row, 0] (ffi_common.h): (m1 - x[row, 0]) + sum(d) / C. RMSNorm: rstd = 1 / sqrt(sum(x^2) / C + eps),
// y = x * rstd * scale. rstd by rsqrtf (MUFU.RSQ, <= 2 ulp; 1 / sqrtf took two slow-path branches per
// row). A NaN in a row makes its statistics, hence its whole row, NaN.
#pragma once

#include "cuda_common.cuh"

namespace jm::cuda {

constexpr int kTeamBlock = 256;
constexpr int kMinTeam = 4;  // fewest threads per row: a warp load covers at most 8 rows
constexpr int kMaxRowBlock = 768;

template <typename T>
inline constexpr int kRowPacks = 8;

// v4 (norm_fwd_half.cuh; the f32 default, norm_fwd.cu): half the packs per thread.
inline constexpr int kRowPacksHalf = 4;
// v9-6 (norm_fwd_half.cuh's kernel at N = 6; the 16-bit LayerNorm default where it needs as many threads
// per row as 8 packs): team rows of 6 packs per thread at 64 registers (C = 768: 96 packs on 16 threads,
// every slot used; with 8 packs a thread holds 2 empty slots at 80 registers).
inline constexpr int kRowPacksTeam6 = 6;

// This thread's place in the row geometry: lane among the row's rt threads, which of the block's rows
// (group), and the block's row loop (first row, stride), uniform over the block as the barriers need.
template <bool kBlockRow>
struct RowTeam {
  int lane, rt, group;
  int64_t first, step;
  __device__ explicit RowTeam(int tpr) {
    const int tid = static_cast<int>(threadIdx.x);
    if constexpr (kBlockRow) {
      lane = tid;
      rt = static_cast<int>(blockDim.x);
      group = 0;
      first = blockIdx.x;
      step = gridDim.x;
    } else {
      const int per_block = static_cast<int>(blockDim.x) / tpr;
      lane = tid & (tpr - 1);
      rt = tpr;
      group = tid / tpr;
      first = int64_t{blockIdx.x} * per_block;
      step = int64_t{gridDim.x} * per_block;
    }
  }
};

// Sums over the row's threads, the same bits in each. Team rows: xor shuffles within the lane group.
// Block rows: shuffles, then the warps' sums through shared memory in warp order. The partials are
// double-buffered by `parity` (the row loop's iteration & 1): a warp that runs ahead into the next row
// writes the other buffer, and cannot return to this one before every thread has passed the next
// row's barrier, i.e. has read this row's partials. One barrier per reduction. Each M has its own
// array, so LayerNorm's two reductions per row alternate arrays as well.
template <bool kBlockRow, int M>
__device__ __forceinline__ void row_sums(float (&v)[M], int tpr, int parity) {
  if constexpr (!kBlockRow) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {  // tpr / 2, ..., 1: unrolled (fewer registers)
      if (offset < tpr) {
#pragma unroll
        for (int m = 0; m < M; ++m) v[m] += __shfl_xor_sync(0xffffffffu, v[m], offset);
      }
    }
  } else {
    __shared__ float partial[2][M][kMaxRowBlock / 32];
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int warp = static_cast<int>(threadIdx.x / 32);
    const int warps = static_cast<int>(blockDim.x / 32);
    warp_reduce(v, SumOp{});
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) partial[parity][m][warp] = v[m];
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < M; ++m) v[m] = lane < warps ? partial[parity][m][lane] : 0.0f;
    warp_reduce(v, SumOp{});
  }
}

// The row pass over this thread's packs (k < N, pack lane + k*rt of the body) and over its edges
// (e = lane, held in edge0, then lane + rt, ... < edges, re-read from xr): f(v, count) with v the pack's
// floats (count = V) or an edge's float in v[0] (count = 1).
template <typename T, int V, int N, class F>
__device__ __forceinline__ void row_pass(const Pack<T, V> (&raw)[N], float edge0, const T* xr,
                                         const RowSpan<T, V>& sp, int cols, int lane, int rt, F&& f) {
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (lane + k * rt < sp.body) {
      float v[V];
      unpack_fresh(raw[k], v);
      f(v, V);
    }
  }
  float v[V];
  if (lane < sp.edges()) {
    v[0] = edge0;
    f(v, 1);
  }
  for (int e = lane + rt; e < sp.edges(); e += rt) {  // only when rt < edges (tpr 4 or 8)
    v[0] = to_float(xr[sp.edge_col(e, cols)]);
    f(v, 1);
  }
}

// The row's saved statistics, written by the row's lane 0: mean = m1 + dmean, where the shift m1 was
// taken relative to x[row, 0] (lane 0's first body element when the body starts the row, else its edge
// 0), and rstd.
template <bool kRms, typename T, int V>
__device__ __forceinline__ void write_row_stats(const Pack<T, V>& raw0, float edge0, const RowSpan<T, V>& sp,
                                                float m1, float dmean, float rstd, float* mean, float* rstd_out) {
  if constexpr (!kRms) {
    float first[V];
    unpack_fresh(raw0, first);
    *mean = (m1 - (sp.head == 0 && sp.body > 0 ? first[0] : edge0)) + dmean;
  }
  *rstd_out = rstd;
}

// How a norm row's output pass reads its parameter rows (scale, bias; nullptr when absent or the row is
// padding), whose packs start at column head + V*i: `vec` when both start 16-byte aligned there (a
// group's row under vmap may itself be misaligned when C % 4 != 0), `dense` (ParamLoad::kDense) when
// moreover every row the pass reads is present (RMSNorm reads no bias).
struct RowParamAccess {
  bool vec, dense;
};

template <bool kRms>
__device__ __forceinline__ RowParamAccess row_param_access(const float* srow, const float* brow, int head) {
  const auto aligned = [head](const float* p) {
    return p == nullptr || (reinterpret_cast<std::uintptr_t>(p) + sizeof(float) * head) % 16 == 0;
  };
  const bool vec = aligned(srow) && aligned(brow);
  return {vec, vec && srow != nullptr && (kRms || brow != nullptr)};
}

// y of type Ty: T's by default; another where the op's `dtype` asks (norm_fwd.cu's norm_fwd_mixed: x and y then both
// 16-byte aligned, so y's packs of V = kVec<T> elements are aligned wherever x's are). kCachedIo (v60's rows into
// another dtype; since v61 only into a narrower one: norm_fwd.cu's v3_mixed_cached_io): x read by __ldg and y written
// by plain stores, as the lean rows (v44) and v4's (v45) do, instead of the streaming pair. kSectors (v63; by
// default where norm_fwd.cu's rows_sector_stores says: 16-bit x into f32): y stored in whole 32-byte sectors, lane
// pairs exchanging half of x's pack (sector_halves; a team has at least kMinTeam lanes, so a pair's lanes share their
// row and hold adjacent packs).
template <typename T, bool kRms, bool kBlockRow, typename Ty = T, bool kCachedIo = false, bool kSectors = false>
__global__ void __launch_bounds__(kBlockRow ? kMaxRowBlock : kTeamBlock,
                                  kBlockRow ? 1 : kMaxRowBlock / kTeamBlock)
    norm_fwd_rows_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, Ty* __restrict__ y,
                         float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows, int cols,
                         float epsilon, int tpr) {
  constexpr int V = kVec<T>;
  constexpr int N = kRowPacks<T>;
  static_assert(!kSectors || (V == 8 && std::is_same_v<Ty, float>), "whole sectors: 16-bit x into f32");
  const RowTeam<kBlockRow> tm(tpr);
  const float fcols = static_cast<float>(cols);
  int parity = 0;
  for (int64_t base = tm.first; base < rows; base += tm.step, parity ^= 1) {
    const int64_t row = base + tm.group;
    const bool valid = row < rows;
    const int64_t offset = (valid ? row : 0) * int64_t{cols};
    const T* xr = x + offset;
    const RowSpan<T, V> sp(xr, cols, valid);

    Pack<T, V> raw[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int i = tm.lane + k * tm.rt;
      if (i < sp.body) raw[k] = kCachedIo ? load_nc<V>(xr + sp.head, i) : load_stream<V>(xr + sp.head, i);
    }
    // This thread's first edge, loaded with the body (no second round trip to memory for it).
    const float edge0 = tm.lane < sp.edges() ? to_float(xr[sp.edge_col(tm.lane, cols)]) : 0.0f;

    // Pass 1: sum(x) (LayerNorm) or sum(x^2) (RMSNorm).
    float s1[1] = {0.0f};
    row_pass(raw, edge0, xr, sp, cols, tm.lane, tm.rt, [&](const float(&v)[V], int count) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (j < count) s1[0] += kRms ? v[j] * v[j] : v[j];
      }
    });
    row_sums<kBlockRow>(s1, tpr, parity);

    float m1 = 0.0f, dmean = 0.0f, rstd;  // y = ((x - m1) - dmean) * rstd * scale + bias (pass 3: as an fma)
    if constexpr (kRms) {
      rstd = rsqrtf(s1[0] / fcols + epsilon);
    } else {
      m1 = s1[0] / fcols;
      float s2[2] = {0.0f, 0.0f};  // sum(d), sum(d^2), d = x - m1
      row_pass(raw, edge0, xr, sp, cols, tm.lane, tm.rt, [&](const float(&v)[V], int count) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (j < count) {
            const float d = v[j] - m1;
            s2[0] += d;
            s2[1] += d * d;
          }
        }
      });
      row_sums<kBlockRow>(s2, tpr, parity);
      dmean = s2[0] / fcols;
      rstd = rsqrtf(clamp_var((s2[1] - s2[0] * dmean) / fcols) + epsilon);
    }
    if (valid && tm.lane == 0) {
      write_row_stats<kRms>(raw[0], edge0, sp, m1, dmean, rstd, mean_out + row, rstd_out + row);
    }

    // Pass 3: y.
    const float* srow = valid ? param_row(scale, row, cols) : nullptr;
    const float* brow = valid ? param_row(bias, row, cols) : nullptr;
    const RowParamAccess pa = row_param_access<kRms>(srow, brow, sp.head);
    Ty* yr = y + offset;
    const float shift = -dmean * rstd;  // y = ((x - m1) * rstd + shift) * scale + bias
    with_param_plan(pa.dense, pa.vec, [&](auto plan) {
      constexpr ParamLoad kPlan = decltype(plan)::value;
      constexpr bool kDense = kPlan == ParamLoad::kDense;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int i = tm.lane + k * tm.rt;
        if constexpr (kSectors) {
          const int odd = tm.lane & 1;
          uint4 own;
          memcpy(&own, &raw[k], sizeof(own));  // (a lane past the row's packs sends words its partner never stores)
          uint2 halves[2];
          sector_halves(own, odd, 3u << (threadIdx.x & 30), halves);
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // the pair's packs p, each stored whole by one instruction
            const int p = (odd ? i - 1 : i) + h, col = p * V + 4 * odd;
            if (p < sp.body) {
              float v[4], s[4], b[4] = {};
              unpack_word_fresh<T>(halves[h].x, v[0], v[1]);
              unpack_word_fresh<T>(halves[h].y, v[2], v[3]);
              load_param_cols<4, kPlan>(srow, sp.head + col, pa.vec, 1.0f, s);
              if (!(kDense && kRms)) load_param_cols<4, kPlan>(brow, sp.head + col, pa.vec, 0.0f, b);
              Pack<float, 4> out;
#pragma unroll
              for (int j = 0; j < 4; ++j) out.v[j] = fmaf(v[j] - m1, rstd, shift) * s[j] + b[j];
              if constexpr (kCachedIo) {
                store_raw(yr + sp.head, int64_t{p} * 2 + odd, out);
              } else {
                store_stream(yr + sp.head, int64_t{p} * 2 + odd, out);
              }
            }
          }
        } else if (i < sp.body) {
          float v[V], s[V], b[V] = {};
          unpack_fresh(raw[k], v);
          load_param_cols<V, kPlan>(srow, sp.head + i * V, pa.vec, 1.0f, s);
          if (!(kDense && kRms)) load_param_cols<V, kPlan>(brow, sp.head + i * V, pa.vec, 0.0f, b);
          Pack<Ty, V> out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<Ty>(fmaf(v[j] - m1, rstd, shift) * s[j] + b[j]);
          if constexpr (kCachedIo) {
            store_raw<V>(yr + sp.head, i, out);
          } else {
            store_stream<V>(yr + sp.head, i, out);
          }
        }
      }
    });
    for (int e = tm.lane; e < sp.edges(); e += tm.rt) {
      const int c = sp.edge_col(e, cols);
      const float s = srow != nullptr ? srow[c] : 1.0f;
      const float b = brow != nullptr ? brow[c] : 0.0f;
      const float v = e == tm.lane ? edge0 : to_float(xr[c]);
      yr[c] = from_float<Ty>(fmaf(v - m1, rstd, shift) * s + b);
    }
  }
}

// Geometry of norm_fwd_rows_kernel with N packs per thread for C columns of T: team (tpr <= 32) or
// block rows (tpr = the block, one row each); ok == false beyond the block class
// (C > 768 * N * V + V - 1).
struct RowsPlan {
  bool ok = false;
  bool block_rows = false;
  int tpr = 0;
  int block = 0;
  int rows_per_block = 0;
};

template <typename T, int64_t N = kRowPacks<T>>
RowsPlan plan_norm_rows(int64_t cols) {
  constexpr int64_t V = kVec<T>;
  const int64_t packs = cols / V;  // the most body packs a row can have
  RowsPlan p;
  if (packs <= 32 * N) {
    p.tpr = kMinTeam;
    while (p.tpr * N < packs) p.tpr *= 2;
    p.block = kTeamBlock;
    p.rows_per_block = kTeamBlock / p.tpr;
    p.ok = true;
  } else if (packs <= int64_t{kMaxRowBlock} * N) {
    p.block_rows = true;
    p.tpr = static_cast<int>(ceil_div(ceil_div(packs, N), 32) * 32);
    p.block = p.tpr;
    p.rows_per_block = 1;
    p.ok = true;
  }
  return p;
}

}  // namespace jm::cuda
