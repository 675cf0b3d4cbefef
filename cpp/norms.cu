// LayerNorm and RMSNorm over the last axis: CUDA kernels and XLA FFI handlers (JmLayerNormFwdCuda,
// JmLayerNormBwdCuda, JmRmsNormFwdCuda, JmRmsNormBwdCuda). One kernel template per direction serves
// both norms (kRms drops the mean).
//
// Forward: rows of C <= 24579 (f32) / 49159 (16-bit) elements stay in registers (norm_rows.cuh: team
// rows of 4-32 threads for C <= 1027 / 2055, else block rows of 64-768 threads; one HBM read of x).
// Longer rows (or x and y at different addresses modulo 16, or C == 0) take norm_fwd_kernel below.
// Backward: norm_bwd_fused_kernel (x and dy in registers, dscale/dbias partials) for C <= 12288
// vectorized (v17: 16384 f32, 24576 16-bit) / 4096 unvectorized, else norm_bwd_kernel plus column sums;
// 16-bit rows of C <= 12288 (v19) and f32 rows of C = 1024..8192 (v20; lean_team) with a scale shared by
// every row take norm_bwd_lean.cuh's kernel.
#include "cuda_common.cuh"
#include "norm_bwd_lean.cuh"
#include "norm_fwd_half.cuh"
#include "norm_fwd_lean.cuh"
#include "norm_rows.cuh"
#include "partials.cuh"
#include "bindings.h"
#include "handlers.h"

#include <climits>
#include <optional>
#include <string>
#include <type_traits>

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

// Which register-row forward runs: norm_fwd_half.cuh's (4 packs per thread, more threads per SM; "v4")
// for 4-byte types, norm_rows.cuh's (8 packs; "v3") for 16-bit ones, each where its classes reach
// (v4: C <= 12291 f32), v3 beyond. Measured on the H200 (benchmarks/RESULTS.md): v4 ran 0.98-1.07x of
// v3 in f32 (faster at 9 of 10 shapes) and 0.94-1.04x in bf16 (slower at 5 of 10: v3's 8 packs of 8
// elements already keep enough bytes in flight). 16-bit LayerNorm team rows that 6 packs per thread cover
// with as many threads as v3's 8 (C = 768: 96 packs on 16 threads) run v4's kernel with 6 packs
// (kRowPacksTeam6, 64 registers: 4 x 256 threads per SM, v3 3): 128 +13-23%, 768 +2-10%, 1536 -2..+9% in
// 4-6 runs ("v9", "v10"). Not RMSNorm: v3 is at 93-98% of the copy there, the 6 packs 0.87-1.15x of it.
// bf16 rows of whole packs with one parameter row run norm_fwd_lean.cuh's kernel (LayerNorm v23, RMSNorm v24; rows
// without a scale or a bias too since v28, when their team rows began to read the parameters from shared memory).
// Since v29 the lean kernel's block rows take the packs per thread lean_tuned_plan gives (f32 rows too); since v44
// the lean rows read x by __ldg and store y plainly, and f32 block rows hold their parameters where that plan says;
// since v45 v4's rows read and store the same way, and f32 rows of C = 516..1024 take the lean block rows too; since
// v48 bf16 rows of 512..1536 packs (C = 4096..12288) take the lean block rows two per block (lean_pair_plan).
// For A/B benchmarks only, JAX_MEMOPS_NORM_FWD=v3 or =v4 (read once per process) forces one of them for
// every dtype (v3: 8 packs for every 16-bit team row, the rule before v10), =v21 the rule before v23, =v23 the lean
// rows' parameter loads before v28 (in pass 3; with both parameters), =v28 the packs before v29, =v29 the lean rows'
// streaming loads and stores before v44 (and their parameters loaded in pass 3), =v44 v4's streaming loads and stores
// before v45 (norm_fwd_half.cuh's kCachedIo), and v44's lean block rows (v45 adds f32 C = 516..1024, lean_block_plan),
// =v45 one row per block (v48 adds the pair rows).
// The backward is the same in all.
enum class NormFwd { kByDtype, kV3, kV4, kV21, kV23, kV28, kV29, kV44, kV45 };

NormFwd norm_fwd_version() {
  static const NormFwd v = env_choice("JAX_MEMOPS_NORM_FWD",
                                      {{"v3", NormFwd::kV3}, {"v4", NormFwd::kV4}, {"v21", NormFwd::kV21},
                                       {"v23", NormFwd::kV23}, {"v28", NormFwd::kV28}, {"v29", NormFwd::kV29},
                                       {"v44", NormFwd::kV44}, {"v45", NormFwd::kV45}},
                                      NormFwd::kByDtype);
  return v;
}

// The rule by dtype: the default, v23, v28, v29, v44 and v45 (which differ from it only in the lean rows' parameter
// loads, packs, rows per block and cache hints, and v4's cache hints).
bool norm_fwd_by_dtype() {
  const NormFwd v = norm_fwd_version();
  return v == NormFwd::kByDtype || v == NormFwd::kV23 || v == NormFwd::kV28 || v == NormFwd::kV29 ||
         v == NormFwd::kV44 || v == NormFwd::kV45;
}

// v45: the default's rule but for v48's pair rows (lean_pair_plan).
bool norm_fwd_v45_or_later() { return norm_fwd_version() == NormFwd::kByDtype || norm_fwd_version() == NormFwd::kV45; }

// The lean kernel's block rows: lean_block_plan by default (v45: f32 C = 516..1024 too), v44's under v44, v29's
// lean_block_packs without held parameters under v29 (norm_fwd_lean.cuh), none under the older versions.
template <typename T, bool kRms>
LeanBlock lean_tuned_plan(int64_t packs) {
  const NormFwd v = norm_fwd_version();
  if (v == NormFwd::kByDtype || v == NormFwd::kV44 || v == NormFwd::kV45) {
    return lean_block_plan<T, kRms>(packs, v != NormFwd::kV44);
  }
  return {v == NormFwd::kV29 ? lean_block_packs<T, kRms>(packs) : 0, false};
}

// v44: the lean kernel's cached I/O (kCachedIo), by default and under v44.
bool lean_cached_io() { return norm_fwd_v45_or_later() || norm_fwd_version() == NormFwd::kV44; }

// v45: v4's rows with cached I/O (norm_fwd_half.cuh's kCachedIo), by default only.
bool half_cached_io() { return norm_fwd_v45_or_later(); }

// f(std::integral_constant<int, np>) for the packs lean_block_packs<T, kRms> can give (2: f32 RMSNorm; 3: f32; 4: f32,
// bf16 LayerNorm).
template <typename T, bool kRms, typename F>
ffi::Error with_lean_packs(int np, F&& f) {
  if constexpr (sizeof(T) == 4 && kRms) {
    if (np == 2) return f(std::integral_constant<int, 2>{});
  }
  if constexpr (sizeof(T) == 4) {
    if (np == 3) return f(std::integral_constant<int, 3>{});
  }
  return f(std::integral_constant<int, 4>{});
}

template <typename T>
bool norm_fwd_half() {
  return norm_fwd_version() == NormFwd::kV4 || (norm_fwd_by_dtype() && sizeof(T) == 4);
}

// Which fused backward runs where norm_bwd_lean.cuh's kernel applies (16-byte packs, a scale shared by every row;
// lean_team): the default v36 — v35's kernels, but the 16-bit rows whose power-of-two team leaves slots empty on teams
// of a multiple of 32 threads (odd_team; the kernels' kOddTeams, staged). Measured against v35 in the form committed
// (the power-of-two kernels v35's, PTX identical; the odd teams' sums without a modulo, team_sum_lean; RESULTS.md
// "v38", "v39"): bf16 bwd LayerNorm 1.10 / 1.09 / 1.10x at C = 2056 / 4104 / 8200, RMSNorm 1.05x at 2056, 1.00x where
// the rule keeps the power-of-two team (4096; RMSNorm 4104 / 8200). The first form, whose team sums took a modulo per
// row in every lean kernel, read 1.10-1.14x at 2056, 2304, 4104, 4608, 8200, 9216 and cost the power-of-two rows 1-8%
// (RESULTS.md "v36"). =v36-k2 / =v36-k3 take odd teams of K = 2 / 3 packs wherever they fit; =v35 keeps v35's teams.
// v35 — v34's kernels, but LayerNorm's 16-bit rows of K = 3 packs on teams of 128, 256 or 512
// (packs in (2 tpr, 3 tpr]: bf16 / f16 C = 2056..3072, 4104..6144, 8200..12288) read from their two stages in both
// passes, the two partial rows in registers (kSmemRows, v34's form for the f32 rows; teams of 128 at K = 3 were not
// staged before), where v32 / v33's kernels copy the row into registers and keep the partials in shared memory by
// quads, which every slot reads and writes, a row's empty ones too. Measured against v34, one process each (RESULTS.md
// "v35"; A/A within 0.1-0.9%): bf16 bwd LayerNorm 1.08x at C = 2560, 1.05x at 5000, 1.01-1.02x at 6144, 1.09x at 8200
// and 9216, 1.07-1.08x at 10000, 1.05x at 11264, 1.00x at 3072 and 12288 (full rows). Measured and not taken: the same
// for the 16-bit K = 2 rows (LayerNorm 1.00-1.01x at 2048 / 4096, 0.98x at 8192, 0.95x at 6152) and RMSNorm's K = 2 and
// 3 (0.98-1.00x); three stages (0.93-0.97x); two 512-thread blocks per SM at 64 registers on the paired grid
// (0.67-0.95x). JAX_MEMOPS_NORM_BWD=v34 gives v34's kernels.
// v34 — v33's kernels, and the f32 rows of 2049..3072 packs (C = 8196..12288), which
// norm_bwd_fused_kernel ran (6 packs per thread in registers, nothing in flight while a row is worked on), on the lean
// kernel's 512-thread teams of K = 6 with the row read from its stage in both passes (kSmemRows): the registers hold
// the partials and the scale instead, two stages of shared memory fit (refilled after each row's second pass), and the
// partial slabs take the stages' memory at the end. Measured against v33, one process each (RESULTS.md "v34"; A/A
// within 0.3%): bwd LayerNorm 1.10 / 1.18 / 1.08 / 1.12x at C = 9216 / 10000 / 11264 / 12288, RMSNorm 1.09 / 1.06 /
// 1.04 / 1.02x. JAX_MEMOPS_NORM_BWD=v34-chunks gives the first form (RMSNorm only: the row in registers, one stage in K
// parts on their own mbarriers, kChunks; RMSNorm 1.07 / 1.04 / 1.04 / 1.01x, LayerNorm 0.79-0.86x with ptxas spilling
// 96 bytes), =v33 norm_bwd_fused_kernel for these rows.
// v33 — v32's kernels, but the 16-bit rows on teams of 256 or 512 threads or on teams of 128 of K = 2 packs (bf16 C =
// 2048, 4096..12288) and f32 LayerNorm's on teams of 512 (C = 8192) take their rows through two stages of shared memory
// per team, bulk-copied two rows ahead (norm_bwd_lean_kernel's kStages = 2, no register row ahead, the scale held), and
// RMSNorm's 16-bit rows of 769..1024 packs go back to one 512-thread team of K = 2 (staged) from v31's 256-thread teams
// of K = 4. A 512-thread team per SM had kept only its next row's 32-48 KB of x and dy in flight. Measured against v32,
// one process each (RESULTS.md "v33"; the final tree's A/A within 0.985-1.010): bf16 bwd LayerNorm 1.04 / 1.07 / 1.20 /
// 1.09x at C = 2048 / 4096 / 8192 / 12288 (6144 1.02x, 10000 1.13x in the call before), RMSNorm 1.01 / 1.05 / 1.03 /
// 1.07x (10000 1.11x); f32 LayerNorm 8192 1.08x. Not staged, where it lost or tied: teams of 64 threads (C = 1024:
// 0.97-1.00x), teams of 128 at K = 3 (3072: 0.99-1.00x), f32 RMSNorm and f32 LayerNorm below 512 threads (0.98-1.00x);
// three stages ran at 0.94-1.00x the speed of two.
// v32: v31's kernels, but the 16-bit rows of K = 3 packs per thread (packs in
// (2 tpr, 3 tpr]: bf16 C = 768, 3072, 6144, 8200..12288, ...) load the next row into a second register set before
// working on this one and hold the scale in registers (kAhead = 1, kHoldScale; 128 registers, no spill), and
// LayerNorm's keep their two partial rows in shared memory by quads to make room (the K >= 4 layout). Those rows
// stopped their loads through each row's reduction and stores (one 512-thread team per SM at C > 8192). Measured
// against v31, one process each, whose A/A read within ±0.7% (RESULTS.md "v32"): LayerNorm bf16 bwd +2.7..+6.6%
// (fwd+bwd +1.0..+3.6%) at C = 768 ... 12288; RMSNorm bf16 / f16 bwd +2.6..+3.9% at 8200..12288 (fwd+bwd
// +0.6..+1.1%), +0.4..+0.7% at 768 ... 6144 (fwd+bwd -0.7..+0.1%). v31: v20's kernels (16-bit rows of K = 2
// packs per thread prefetch the next row's packs into registers and hold the scale across rows (LayerNorm), or
// prefetch two rows ahead without holding it (RMSNorm, over one row ahead at C = 1024..8192 in three rounds: bwd
// +1 to +13%, fwd+bwd +2 to +7%, RESULTS.md "v20"; LayerNorm +-3%)) with each team at its own barrier, and
// RMSNorm's 16-bit rows of 769..1024 packs on 256-thread teams. For A/B benchmarks only JAX_MEMOPS_NORM_BWD=v32
// (v32's kernels), =v31 (v31's kernels), =v30 (v20's kernels as they were: the block's teams at one barrier, one
// 512-thread team beyond 768 packs), =v19 (one row ahead and the scale held for both ops: v19's default), =v19-hold
// (no prefetch), =v19-lean (neither), =v19-deep (two rows ahead, the scale not held, both ops) or =v18
// (norm_bwd_fused_kernel, the rule before v19). Read once per process.
enum class NormBwd {
  kV36, kV36K2, kV36K3, kV35, kV34, kV34Chunks, kV33, kV32, kV31, kV30, kV19, kV19Hold, kV19Lean, kV19Deep, kV18
};

NormBwd norm_bwd_version() {
  static const NormBwd v = env_choice("JAX_MEMOPS_NORM_BWD",
                                      {{"v36", NormBwd::kV36}, {"v36-k2", NormBwd::kV36K2},
                                       {"v36-k3", NormBwd::kV36K3}, {"v35", NormBwd::kV35}, {"v34", NormBwd::kV34},
                                       {"v34-chunks", NormBwd::kV34Chunks}, {"v33", NormBwd::kV33},
                                       {"v32", NormBwd::kV32}, {"v19", NormBwd::kV19},
                                       {"v19-hold", NormBwd::kV19Hold}, {"v19-lean", NormBwd::kV19Lean},
                                       {"v19-deep", NormBwd::kV19Deep},
                                       {"v18", NormBwd::kV18}, {"v30", NormBwd::kV30}, {"v31", NormBwd::kV31}},
                                      NormBwd::kV36);
  return v;
}

// Whether the version in use is `first` (v32 ... v36) or a later one (for the rules each of them added).
bool norm_bwd_since(NormBwd first) {
  const auto rank = [](NormBwd v) {
    switch (v) {
      case NormBwd::kV36:
      case NormBwd::kV36K2:
      case NormBwd::kV36K3: return 5;
      case NormBwd::kV35: return 4;
      case NormBwd::kV34:
      case NormBwd::kV34Chunks: return 3;
      case NormBwd::kV33: return 2;
      case NormBwd::kV32: return 1;
      default: return 0;
    }
  };
  return rank(norm_bwd_version()) >= rank(first);
}

// norm_fwd (v1, the fallback beyond norm_rows.cuh's classes): `tpr` threads per row (see RowPlan),
// grid-stride over rows, batched loads, the row cached in shared memory when it fits. Pass 1 sums x (x² for
// RMS). LayerNorm pass 2 sums d = x - m1 and d² around the pass-1 mean m1 (corrected two-pass: var = (Σd² -
// (Σd)²/C) / C; Σd only removes m1's rounding error, so there is no E[x²] - E[x]² cancellation), and y is
// centred on m1 + Σd/C without rounding it to f32 first. The last pass writes y. The saved mean is relative to
// the row's first element, (m1 - x[0]) + Σd/C (see ffi_common.h), so the backward's xhat is as accurate as y.
template <typename T, int V, bool kRms>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    norm_fwd_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, T* __restrict__ y,
                    float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows,
                    int64_t cols, float epsilon, RowPlan plan) {
  const RowSlot slot(plan);
  T* cache = slot.cache<T>(plan, cols);
  const int64_t packs = cols / V;
  const float fcols = static_cast<float>(cols);
  for (int64_t base = int64_t{blockIdx.x} * slot.rows_per_block; base < rows;
       base += int64_t{gridDim.x} * slot.rows_per_block) {
    const int64_t row = base + slot.group;
    const int64_t n = row < rows ? packs : 0;  // groups past the last row only join the reductions
    const T* xr = x + row * cols;

    float acc = 0.0f;
    for_row_packs<V>({xr}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      if (cache != nullptr) store_raw<V>(cache, i, p[0]);
      float v[V];
      unpack(p[0], v);
#pragma unroll
      for (int j = 0; j < V; ++j) acc += kRms ? v[j] * v[j] : v[j];
    });
    const float total = row_sum(acc, plan.tpr);

    const T* src = cache != nullptr ? cache : xr;
    float shift = 0.0f;  // y = ((x - shift) - dmean) * rstd * scale + bias
    float dmean = 0.0f;
    float rstd;
    if constexpr (kRms) {
      rstd = 1.0f / sqrtf(total / fcols + epsilon);
    } else {
      shift = total / fcols;
      float d[2] = {0.0f, 0.0f};  // Σ(x - shift), Σ(x - shift)²
      for_row_packs<V>({src}, n, slot.lane, plan.tpr, [&](int64_t, const auto& p) {
        float v[V];
        unpack(p[0], v);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float dv = v[j] - shift;
          d[0] += dv;
          d[1] += dv * dv;
        }
      });
      row_reduce(d, plan.tpr, SumOp{});
      dmean = d[0] / fcols;
      float var = (d[1] - d[0] * dmean) / fcols;
      if (var < 0.0f) var = 0.0f;  // rounding only; `var < 0` is false for NaN, which must propagate
      rstd = 1.0f / sqrtf(var + epsilon);
    }
    if (row < rows && slot.lane == 0) {
      if constexpr (!kRms) mean_out[row] = (shift - (cols > 0 ? to_float(xr[0]) : 0.0f)) + dmean;
      rstd_out[row] = rstd;
    }

    const float* scale_row = param_row(scale, row, cols);
    const float* bias_row = param_row(bias, row, cols);
    T* yr = y + row * cols;
    for_row_packs<V, kParamBatchRegs>({src}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      float v[V], s[V], b[V];
      unpack(p[0], v);
      load_param<V>(scale_row, i, 1.0f, s);
      load_param<V>(bias_row, i, 0.0f, b);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = ((v[j] - shift) - dmean) * rstd * s[j] + b[j];
      store_pack<V>(yr, i, v);
    });
  }
}

// norm_bwd (dx only): same geometry. Pass 1 caches x and dy and sums g = dy*scale and g*xhat over the
// row, with xhat = (x - x[0] - mean)*rstd (x*rstd for RMS); pass 2 writes
// dx = rstd*(g - mean(g) - xhat*mean(g*xhat)) (no mean(g) for RMS). g is rounded (__fmul_rn, no FMA
// contraction) so that both passes see the same g: with C == 1, dx is exactly 0.
template <typename T, int V, bool kRms>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    norm_bwd_kernel(const T* __restrict__ x, ParamView scale, const float* __restrict__ mean,
                    const float* __restrict__ rstd, const T* __restrict__ dy, T* __restrict__ dx,
                    int64_t rows, int64_t cols, RowPlan plan) {
  const RowSlot slot(plan);
  T* cache_x = slot.cache<T>(plan, 2 * cols);
  T* cache_dy = cache_x != nullptr ? cache_x + cols : nullptr;
  const int64_t packs = cols / V;
  const float fcols = static_cast<float>(cols);
  for (int64_t base = int64_t{blockIdx.x} * slot.rows_per_block; base < rows;
       base += int64_t{gridDim.x} * slot.rows_per_block) {
    const int64_t row = base + slot.group;
    const bool active = row < rows;
    const int64_t n = active ? packs : 0;
    const T* xr = x + row * cols;
    // xhat = (x - pivot) * rs: pivot = x[0] + mean (the saved mean is relative to x[0]).
    const float x0 = kRms || !active || cols == 0 ? 0.0f : to_float(xr[0]);
    const float mu = kRms || !active ? 0.0f : mean[row];
    const float rs = active ? rstd[row] : 0.0f;
    const float* scale_row = param_row(scale, row, cols);
    const T* dyr = dy + row * cols;

    float acc[2] = {0.0f, 0.0f};  // Σg, Σg*xhat
    for_row_packs<V, kParamBatchRegs>({xr, dyr}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      if (cache_x != nullptr) {
        store_raw<V>(cache_x, i, p[0]);
        store_raw<V>(cache_dy, i, p[1]);
      }
      float xv[V], dv[V], s[V];
      unpack(p[0], xv);
      unpack(p[1], dv);
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
    const T* dys = cache_x != nullptr ? cache_dy : dyr;
    T* dxr = dx + row * cols;
    for_row_packs<V, kParamBatchRegs>({xs, dys}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      float xv[V], dv[V], s[V];
      unpack(p[0], xv);
      unpack(p[1], dv);
      load_param<V>(scale_row, i, 1.0f, s);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xhat = ((xv[j] - x0) - mu) * rs;
        xv[j] = rs * (__fmul_rn(dv[j], s[j]) - mean_g - xhat * mean_gx);
      }
      store_pack<V>(dxr, i, xv);
    });
  }
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
template <typename T, int V>
inline constexpr int kFusedLongPacks = V == 1 ? 0 : (sizeof(T) == 4 ? 32 : 48) / V;

// Where the fused backward keeps its dscale/dbias partials: registers (RegPartials, v3) when they fit
// beside the row — 16-bit packs (K = 3: 24 raw registers for x and dy, 48 for the partials) and scalar
// ones (K = 8: 16 + 16) — else shared memory (f32: 48 raw registers leave no room for 48 more).
template <typename T, int V>
inline constexpr bool kFusedRegPartials = sizeof(T) == 2 || V == 1;

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
template <typename T, int V, bool kRms, int K = kFusedPacks<V>>
__global__ void __launch_bounds__(kTeamThreads, 1)
    norm_bwd_fused_kernel(const T* __restrict__ x, ParamView scale, const float* __restrict__ mean,
                          const float* __restrict__ rstd, const T* __restrict__ dy, T* __restrict__ dx,
                          int64_t rows, int64_t cols, int tpr, int64_t groups, int64_t per_group,
                          float* __restrict__ slab_a, float* __restrict__ slab_b) {
  constexpr bool kReg = kFusedRegPartials<T, V> && K == kFusedPacks<V>;
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
    const T* dyr = dy + row * cols;
    Pack<T, V> px[K], pd[K];
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
template <typename T, bool kRms>
struct NormGradElem {
  const T* x;
  const T* dy;
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

template <bool kRms>
ffi::Error norm_fwd(cudaStream_t stream, const char* what, RowShape s, const ffi::AnyBuffer& x,
                    ParamView scale, ParamView bias, ffi::AnyBuffer& y, float* mean, float* rstd,
                    float epsilon) {
  // rows == 0: nothing to write. cols == 0 (rows > 0) still runs: the statistics of an empty row are
  // NaN (0/0), as jnp.mean gives.
  if (s.rows == 0) return ffi::Error::Success();
  return dispatch_float(x.element_type(), [&](auto tag) -> ffi::Error {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y.untyped_data());
    // The row in registers (norm_rows.cuh) when it fits and x, y split the same way into 16-byte packs.
    RowsPlan plan = plan_norm_rows<T>(s.cols);
    const auto addr = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
    const bool same_split = s.cols > 0 && (addr(xp) - addr(yp)) % 16 == 0;
    // `kernel` over the rows in p's geometry: one CTA per row group, or the resident CTAs where a persistent
    // grid is asked for (the occupancy query only then).
    const auto launch_plan = [&](auto kernel, const RowsPlan& p, auto... args) -> ffi::Error {
      const int64_t groups = ceil_div(s.rows, p.rows_per_block);
      int64_t resident = groups;
      if (grid_mode(Grid::kFull) == Grid::kPersistent) {
        if (auto err = resident_blocks(kernel, p.block, 0, what, &resident); err.failure()) return err;
      }
      return launch(kernel, dim3(static_cast<unsigned>(grid_for(groups, resident, Grid::kFull))), dim3(p.block), 0,
                    stream, what, args...);
    };
    auto run = [&](auto kernel) -> ffi::Error {
      return launch_plan(kernel, plan, xp, scale, bias, yp, mean, rstd, s.rows, static_cast<int>(s.cols), epsilon,
                         plan.tpr);
    };
    // norm_fwd_lean.cuh: bf16 rows of whole packs, one scale row (and LayerNorm's one bias row) or none, all
    // aligned; v3's geometry, LayerNorm team rows at the packs v21 gives them (6 where v10's rule takes them, else
    // 8). LayerNorm since v23, RMSNorm since v24; absent parameters since v28. Since v29, where lean_tuned_plan gives
    // packs, block rows at them: f32 rows too (only those), bf16 LayerNorm 4096. Since v44 with cached I/O, and f32
    // block rows with their parameters held where the plan says.
    if constexpr (std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float>) {
      const auto one_row = [&](const ParamView& p) { return p.data == nullptr || p.rows_per_group >= s.rows; };
      const LeanBlock tuned = s.cols % kVec<T> == 0 ? lean_tuned_plan<T, kRms>(s.cols / kVec<T>) : LeanBlock{0, false};
      if (norm_fwd_by_dtype() && (sizeof(T) == 4 ? tuned.np > 0 : plan.ok) && one_row(scale) &&
          (kRms || one_row(bias)) && vectorizable<T>(s.cols, {xp, yp, scale.data, bias.data})) {
        // The instance for the parameters present (kS: scale, kB: LayerNorm's bias) and how team rows read them (kSt:
        // staged in shared memory, v28; else loaded in pass 3, v23).
        const auto lean = [&](auto has_scale, auto has_bias, auto staged) -> ffi::Error {
          constexpr bool kS = decltype(has_scale)::value, kB = decltype(has_bias)::value;
          const auto go = [&](auto kernel, const RowsPlan& p) -> ffi::Error {
            return launch_plan(kernel, p, xp, scale.data, bias.data, yp, mean, rstd, s.rows,
                               static_cast<int>(s.cols), 1.0f / static_cast<float>(s.cols), epsilon, p.tpr);
          };
          // f(std::bool_constant<io>): io = the kernel's kCachedIo (v44's default), else the streaming pair.
          const auto cached = [&](auto f) { return lean_cached_io() ? f(std::true_type{}) : f(std::false_type{}); };
          // v48: bf16 rows of 512..1536 packs two per block, with cached I/O (lean_pair_plan), by default only.
          if constexpr (sizeof(T) == 2) {
            const LeanPairs pairs = lean_pair_plan<kRms>(s.cols / kVec<T>);
            if (pairs.np > 0 && norm_fwd_version() == NormFwd::kByDtype) {
              const auto at = [&](auto np, auto regs) {
                constexpr int kNp = decltype(np)::value, kRegs = decltype(regs)::value;
                RowsPlan p = plan_norm_rows<T, kNp>(s.cols);
                p.rows_per_block = 2;
                return go(norm_fwd_lean_kernel<T, kRms, true, kNp, kS, kB, true, false, true, 2, kRegs>, p);
              };
              using I3 = std::integral_constant<int, 3>;
              using I4 = std::integral_constant<int, 4>;
              using R56 = std::integral_constant<int, 56>;
              using R64 = std::integral_constant<int, 64>;
              if constexpr (kRms) {  // lean_pair_plan: 56 registers
                return pairs.np == 3 ? at(I3{}, R56{}) : at(I4{}, R56{});
              } else {
                if (pairs.np == 3) return pairs.regs == 56 ? at(I3{}, R56{}) : at(I3{}, R64{});
                return at(I4{}, R64{});
              }
            }
          }
          if constexpr (kLeanTuned<T, kRms>) {
            if (tuned.np > 0) {
              return with_lean_packs<T, kRms>(tuned.np, [&](auto np) {
                constexpr int kNp = decltype(np)::value;
                const RowsPlan p = plan_norm_rows<T, kNp>(s.cols);
                if constexpr (sizeof(T) == 4) {  // lean_block_plan holds f32 parameters only
                  if (tuned.hold) return go(norm_fwd_lean_kernel<T, kRms, true, kNp, kS, kB, true, true, true>, p);
                }
                return cached([&](auto io) {
                  return go(norm_fwd_lean_kernel<T, kRms, true, kNp, kS, kB, true, false, decltype(io)::value>, p);
                });
              });
            }
          }
          if constexpr (sizeof(T) == 4) {
            return ffi::Error::Internal("f32 lean rows without tuned packs");  // the condition above excludes them
          } else {
            constexpr bool kSt = decltype(staged)::value;  // team rows only: block rows take one instance either way
            return cached([&](auto io) {
              constexpr bool kIo = decltype(io)::value;
              if (plan.block_rows) {
                return go(norm_fwd_lean_kernel<T, kRms, true, kRowPacks<T>, kS, kB, true, false, kIo>, plan);
              }
              if constexpr (!kRms) {
                if (const RowsPlan six = plan_norm_rows<T, kRowPacksTeam6>(s.cols); six.ok && six.tpr == plan.tpr) {
                  return go(norm_fwd_lean_kernel<T, kRms, false, kRowPacksTeam6, kS, kB, kSt, false, kIo>, six);
                }
              }
              return go(norm_fwd_lean_kernel<T, kRms, false, kRowPacks<T>, kS, kB, kSt, false, kIo>, plan);
            });
          }
        };
        using Yes = std::true_type;
        using No = std::false_type;
        if (norm_fwd_version() == NormFwd::kV23 && scale.data != nullptr && (kRms || bias.data != nullptr)) {
          return lean(Yes{}, std::bool_constant<!kRms>{}, No{});  // A/B only: v23's loads, both parameters
        }
        if constexpr (!kRms) {
          if (bias.data != nullptr) return scale.data != nullptr ? lean(Yes{}, Yes{}, Yes{}) : lean(No{}, Yes{}, Yes{});
        }
        return scale.data != nullptr ? lean(Yes{}, No{}, Yes{}) : lean(No{}, No{}, Yes{});
      }
    }
    // v4 (norm_fwd_half.cuh): its 32-bit row indices need rows + a block's rows <= INT_MAX.
    if (same_split && norm_fwd_half<T>() && s.rows <= int64_t{INT_MAX} - kMaxRowBlock) {
      if (const RowsPlan half = plan_norm_rows<T, kRowPacksHalf>(s.cols); half.ok) {
        plan = half;
        // v45: by default with cached I/O (benchmarks/norm_fwd_ab.cu half-io, two rounds: f32 team rows at C = 512
        // +5..6%, block rows at 768 / 1024 / 12288 +2.6..4.8%; RESULTS.md "v45"). 16-bit rows take v4's rows under v4
        // alone, without it.
        if constexpr (sizeof(T) == 4) {
          if (half_cached_io()) {
            return plan.block_rows ? run(norm_fwd_half_kernel<T, kRms, true, kRowPacksHalf, true>)
                                   : run(norm_fwd_half_kernel<T, kRms, false, kRowPacksHalf, true>);
          }
        }
        return plan.block_rows ? run(norm_fwd_half_kernel<T, kRms, true>) : run(norm_fwd_half_kernel<T, kRms, false>);
      }
    }
    // 16-bit LayerNorm team rows of 6 packs (v4's kernel: rows + a block's rows <= INT_MAX).
    if constexpr (sizeof(T) == 2 && !kRms) {
      if (same_split && plan.ok && !plan.block_rows && norm_fwd_by_dtype() && s.rows <= int64_t{INT_MAX} - kTeamBlock) {
        if (const RowsPlan six = plan_norm_rows<T, kRowPacksTeam6>(s.cols); six.ok && six.tpr == plan.tpr) {
          plan = six;
          return run(norm_fwd_half_kernel<T, kRms, false, kRowPacksTeam6>);
        }
      }
    }
    if (plan.ok && same_split) {
      return plan.block_rows ? run(norm_fwd_rows_kernel<T, kRms, true>) : run(norm_fwd_rows_kernel<T, kRms, false>);
    }
    // Longer rows: the v1 row kernel (the row cached in shared memory where it fits).
    const bool vec = vectorizable<T>(s.cols, {xp, yp, scale.data, bias.data});
    return with_vec<T>(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      return launch_rows(norm_fwd_kernel<T, V, kRms>, stream, s, V, s.cols * int64_t{sizeof(T)}, what,
                         xp, scale, bias, yp, mean, rstd, s.rows, s.cols, epsilon);
    });
  });
}

// The fused backward's grid: blocks of `block` threads, groups x per_group of them (one partial row each).
struct BwdGrid {
  int64_t groups, per_group;
  int block;
};

inline BwdGrid bwd_grid(const DeviceInfo& dev, RowShape s, int tpr, bool partials, const PartialsView& ws) {
  const int64_t groups = partials ? ws.groups : 1;
  const int64_t per_group = partials ? ws.per_group : std::min<int64_t>(s.rows, 4 * int64_t{dev.sm_count});
  // 256-thread blocks only when (nearly) every SM gets two: else one 512-thread block per SM holds twice
  // the rows in flight. As many teams as such a block holds (a team of more threads: one team; v36's teams of a
  // multiple of 32 threads that is not a power of two leave the rest of the block's threads out).
  const int64_t sms = dev.sm_count;
  const int threads = groups * per_group >= 2 * sms - sms / 8 ? kFusedMinBlock : kTeamThreads;
  return {groups, per_group, tpr * std::max(1, threads / tpr)};
}

// The threads of teams of tpr resident per SM on that grid: blocks of tpr * max(1, threads / tpr), two per SM where
// threads = kFusedMinBlock, one otherwise (at 128 registers an SM holds 512 threads).
inline int bwd_resident_threads(int tpr, int threads) {
  const int block = tpr * std::max(1, threads / tpr);
  return block * std::min(kTeamThreads / block, kTeamThreads / threads);
}

// The fused backward's launch for K packs per thread on teams of tpr threads: its grid (bwd_grid), partial slabs (a,
// b: nullptr where a gradient is not wanted) and shared memory (partial_smem_bytes: the slabs, and stage_bytes per
// team beyond them, or under them where `shared`). norm_bwd_lean's fit check and norm_bwd_one_pass both plan by it.
struct BwdLaunch {
  BwdGrid grid;
  float *a = nullptr, *b = nullptr;
  int64_t smem = 0;
};

template <int V, int K>
BwdLaunch bwd_launch(const DeviceInfo& dev, RowShape s, int tpr, const GradView& dscale, const GradView& dbias,
                     const PartialsView& ws, int64_t stage_bytes, bool shared) {
  const bool partials = dscale.data != nullptr || dbias.data != nullptr;
  BwdLaunch l{bwd_grid(dev, s, tpr, partials, ws)};
  if (partials) partial_slabs(ws, dscale, dbias, &l.a, &l.b);
  l.smem = partial_smem_bytes<V, K>((l.a != nullptr) + (l.b != nullptr), l.grid.block, tpr, stage_bytes, shared);
  return l;
}

// The fused backward's launch (K packs per thread, teams of tpr threads): dx and, through the workspace,
// the parameter gradients in one pass. Without gradients the rows are split into 4 runs per SM (no
// workspace to pay for).
// `kernel`: norm_bwd_fused_kernel<T, V, kRms, K> or norm_bwd_lean_kernel<T, kRms, K, ...> (same arguments).
// stage_bytes: the shared memory each team's stages take beyond the partial slabs (norm_bwd_lean_kernel's kStages;
// 0: none).
template <int V, int K, typename T, typename Kernel>
ffi::Error norm_bwd_one_pass(Kernel kernel, const DeviceInfo& dev, cudaStream_t stream, const char* what,
                             RowShape s, int tpr, const T* xp, ParamView scale, const float* mean,
                             const float* rstd, const T* dyp, T* dxp, const GradView& dscale,
                             const GradView& dbias, const PartialsView& ws, int64_t stage_bytes = 0,
                             bool shared = false) {
  const BwdLaunch l = bwd_launch<V, K>(dev, s, tpr, dscale, dbias, ws, stage_bytes, shared);
  const auto [groups, per_group, block] = l.grid;
  if (auto err = launch(kernel, dim3(static_cast<unsigned>(groups * per_group)), dim3(block),
                        static_cast<size_t>(l.smem), stream, what, xp, scale, mean, rstd, dyp, dxp, s.rows, s.cols,
                        tpr, groups, per_group, l.a, l.b);
      err.failure()) {
    return err;
  }
  if (l.a == nullptr && l.b == nullptr) return ffi::Error::Success();
  return sum_partials(stream, ws, s.cols, dscale, dbias, what);
}

// norm_bwd_lean.cuh's kernel for a row of `packs` 16-byte packs on teams of tpr threads: 16-bit K = 2 packs
// per thread where they cover the row (C = 1024..8192 and every power of two), else 3, and RMSNorm's K = 4
// (below); f32 K = 4 alone (its partials in registers, 32 floats at LayerNorm, where
// norm_bwd_fused_kernel keeps them in shared memory; no prefetch: a second row set spills at K = 4).
//
// lean_team: the team size for such rows (team_size(packs, 3) for 16-bit, (packs, 4) for f32), 0 where the
// lean kernel does not take them: rows beyond a 512-thread team, f32 rows that leave K = 3 (K = 4 at
// C = 1024..8192 measured bwd +2 to +14% over norm_bwd_fused_kernel; C = 768 at K = 3 2-4% behind it:
// RESULTS.md "v20"). v31: RMSNorm's 16-bit rows of 769..1024 packs (C = 6152..8192) take teams of 256 threads of
// K = 4 packs (the partials in shared memory) instead of one 512-thread team of K = 2 per block: two teams at
// their own barriers, out of phase where one team stalls the whole SM at each row's barrier (bf16 8192 +7.5%;
// LayerNorm's K = 2 kernel, which holds its scale, beats the same change by 7%; K = 6 at 12288 lost 3-20%). v33:
// with its rows staged (norm_bwd_lean), one 512-thread team of K = 2 again, over v31's teams staged or not (bf16 8192
// +4%, RESULTS.md "v33"); JAX_MEMOPS_NORM_BWD=v31 or =v32 keeps v31's teams. v34: f32 rows of 2049..3072 packs on
// one 512-thread team of K = 6 (norm_bwd_version's comment; under v34-chunks RMSNorm's only).
// v36 (the default since v39's calls): a 16-bit row whose power-of-two team (tpr threads of K = 2 or 3 packs) leaves
// more than a tenth of its slots empty may take a team of a multiple of 32 threads instead, of 96..512 threads (staged,
// the kernels' kOddTeams, norm_bwd_lean): the fewest warps that hold the row at K = 3 packs per thread, or at K = 2 —
// whichever an SM holds more threads of, and only where it holds at least as many as the power-of-two team keeps busy
// (its resident threads times its share of full slots). `threads`: bwd_grid's block rule (256: two blocks per SM).
// Measured against v35 in one build (RESULTS.md "v36"; bf16 LayerNorm bwd, one process each, A/A 0.986-1.004): taken,
// 2056 / 2304 (96 x 3, two blocks of two teams per SM) 1.12 / 1.14x, 3584 (224 x 2) 1.05x, 4104 / 4608 (192 x 3, two
// teams a block) 1.10 / 1.11x, 5000 / 5120 (224 x 3) 1.03 / 1.04x, 6152 (416 x 2) 0.99x, 7168 (448 x 2) 1.01x, 8200
// (352 x 3) 1.14x, 9216 (384 x 3) 1.11x, 10000 (448 x 3) 1.00x; not taken, where an SM holds only 288-320 threads: 2560
// (160 x 2) 0.87x, 3584 (160 x 3) 0.88x, 4608 (288 x 2) 0.83x, 5120 (320 x 2) 0.85x, 7168 (320 x 3) 0.88x. In that
// build every lean kernel ran kOddTeams' team sums, 1-8% slower than v35's (norm_bwd_version's comment). RMSNorm:
// lean_team. =v36-k2 / =v36-k3 take that K's team wherever it fits. 0: keep tpr.
int odd_team(int64_t packs, int tpr, int threads) {
  const int64_t k = packs > 2 * int64_t{tpr} ? 3 : 2;
  if (packs * 10 >= k * tpr * 9) return 0;
  const auto team_of = [&](int64_t kk) {  // 0 where it does not fit a 512-thread team or is too small to stage
    const int64_t t = 32 * ceil_div(packs, 32 * kk);
    return t >= 96 && t <= kTeamThreads ? static_cast<int>(t) : 0;
  };
  const int t3 = team_of(3), t2 = team_of(2);
  switch (norm_bwd_version()) {
    case NormBwd::kV36K2: return t2;
    case NormBwd::kV36K3: return t3;
    default: break;
  }
  const int64_t busy = bwd_resident_threads(tpr, threads) * packs / (k * tpr);
  const auto held = [&](int t) { return t == 0 ? 0 : bwd_resident_threads(t, threads); };
  const int t = held(t3) >= held(t2) ? t3 : t2;
  return t != 0 && held(t) >= busy ? t : 0;
}

template <typename T, bool kRms>
int lean_team(int64_t packs, int threads) {
  if (sizeof(T) == 2 && kRms && packs > 3 * int64_t{kFusedMinBlock} && packs <= 4 * int64_t{kFusedMinBlock} &&
      (norm_bwd_version() == NormBwd::kV31 || norm_bwd_version() == NormBwd::kV32)) {
    return kFusedMinBlock;
  }
  if (sizeof(T) == 4 && packs > 4 * int64_t{kTeamThreads} && packs <= 6 * int64_t{kTeamThreads}) {
    const bool k6 = norm_bwd_version() == NormBwd::kV34Chunks ? kRms : norm_bwd_since(NormBwd::kV34);
    return k6 ? kTeamThreads : 0;
  }
  const int tpr = team_size(packs, sizeof(T) == 2 ? 3 : 4);
  // v36: LayerNorm's odd teams wherever odd_team takes them, RMSNorm's on the paired grid only (threads 256: bf16
  // 2056 / 2304 1.07-1.09x, 3584 1.02x; on one block per SM 0.99-1.01x, a mean of -0.3%: RESULTS.md "v36").
  if (sizeof(T) == 2 && tpr <= kTeamThreads && norm_bwd_since(NormBwd::kV36) && (!kRms || threads == kFusedMinBlock)) {
    if (const int odd = odd_team(packs, tpr, threads); odd > 0) return odd;
  }
  return tpr <= kTeamThreads && (sizeof(T) == 2 || packs > 3 * int64_t{tpr}) ? tpr : 0;
}

template <typename T, bool kRms>
ffi::Error norm_bwd_lean(const DeviceInfo& dev, cudaStream_t stream, const char* what, RowShape s, int tpr,
                         const T* xp, ParamView scale, const float* mean, const float* rstd, const T* dyp, T* dxp,
                         const GradView& dscale, const GradView& dbias, const PartialsView& ws) {
  constexpr int V = kVec<T>;
  // `kernel` of K = k packs per thread; team_stages and shared: norm_bwd_one_pass's stage_bytes and shared.
  const auto run = [&](auto kernel, auto k, int64_t team_stages = 0, bool shared = false) {
    return norm_bwd_one_pass<V, decltype(k)::value>(kernel, dev, stream, what, s, tpr, xp, scale, mean, rstd, dyp,
                                                    dxp, dscale, dbias, ws, team_stages, shared);
  };
  using K2 = std::integral_constant<int, 2>;
  using K3 = std::integral_constant<int, 3>;
  using K4 = std::integral_constant<int, 4>;
  using K6 = std::integral_constant<int, 6>;
  const bool v30 = norm_bwd_version() == NormBwd::kV30;
  const int64_t packs = s.cols / V;
  // v33: the teams norm_bwd_version's comment names take their rows through two stages of shared memory per team
  // (norm_bwd_lean_kernel's kStages), where the block's shared memory holds them beside the partial slabs (half of
  // an SM's where blocks of 256 threads are planned, two per SM). v34: the f32 rows of K = 6 through two, read from
  // them in both passes, the partial slabs in the same memory (shared); v34-chunks: RMSNorm's through one, in parts.
  // v35: LayerNorm's 16-bit rows of K = 3 the same way as v34's f32 rows, on teams of 128 too.
  constexpr int kStages = 2;
  const auto stage_bytes = [&](int stages) { return int64_t{stages} * 2 * packs * 16; };
  const auto stages_fit = [&](auto k, int stages, bool shared) {
    constexpr int kK = decltype(k)::value;
    const bool odd = (tpr & (tpr - 1)) != 0;  // v36's teams (odd_team): staged at every size they take
    const bool teams = sizeof(T) == 2 ? tpr >= 256 || (tpr == 128 && (kK == 2 || shared)) || odd
                                      : tpr == kTeamThreads && (!kRms || kK == 6);
    if (!norm_bwd_since(NormBwd::kV33) || !teams) return false;
    const BwdLaunch l = bwd_launch<V, kK>(dev, s, tpr, dscale, dbias, ws, stage_bytes(stages), shared);
    return l.smem <= (l.grid.block <= kFusedMinBlock ? dev.max_smem_optin / 2 - 2048 : dev.max_smem_optin - 1024);
  };
  // The staged kernel of K packs per thread and `stages` stages (its kStages), where stages_fit(K, stages).
  // shared: the kernel's kSmemRows (its slabs take the stages' memory).
  const auto staged = [&](auto k, int stages, auto kernel, bool shared = false) -> std::optional<ffi::Error> {
    if (!stages_fit(k, stages, shared)) return std::nullopt;
    return run(kernel, k, stage_bytes(stages), shared);
  };
  if constexpr (sizeof(T) == 4) {
    if (packs > 4 * int64_t{tpr}) {  // v34 (lean_team's): where the stage does not fit, the kernel before it
      if (norm_bwd_version() != NormBwd::kV34Chunks) {
        if (auto r = staged(K6{}, 2, norm_bwd_lean_kernel<T, kRms, 6, true, 0, true, false, 2, false, true>, true)) {
          return *r;
        }
      } else if constexpr (kRms) {
        if (auto r = staged(K6{}, 1, norm_bwd_lean_kernel<T, kRms, 6, false, 0, true, true, 1, true>)) return *r;
      }
      return run(norm_bwd_fused_kernel<T, V, kRms>, std::integral_constant<int, kFusedPacks<V>>{});
    }
    if constexpr (!kRms) {
      if (auto r = staged(K4{}, kStages, norm_bwd_lean_kernel<T, kRms, 4, false, 0, true, true, kStages>)) {
        return *r;
      }
    }
    return v30 ? run(norm_bwd_lean_kernel<T, kRms, 4, false, 0, false>, K4{})
               : run(norm_bwd_lean_kernel<T, kRms, 4, false, 0>, K4{});
  } else {
    if ((tpr & (tpr - 1)) != 0) {  // v36's odd teams (odd_team): their staged kernels, else v35's power-of-two team
      constexpr bool kLn = !kRms;  // LayerNorm's K = 3 rows from their stages (v35's form), RMSNorm's copied out
      constexpr auto odd3 = norm_bwd_lean_kernel<T, kRms, 3, true, 0, true, false, kStages, false, kLn, true>;
      constexpr auto odd2 = norm_bwd_lean_kernel<T, kRms, 2, true, 0, true, false, kStages, false, false, true>;
      const auto r = packs > 2 * int64_t{tpr} ? staged(K3{}, kStages, odd3, kLn) : staged(K2{}, kStages, odd2);
      if (r) return *r;
      tpr = team_size(packs, 3);
    }
    if constexpr (kRms) {
      if (packs > 3 * int64_t{tpr}) {  // lean_team's
        return run(norm_bwd_lean_kernel<T, kRms, 4, false, 0>, K4{});  // v31, v32
      }
    }
    if (packs > 2 * int64_t{tpr}) {
      if constexpr (!kRms) {  // v35: LayerNorm's from their stages in both passes, teams of 128 too (version comment)
        constexpr auto rows_from_stages = norm_bwd_lean_kernel<T, false, 3, true, 0, true, false, kStages, false, true>;
        if (norm_bwd_since(NormBwd::kV35)) {
          if (auto r = staged(K3{}, kStages, rows_from_stages, true)) return *r;
        }
      }
      if (auto r = staged(K3{}, kStages, norm_bwd_lean_kernel<T, kRms, 3, true, 0, true, !kRms, kStages>)) return *r;
      // v32: K = 3 rows one row ahead with the scale held; LayerNorm's partials in shared memory by quads, where its
      // two partial rows leave the registers no room for a second row (norm_bwd_version's comment).
      if (norm_bwd_since(NormBwd::kV32)) {
        return run(norm_bwd_lean_kernel<T, kRms, 3, true, 1, true, !kRms>, K3{});
      }
      return v30 ? run(norm_bwd_lean_kernel<T, kRms, 3, false, 0, false>, K3{})
                 : run(norm_bwd_lean_kernel<T, kRms, 3, false, 0>, K3{});
    }
    if (auto r = staged(K2{}, kStages, norm_bwd_lean_kernel<T, kRms, 2, true, 0, true, false, kStages>)) return *r;
    switch (norm_bwd_version()) {
      case NormBwd::kV19Hold: return run(norm_bwd_lean_kernel<T, kRms, 2, true, 0>, K2{});
      case NormBwd::kV19Lean: return run(norm_bwd_lean_kernel<T, kRms, 2, false, 0>, K2{});
      case NormBwd::kV19Deep: return run(norm_bwd_lean_kernel<T, kRms, 2, false, 2>, K2{});
      case NormBwd::kV19: return run(norm_bwd_lean_kernel<T, kRms, 2, true, 1>, K2{});
      case NormBwd::kV30: return run(norm_bwd_lean_kernel<T, kRms, 2, !kRms, kRms ? 2 : 1, false>, K2{});
      default: return run(norm_bwd_lean_kernel<T, kRms, 2, !kRms, kRms ? 2 : 1>, K2{});
    }
  }
}

template <bool kRms>
ffi::Error norm_bwd(cudaStream_t stream, const char* what, RowShape s, const ffi::AnyBuffer& x,
                    ParamView scale, const float* mean, const float* rstd, const ffi::AnyBuffer& dy,
                    ffi::AnyBuffer& dx, const GradView& dscale, const GradView& dbias,
                    const PartialsView& ws) {
  if (s.rows == 0) {
    return first_error({zero_grad(stream, dscale, s.cols, what), zero_grad(stream, dbias, s.cols, what)});
  }
  if (s.cols == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx.untyped_data());
    const bool vec = vectorizable<T>(s.cols, {xp, dyp, dxp, scale.data});
    const bool want = dscale.data != nullptr || dbias.data != nullptr;
    return with_vec<T>(vec, [&](auto v) -> ffi::Error {
      constexpr int V = decltype(v)::value;
      if (!want || ws.data != nullptr) {
        if constexpr (V * sizeof(T) == 16) {  // kVec<T>: the alias fails in g++ inside this nested lambda
          // bwd_grid's block for teams of one thread: its rule's 256 or 512 threads
          const int tpr = lean_team<T, kRms>(s.cols / V, bwd_grid(dev, s, 1, want, ws).block);
          const bool one_scale = scale.data != nullptr && scale.rows_per_group >= s.rows;
          if (tpr > 0 && one_scale && norm_bwd_version() != NormBwd::kV18) {
            return norm_bwd_lean<T, kRms>(dev, stream, what, s, tpr, xp, scale, mean, rstd, dyp, dxp, dscale, dbias,
                                          ws);
          }
        }
        if (const int tpr = team_size(s.cols / V, kFusedPacks<V>); tpr <= kTeamThreads) {
          return norm_bwd_one_pass<V, kFusedPacks<V>>(norm_bwd_fused_kernel<T, V, kRms>, dev, stream, what, s, tpr, xp,
                                                      scale, mean, rstd, dyp, dxp, dscale, dbias, ws);
        }
        constexpr int kLong = kFusedLongPacks<T, V>;
        if constexpr (kLong > 0) {
          if (const int tpr = team_size(s.cols / V, kLong); tpr <= kTeamThreads) {
            return norm_bwd_one_pass<V, kLong>(norm_bwd_fused_kernel<T, V, kRms, kLong>, dev, stream, what, s, tpr, xp,
                                               scale, mean, rstd, dyp, dxp, dscale, dbias, ws);
          }
        }
      }
      // Rows longer than the registers hold (or no usable workspace): the row kernel for dx, then the
      // column sums re-read x and dy.
      if (auto err = launch_rows(norm_bwd_kernel<T, V, kRms>, stream, s, V, 2 * s.cols * int64_t{sizeof(T)},
                                 what, xp, scale, mean, rstd, dyp, dxp, s.rows, s.cols);
          err.failure()) {
        return err;
      }
      return launch_column_sums(stream, NormGradElem<T, kRms>{xp, dyp, mean, rstd, s.cols}, s.cols, dscale,
                                dbias, what);
    });
  });
}

ffi::Error LayerNormFwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                        ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                        ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  RowShape s;
  ParamView sv, bv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, *y, "y"), param_view(scale, s, "scale", &sv),
                              param_view(bias, s, "bias", &bv), check_stats(*mean, s, "mean"),
                              check_stats(*rstd, s, "rstd")});
      err.failure()) {
    return err;
  }
  return norm_fwd<false>(stream, "layer_norm_fwd", s, x, sv, bv, *y,
                         static_cast<float*>(mean->untyped_data()),
                         static_cast<float*>(rstd->untyped_data()), epsilon);
}

ffi::Error LayerNormBwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer mean,
                        ffi::AnyBuffer rstd, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                        ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> dbias,
                        ffi::Result<ffi::AnyBuffer> workspace) {
  RowShape s;
  ParamView sv;
  GradView gs, gb;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, dy, "dy"), check_same(x, *dx, "dx"),
                              param_view(scale, s, "scale", &sv), check_stats(mean, s, "mean"),
                              check_stats(rstd, s, "rstd"), grad_view(*dscale, s, "dscale", &gs),
                              grad_view(*dbias, s, "dbias", &gb)});
      err.failure()) {
    return err;
  }
  return norm_bwd<false>(stream, "layer_norm_bwd", s, x, sv, static_cast<const float*>(mean.untyped_data()),
                         static_cast<const float*>(rstd.untyped_data()), dy, *dx, gs, gb,
                         partials_view(*workspace, s, gs, gb));
}

ffi::Error RmsNormFwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale,
                      ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  RowShape s;
  ParamView sv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, *y, "y"), param_view(scale, s, "scale", &sv),
                              check_stats(*rstd, s, "rstd")});
      err.failure()) {
    return err;
  }
  return norm_fwd<true>(stream, "rms_norm_fwd", s, x, sv, ParamView{}, *y, nullptr,
                        static_cast<float*>(rstd->untyped_data()), epsilon);
}

ffi::Error RmsNormBwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer rstd,
                      ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                      ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> workspace) {
  RowShape s;
  ParamView sv;
  GradView gs;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, dy, "dy"), check_same(x, *dx, "dx"),
                              param_view(scale, s, "scale", &sv), check_stats(rstd, s, "rstd"),
                              grad_view(*dscale, s, "dscale", &gs)});
      err.failure()) {
    return err;
  }
  return norm_bwd<true>(stream, "rms_norm_bwd", s, x, sv, nullptr,
                        static_cast<const float*>(rstd.untyped_data()), dy, *dx, gs, GradView{},
                        partials_view(*workspace, s, gs, GradView{}));
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormFwdCuda, jm::cuda::LayerNormFwd,
                              jm::bind::layer_norm_fwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormBwdCuda, jm::cuda::LayerNormBwd,
                              jm::bind::layer_norm_bwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormFwdCuda, jm::cuda::RmsNormFwd,
                              jm::bind::rms_norm_fwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormBwdCuda, jm::cuda::RmsNormBwd,
                              jm::bind::rms_norm_bwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
