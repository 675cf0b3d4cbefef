// LayerNorm and RMSNorm forward over the last axis: the XLA FFI handlers JmLayerNormFwdCuda and JmRmsNormFwdCuda.
// One kernel template serves both norms (kRms drops the mean). Rows of C <= 24579 (f32) / 49159 (16-bit) elements stay
// in registers (norm_rows.cuh: team rows of 4-32 threads for C <= 1027 / 2055, else block rows of 64-768 threads; one
// HBM read of x; norm_fwd_half.cuh's and norm_fwd_lean.cuh's variants by the rule below). Longer rows (or x and y at
// different addresses modulo 16, or C == 0) take norm_fwd_kernel below. A y of another dtype than x (the ops' `dtype`)
// takes the lean rows where they win (v57, v60: lean_mixed_rows), else norm_fwd_mixed's two kernels. The backward:
// norm_bwd.cu.
#include "cuda_common.cuh"
#include "norm_fwd_half.cuh"
#include "norm_fwd_lean.cuh"
#include "norm_rows.cuh"
#include "bindings.h"
#include "handlers.h"

#include <climits>
#include <cstdint>
#include <optional>
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
// =v45 one row per block (v48 adds the pair rows), =v48 y of another dtype than x's on v3's rows (norm_fwd_mixed) alone
// (v57 adds the lean rows where they win: lean_mixed_rows), =v57 the rule before v60 (bf16 rows into f32 on
// LayerNorm's team rows alone, at v3's packs; v3's rows for the rest, streaming), =v58 the default but for v3's rows
// into another dtype, which all stream, =v60 the rule before v61 (those rows all with cached I/O; v60 is the candidate
// v59 of the thirteenth session), =v61 the rule before v62 (the 16-bit lean rows into f32 store y in whole sectors,
// norm_fwd_lean.cuh's kSectors; the candidate of the fifteenth session, adopted in the sixteenth), =v62 the rule
// before v65 (v65: v62 but for LayerNorm's rows of fewer than 4 packs a thread or blocks over 256 threads,
// and v3's rows from 16-bit x into f32 in whole sectors too, RMSNorm's at every C, LayerNorm's to C = 12288:
// lean_sector_stores, rows_sector_stores), =v63 the sixteenth session's candidate (v62, and v3's rows from 16-bit x
// into f32 in whole sectors at every C: norm_rows.cuh's kSectors), =v66 and =v67 the seventeenth session's candidates
// (v66: v65, and the f16 pairs on the lean rows as bf16's, lean_f16_pairs; v67: v66, and f16 rows of x's dtype on the
// lean rows too, lean_f16_rows), =v65 the rule before v68 (the default since the eighteenth session: v67 but
// LayerNorm's f16 rows in blocks over 256 threads, lean_f16_block). The backward is the same in all.
enum class NormFwd {
  kByDtype, kV3, kV4, kV21, kV23, kV28, kV29, kV44, kV45, kV48, kV57, kV58, kV60, kV61, kV62, kV63, kV65, kV66, kV67
};

NormFwd norm_fwd_version() {
  static const NormFwd v = env_choice("JAX_MEMOPS_NORM_FWD",
                                      {{"v3", NormFwd::kV3}, {"v4", NormFwd::kV4}, {"v21", NormFwd::kV21},
                                       {"v23", NormFwd::kV23}, {"v28", NormFwd::kV28}, {"v29", NormFwd::kV29},
                                       {"v44", NormFwd::kV44}, {"v45", NormFwd::kV45},
                                       {"v48", NormFwd::kV48}, {"v57", NormFwd::kV57}, {"v58", NormFwd::kV58},
                                       {"v60", NormFwd::kV60}, {"v61", NormFwd::kV61},
                                       {"v62", NormFwd::kV62}, {"v63", NormFwd::kV63}, {"v65", NormFwd::kV65},
                                       {"v66", NormFwd::kV66}, {"v67", NormFwd::kV67}},
                                      NormFwd::kByDtype);
  return v;
}

// v57 and later: the lean rows write y of another dtype where lean_mixed_rows says (v57, v58, v60..v63, v65..v67,
// the default).
bool mixed_v57_or_later(NormFwd v) {
  return v == NormFwd::kByDtype || v == NormFwd::kV57 || v == NormFwd::kV58 || v == NormFwd::kV60 ||
         v == NormFwd::kV61 || v == NormFwd::kV62 || v == NormFwd::kV63 || v == NormFwd::kV65 || v == NormFwd::kV66 ||
         v == NormFwd::kV67;
}

// v65's rule for the rows other than f16's: v65, v66, v67 and the default (v68).
bool norm_fwd_v65_rule() {
  const NormFwd v = norm_fwd_version();
  return v == NormFwd::kByDtype || v == NormFwd::kV65 || v == NormFwd::kV66 || v == NormFwd::kV67;
}

// v63, v65 and later: v3's rows from 16-bit x into f32 store y in whole sectors (norm_rows.cuh's kSectors),
// under v63 at every C; by default RMSNorm's at every C, LayerNorm's to C = 12288 (f16 x: bf16 rows that short take
// the lean rows). Measured on the H200 (RESULTS.md "v63"; 2^26 elements, device timing, one process each, two
// rounds, same-dtype cells 0.996-1.003): f16 into f32 LayerNorm +5..7% at C = 1024 / 4096 but -1.1% at 16384,
// -0.5..+0.7% at 24576; RMSNorm +9..16% (f16, 1024..24576) and +11..18% (bf16, 16384 / 24576).
template <bool kRms>
bool rows_sector_stores(int64_t cols) {
  return norm_fwd_version() == NormFwd::kV63 || (norm_fwd_v65_rule() && (kRms || cols <= 12288));
}

// The rule by dtype: the default, v23, v28, v29, v44, v45, v48, v57, v58 and v60 (which differ from it only in the
// lean rows' parameter loads, packs, rows per block, cache hints and output dtypes, and v4's and v3's cache hints).
bool norm_fwd_by_dtype() {
  const NormFwd v = norm_fwd_version();
  return v == NormFwd::kByDtype || v == NormFwd::kV23 || v == NormFwd::kV28 || v == NormFwd::kV29 ||
         v == NormFwd::kV44 || v == NormFwd::kV45 || v == NormFwd::kV48 || mixed_v57_or_later(v);
}

// v60: bf16 rows into f32 on the lean rows at kMixedPacks, by default and under v58, v60..v63 and v65..v67.
bool mixed_lean_packs() { return mixed_v57_or_later(norm_fwd_version()) && norm_fwd_version() != NormFwd::kV57; }

// v48: the default's rule for rows of one dtype (v57, v58, v60..v63, v65, v66 change only rows into another; v67 and
// the default f16 rows too, lean_f16_rows).
bool norm_fwd_v48_or_later() { return norm_fwd_version() == NormFwd::kV48 || mixed_v57_or_later(norm_fwd_version()); }

// v45: the default's rule but for v48's pair rows (lean_pair_plan).
bool norm_fwd_v45_or_later() { return norm_fwd_v48_or_later() || norm_fwd_version() == NormFwd::kV45; }

// The lean kernel's block rows: lean_block_plan by default (v45: f32 C = 516..1024 too), v44's under v44, v29's
// lean_block_packs without held parameters under v29 (norm_fwd_lean.cuh), none under the older versions.
template <typename T, bool kRms>
LeanBlock lean_tuned_plan(int64_t packs) {
  const NormFwd v = norm_fwd_version();
  if (norm_fwd_v45_or_later() || v == NormFwd::kV44) {
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

// norm_fwd (v1, the fallback beyond norm_rows.cuh's classes): `tpr` threads per row (see RowPlan),
// grid-stride over rows, batched loads, the row cached in shared memory when it fits. Pass 1 sums x (x² for
// RMS). LayerNorm pass 2 sums d = x - m1 and d² around the pass-1 mean m1 (corrected two-pass: var = (Σd² -
// (Σd)²/C) / C; Σd only removes m1's rounding error, so there is no E[x²] - E[x]² cancellation), and y is
// centred on m1 + Σd/C without rounding it to f32 first. The last pass writes y. The saved mean is relative to
// the row's first element, (m1 - x[0]) + Σd/C (see ffi_common.h), so the backward's xhat is as accurate as y.
template <typename T, int V, bool kRms, typename Ty = T>
__global__ void __launch_bounds__(kMaxRowThreads, 2)
    norm_fwd_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, Ty* __restrict__ y,
                    float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows,
                    int64_t cols, float epsilon, RowPlan plan) {
  const RowSlot slot(plan);
  T* cache = slot.cache<T>(plan, cols);
  const int64_t packs = cols / V;
  const float fcols = static_cast<float>(cols);
  for_slot_rows(slot, rows, [&](int64_t row, bool active) {
    const int64_t n = active ? packs : 0;
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
      rstd = 1.0f / sqrtf(clamp_var((d[1] - d[0] * dmean) / fcols) + epsilon);
    }
    if (active && slot.lane == 0) {
      if constexpr (!kRms) mean_out[row] = (shift - (cols > 0 ? to_float(xr[0]) : 0.0f)) + dmean;
      rstd_out[row] = rstd;
    }

    const float* scale_row = param_row(scale, row, cols);
    const float* bias_row = param_row(bias, row, cols);
    Ty* yr = y + row * cols;
    for_row_packs<V, kParamBatchRegs>({src}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& p) {
      float v[V], s[V], b[V];
      unpack(p[0], v);
      load_param<V>(scale_row, i, 1.0f, s);
      load_param<V>(bias_row, i, 0.0f, b);
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = ((v[j] - shift) - dmean) * rstd * s[j] + b[j];
      store_pack<V>(yr, i, v);
    });
  });
}

// v61..v63, v65..v67 and the default (v68): v3's rows into a narrower dtype (f32 x into bf16 or f16) with cached I/O,
// into a wider one (bf16 or f16 x into f32) or one of the same width streaming; v60: all with cached I/O; v58, v57 and
// earlier: all streaming.
// Measured on the H200 (RESULTS.md "v60", "v61"; device timing, one process each, two rounds): cached I/O on f32 x
// into bf16 +3.5..5.5% (LayerNorm 12288, RMSNorm 4096 / 12288), but on bf16 x into f32 at C = 16384 (beyond the lean
// rows' cap) -10% (RMSNorm: 75% of the copy against 84%) and -2% (LayerNorm). f32 into f16 moves the same bytes as f32
// into bf16 (not measured apart); the same-width pairs (bf16 into f16) keep the streaming of v57.
template <typename T, typename Ty>
bool v3_mixed_cached_io() {
  const NormFwd v = norm_fwd_version();
  return v == NormFwd::kV60 ||
         ((v == NormFwd::kV61 || v == NormFwd::kV62 || v == NormFwd::kV63 || norm_fwd_v65_rule()) &&
          sizeof(Ty) < sizeof(T));
}

// A y of type Ty != T (the ops' `dtype`: a bf16 x into f32, say; y's packs twice or half x's bytes) where the lean rows
// don't take it (lean_mixed_rows): the register rows of norm_rows.cuh ("v3") where x and y are both 16-byte aligned
// (C > 0), else the v1 row kernel, vectorized where every buffer is aligned and C a multiple of x's pack. One read of x
// and one write of y either way. v3's rows from 16-bit x into f32 (f16 x at every C, bf16 beyond the lean rows' C =
// 12288) store y in whole sectors where rows_sector_stores says, as v62 made the lean rows do: streaming, RMSNorm's
// bf16 rows of 16384 read 84% of the copy on the H200 (RESULTS.md "v61"), 94% so (RESULTS.md "v63").
// launch(kernel, plan, args...): norm_fwd's launch of a register-row kernel in plan's geometry.
template <typename T, typename Ty, bool kRms, typename Launch>
ffi::Error norm_fwd_mixed(cudaStream_t stream, const char* what, RowShape s, const T* xp, ParamView scale,
                          ParamView bias, Ty* yp, float* mean, float* rstd, float epsilon, Launch&& launch) {
  const RowsPlan plan = plan_norm_rows<T>(s.cols);
  if (plan.ok && s.cols > 0 && aligned16(xp) && aligned16(yp)) {  // C == 0: the v1 kernel's NaN statistics
    const auto run = [&](auto kernel) {
      return launch(kernel, plan, xp, scale, bias, yp, mean, rstd, s.rows, static_cast<int>(s.cols), epsilon,
                    plan.tpr);
    };
    if constexpr (!std::is_same_v<T, Ty>) {  // (the instance of Ty = T never runs)
      if (v3_mixed_cached_io<T, Ty>()) {
        return plan.block_rows ? run(norm_fwd_rows_kernel<T, kRms, true, Ty, true>)
                               : run(norm_fwd_rows_kernel<T, kRms, false, Ty, true>);
      }
      if constexpr (sizeof(T) == 2 && std::is_same_v<Ty, float>) {  // y's stores in whole sectors
        if (rows_sector_stores<kRms>(s.cols)) {
          return plan.block_rows ? run(norm_fwd_rows_kernel<T, kRms, true, Ty, false, true>)
                                 : run(norm_fwd_rows_kernel<T, kRms, false, Ty, false, true>);
        }
      }
    }
    return plan.block_rows ? run(norm_fwd_rows_kernel<T, kRms, true, Ty>)
                           : run(norm_fwd_rows_kernel<T, kRms, false, Ty>);
  }
  return with_vec<T>(vectorizable<T>(s.cols, {xp, yp, scale.data, bias.data}), [&](auto v) {
    constexpr int V = decltype(v)::value;
    return launch_rows(norm_fwd_kernel<T, V, kRms, Ty>, stream, s, V, s.cols * int64_t{sizeof(T)}, what, xp, scale,
                       bias, yp, mean, rstd, s.rows, s.cols, epsilon);
  });
}

// v57: where the lean rows write y of another dtype than x's, by default. Measured on an H100 (the forward at 2^26
// elements, device timing, one process against v48's rule, where the same-dtype cells read 0.999-1.001; RESULTS.md
// "v57"): f32 x into bf16 on the tuned block rows LayerNorm +4.3..4.8% at C = 768 / 1024 / 2048 and +2.2..2.7% at
// 4096 / 8192, RMSNorm +3.3..3.7% at 768 / 1024 but -5.8% at 4096 (2 packs per thread); bf16 x into f32 LayerNorm's
// team rows +3.9..4.5% at C = 768..2048, RMSNorm's -0.7..-2.5%, and the block rows two per block -9..-27% (LayerNorm
// 4096..12288, RMSNorm 4096 / 12288: y's f32 words double the bytes those plans were sized for). The rest stays on
// norm_fwd_mixed. kLeanPair: the instances (pairs a model meets: a bf16 x with Flax's f32 parameters gives f32, an f32
// residual stream normalized into a bf16 matmul); lean_mixed_rows: the rows.
// v60 (the thirteenth session's candidates v58 and v59; the default's lean rows): bf16 x into f32 on the lean rows at
// kMixedPacks packs per thread, team or block rows, RMSNorm too, and the rows into another dtype left on v3's rows
// (norm_fwd_mixed: f32 x into bf16 outside the tuned block rows, f16 pairs, bf16 beyond 4 packs) with cached I/O
// (since v61 only those into a narrower dtype: v3_mixed_cached_io). Why: a bf16 pack
// makes 32 bytes of f32 y, so v3's and the lean rows' 8 packs write 256 bytes a thread, where the f32 rows at 99% of
// the copy write 64 at 4 packs of 4; cached I/O gained 1-8% wherever the lean rows (v44) and v4's (v45) took it.
// Measured on the H200 (2^26 elements, device timing, one process each, two rounds, same-dtype cells 0.997-1.003;
// RESULTS.md "v60"): bf16 into f32 LayerNorm +5..11% at C = 768..12288, RMSNorm +6..8% at 768 / 1024 and -0.9..+0.5%
// at 4096 / 12288 (the packs); f32 into bf16 on v3's rows +3.5..5.5% (LayerNorm 12288, RMSNorm 4096 / 12288; the
// cached I/O), the rest unchanged. Not beyond C = 12288 (kMixedMaxBlock): at C = 16384 (512 threads of 4 packs) the
// Flax layers' widening forward over two axes read -7..-8% against v57 (v3's 256 threads of 8, streaming).
// v62 (=v61 the rule before it): those 16-bit lean rows into f32 store y in whole 32-byte sectors
// (norm_fwd_lean.cuh's kSectors): Nsight Compute put L2 at 91-94% of its peak there, each store instruction filling
// half of every sector it touched. Measured on an H100 (RESULTS.md "v62"; 2^26 elements, device timing, one process
// each, two rounds, same-dtype cells 0.998-1.001): bf16 into f32 LayerNorm +2..4% at C = 768..12288, RMSNorm +4..9%,
// despite 80 registers (3 CTAs of 256 where 56 and 48 held 4 and 5); in one process (norm_mixed_ab.cu) the same
// kernels +1.5..5.5% (LayerNorm) and +4..7% (RMSNorm), the bare widening 95% -> 98-99% of the copy.
// v65 (and later; =v62 the rule before): LayerNorm's only where each thread holds kMixedPacks packs and a block
// has at most kTeamBlock threads (C = 1024, 2048, 4096, 8192; not 768 or 12288). Measured on the H200 (RESULTS.md
// "v63"; 2^26 elements, device timing, one process each, two rounds): v62 ran LayerNorm at 0.91x of v61 at C = 768
// (3 packs a thread; in one process 86% of the copy against 93%: 3 CTAs of 256 at 80 registers where 4 at 56 keep a
// third more bytes in flight) and 0.985x at 12288 (2 CTAs of 384 threads), +3..5.5% at 1024..4096, +1.2% at 8192;
// RMSNorm (48 registers, 5 CTAs of 256 at 89% of the copy before) +6% at 768, +12..15% at 1024..12288.
constexpr int kMixedPacks = 4;
constexpr int kMixedMaxBlock = 384;

// Whether the 16-bit lean rows into f32 in plan p (x's rows of `packs` packs) store y in whole sectors (kSectors).
template <bool kRms>
bool lean_sector_stores(const RowsPlan& p, int64_t packs) {
  const NormFwd v = norm_fwd_version();
  const bool pays = kRms || (packs > int64_t{p.tpr} * (kMixedPacks - 1) && p.block <= kTeamBlock);
  return v == NormFwd::kV62 || v == NormFwd::kV63 || (norm_fwd_v65_rule() && pays);
}

// v66 (a candidate of the seventeenth session): the f16 pairs take the lean rows as bf16's do, f16 x into f32 at
// kMixedPacks (team or block rows, both norms, whole sectors where lean_sector_stores says) and f32 x into f16 on the
// tuned block rows. Why: on the H200 f16 x into f32 on v3's rows, even in whole sectors (v63), read 86-87% of the copy
// (LayerNorm, C = 1024 / 4096) and 91-95% (RMSNorm) where bf16 x on the lean rows read 95% and 98% (RESULTS.md "v63").
// The lean rows kept f16 off because ptxas merges pass 1's f16 conversions with pass 2's and spills the row (60-116
// bytes at 8 packs); at kMixedPacks (4) the f16-into-f32 instances fit in 76 registers without a spill.
bool lean_f16_pairs() {
  const NormFwd v = norm_fwd_version();
  return v == NormFwd::kV66 || v == NormFwd::kV67 || v == NormFwd::kByDtype;
}

// v68 (the default since the eighteenth session; =v65 the rule before it): v67 but LayerNorm's f16 rows, of x's dtype
// or into f32, in blocks over kTeamBlock threads (C = 8200..12288) stay on v3's rows. Measured on an H100 (RESULTS.md
// "v66 to v68"; 2^26 elements, device timing, one process each, two rounds, f32 rows 0.999-1.001): f16 into f32
// LayerNorm +2.6..4.1% at C = 1024..8192 (+1.5% at 768) but -3.5% at 12288, RMSNorm +0.7..3.5% to 12288; f32 into f16
// +1.5..3.3% (1.000 where the tuned block rows leave it); f16 rows LayerNorm +4% at 1024..4096, +0.8% at 8192, -3.2% at
// 12288, +-0.3% at 768, RMSNorm +0.5..1.5%. The H200 (RESULTS.md "v63") ran v3's f16 rows further behind the lean rows.
template <bool kRms>
bool lean_f16_block(const RowsPlan& p) {
  return kRms || p.block <= kTeamBlock || norm_fwd_version() != NormFwd::kByDtype;
}

// Whether 16-bit rows of C = cols fit the lean rows at kMixedPacks: whole packs, at most kMixedMaxBlock threads, and
// f16's within lean_f16_block.
template <typename T, bool kRms>
bool lean_mixed_packs_fit(int64_t cols) {
  const RowsPlan p = plan_norm_rows<T, kMixedPacks>(cols);
  return p.ok && p.tpr <= kMixedMaxBlock && (!std::is_same_v<T, __half> || lean_f16_block<kRms>(p));
}

// v67 (the other candidate): v66, and f16 rows of x's dtype on the lean rows too, at kMixedPacks to kMixedMaxBlock
// threads (C <= 12288; beyond, v3's rows as before), as the 16-bit rows into f32 are planned. Why: on the H200 f16
// rows on v3's 8 packs (v4's 6 for LayerNorm's team rows) ran 4-9% behind bf16's lean rows at C = 1024 / 4096
// (LayerNorm 0.0748 / 0.0723 ms against 0.0682 / 0.0683, RMSNorm 0.0701 / 0.0696 against 0.0668; RESULTS.md "v63"),
// the lean kernel's instruction diet (v23) being what bf16 has and f16 lacks; at 4 packs the f16 instances take 60-72
// registers, no spill (at 8: 60-116 bytes of spill).
template <bool kRms>
bool lean_f16_rows(int64_t cols) {
  const NormFwd v = norm_fwd_version();
  return (v == NormFwd::kV67 || v == NormFwd::kByDtype) && lean_mixed_packs_fit<__half, kRms>(cols);
}

template <typename T, typename Ty, bool kRms>
inline constexpr bool kLeanPair =
    (sizeof(T) == 2 && std::is_same_v<Ty, float>) || (std::is_same_v<T, float> && sizeof(Ty) == 2);

template <typename T, typename Ty, bool kRms>
bool lean_mixed_rows(int64_t cols, const RowsPlan& plan) {
  const NormFwd v = norm_fwd_version();
  if (!mixed_v57_or_later(v)) return false;  // v48, earlier: norm_fwd_mixed
  if constexpr (std::is_same_v<T, __half> || std::is_same_v<Ty, __half>) {
    if (!lean_f16_pairs()) return false;
  }
  if constexpr (sizeof(T) == 4) {
    return cols % kVec<T> == 0 && lean_tuned_plan<T, kRms>(cols / kVec<T>).np >= 3;
  } else {
    if (mixed_lean_packs()) return lean_mixed_packs_fit<T, kRms>(cols);
    return !kRms && plan.ok && !plan.block_rows;  // v57
  }
}

// norm_fwd_lean.cuh's rows (T: bf16 or f32; f16 by default and under v66, v67) where they take the call, else nullopt:
// rows of whole packs, one scale row (and LayerNorm's one bias row) or none, all aligned; v3's geometry, LayerNorm team
// rows at the packs v21 gives them (6 where v10's rule takes them, else 8). LayerNorm since v23, RMSNorm since v24;
// absent parameters since v28. Since v29, where lean_tuned_plan gives packs, block rows at them: f32 rows too (only
// those), bf16 LayerNorm 4096. Since v44 with cached I/O, and f32 block rows with their parameters held where the plan
// says. Since v57 with y of type Ty (f32 x into bf16, bf16 x into f32 on LayerNorm's team rows: lean_mixed_rows), in
// the plan of x's dtype; since v60 bf16 x into f32 at kMixedPacks (v66: the f16 pairs as bf16's, lean_f16_pairs; v67:
// f16 rows at kMixedPacks, lean_f16_rows; v68, the default: both, lean_f16_block).
// launch_plan(kernel, plan, args...): norm_fwd's launch of a register-row kernel in plan's geometry.
template <typename T, typename Ty, bool kRms, typename LaunchPlan>
std::optional<ffi::Error> norm_fwd_lean_rows(RowShape s, const RowsPlan& plan, const T* xp, ParamView scale,
                                             ParamView bias, Ty* yp, float* mean, float* rstd, float epsilon,
                                             LaunchPlan&& launch_plan) {
  const auto one_row = [&](const ParamView& p) { return p.data == nullptr || p.rows_per_group >= s.rows; };
  const LeanBlock tuned = s.cols % kVec<T> == 0 ? lean_tuned_plan<T, kRms>(s.cols / kVec<T>) : LeanBlock{0, false};
  if (!(norm_fwd_by_dtype() && (sizeof(T) == 4 ? tuned.np > 0 : plan.ok) && one_row(scale) &&
        (kRms || one_row(bias)) && vectorizable<T>(s.cols, {xp, yp, scale.data, bias.data}))) {
    return std::nullopt;
  }
  constexpr bool kMixed16 = sizeof(T) == 2 && !std::is_same_v<T, Ty>;  // a 16-bit x's y in f32 (v57, v60, v66, v68)
  constexpr bool kF16 = std::is_same_v<T, __half> && !kMixed16;        // f16 rows of x's dtype (v67, v68)
  if constexpr (kF16) {
    if (!lean_f16_rows<kRms>(s.cols)) return std::nullopt;
  }
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
    if constexpr (std::is_same_v<T, __nv_bfloat16> && !kMixed16) {
      const LeanPairs pairs = lean_pair_plan<kRms>(s.cols / kVec<T>);
      if (pairs.np > 0 && norm_fwd_v48_or_later()) {
        const auto at = [&](auto np, auto regs) {
          constexpr int kNp = decltype(np)::value, kRegs = decltype(regs)::value;
          RowsPlan p = plan_norm_rows<T, kNp>(s.cols);
          p.rows_per_block = 2;
          return go(norm_fwd_lean_kernel<T, kRms, true, kNp, kS, kB, true, false, true, 2, kRegs, Ty>, p);
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
    if constexpr (kLeanTuned<T, kRms> && !kMixed16 && !kF16) {
      if (tuned.np > 0) {
        return with_lean_packs<T, kRms>(tuned.np, [&](auto np) {
          constexpr int kNp = decltype(np)::value;
          const RowsPlan p = plan_norm_rows<T, kNp>(s.cols);
          if constexpr (sizeof(T) == 4) {  // lean_block_plan holds f32 parameters only
            if (tuned.hold) return go(norm_fwd_lean_kernel<T, kRms, true, kNp, kS, kB, true, true, true, 1, 0, Ty>, p);
          }
          return cached([&](auto io) {
            return go(norm_fwd_lean_kernel<T, kRms, true, kNp, kS, kB, true, false, decltype(io)::value, 1, 0, Ty>, p);
          });
        });
      }
    }
    if constexpr (sizeof(T) == 4) {
      return ffi::Error::Internal("f32 lean rows without tuned packs");  // the condition above excludes them
    } else if constexpr (kF16) {  // v67, v68: at kMixedPacks, with cached I/O (lean_f16_rows)
      constexpr bool kSt = decltype(staged)::value;
      const RowsPlan p = plan_norm_rows<T, kMixedPacks>(s.cols);
      return p.block_rows ? go(norm_fwd_lean_kernel<T, kRms, true, kMixedPacks, kS, kB, true, false, true>, p)
                          : go(norm_fwd_lean_kernel<T, kRms, false, kMixedPacks, kS, kB, kSt, false, true>, p);
    } else {
      constexpr bool kSt = decltype(staged)::value;  // team rows only: block rows take one instance either way
      return cached([&](auto io) {
        constexpr bool kIo = decltype(io)::value;
        if constexpr (kMixed16) {
          if (mixed_lean_packs()) {
            const RowsPlan p = plan_norm_rows<T, kMixedPacks>(s.cols);
            // y's stores in whole sectors (kSectors) where lean_sector_stores says.
            const auto at = [&](auto sectors) {
              constexpr bool kSec = decltype(sectors)::value;
              constexpr int kP = kMixedPacks;
              return p.block_rows
                         ? go(norm_fwd_lean_kernel<T, kRms, true, kP, kS, kB, true, false, kIo, 1, 0, Ty, kSec>, p)
                         : go(norm_fwd_lean_kernel<T, kRms, false, kP, kS, kB, kSt, false, kIo, 1, 0, Ty, kSec>, p);
            };
            if constexpr (std::is_same_v<Ty, float>) {
              if (lean_sector_stores<kRms>(p, s.cols / kVec<T>)) return at(std::true_type{});
            }
            return at(std::false_type{});
          }
        }
        // (lean_mixed_rows gives v57's bf16 rows into another dtype LayerNorm's team rows only.)
        if (plan.block_rows) {
          if constexpr (kMixed16) {
            return ffi::Error::Internal("v57's lean block rows into another dtype");
          } else {
            return go(norm_fwd_lean_kernel<T, kRms, true, kRowPacks<T>, kS, kB, true, false, kIo, 1, 0, Ty>, plan);
          }
        }
        if constexpr (kMixed16 && (kRms || !std::is_same_v<T, __nv_bfloat16>)) {
          return ffi::Error::Internal("v57's lean rows into another dtype: bf16 LayerNorm only");
        } else {
          if constexpr (!kRms) {
            if (const RowsPlan six = plan_norm_rows<T, kRowPacksTeam6>(s.cols); six.ok && six.tpr == plan.tpr) {
              return go(norm_fwd_lean_kernel<T, kRms, false, kRowPacksTeam6, kS, kB, kSt, false, kIo, 1, 0, Ty>, six);
            }
          }
          return go(norm_fwd_lean_kernel<T, kRms, false, kRowPacks<T>, kS, kB, kSt, false, kIo, 1, 0, Ty>, plan);
        }
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
    if (y.element_type() != x.element_type()) {  // (the instance of Ty = T never runs; its kernels exist anyway)
      return dispatch_float(y.element_type(), [&](auto tag_y) -> ffi::Error {
        using Ty = elem_t<decltype(tag_y)>;
        Ty* typed_y = static_cast<Ty*>(y.untyped_data());
        if constexpr (kLeanPair<T, Ty, kRms>) {
          if (lean_mixed_rows<T, Ty, kRms>(s.cols, plan)) {
            if (auto done = norm_fwd_lean_rows<T, Ty, kRms>(s, plan, xp, scale, bias, typed_y, mean, rstd, epsilon,
                                                            launch_plan)) {
              return *done;
            }
          }
        }
        return norm_fwd_mixed<T, Ty, kRms>(stream, what, s, xp, scale, bias, typed_y, mean, rstd, epsilon,
                                           launch_plan);
      });
    }
    auto run = [&](auto kernel) -> ffi::Error {
      return launch_plan(kernel, plan, xp, scale, bias, yp, mean, rstd, s.rows, static_cast<int>(s.cols), epsilon,
                         plan.tpr);
    };
    if (auto done = norm_fwd_lean_rows<T, T, kRms>(s, plan, xp, scale, bias, yp, mean, rstd, epsilon, launch_plan)) {
      return *done;  // (f16 rows by default and under v67: lean_f16_rows)
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

ffi::Error LayerNormFwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                        ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                        ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  RowShape s;
  ParamView sv, bv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_size(x, *y, "y"), param_view(scale, s, "scale", &sv),
                              param_view(bias, s, "bias", &bv), check_stats(*mean, s, "mean"),
                              check_stats(*rstd, s, "rstd")});
      err.failure()) {
    return err;
  }
  return norm_fwd<false>(stream, "layer_norm_fwd", s, x, sv, bv, *y,
                         static_cast<float*>(mean->untyped_data()),
                         static_cast<float*>(rstd->untyped_data()), epsilon);
}

ffi::Error RmsNormFwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale,
                      ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  RowShape s;
  ParamView sv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_size(x, *y, "y"), param_view(scale, s, "scale", &sv),
                              check_stats(*rstd, s, "rstd")});
      err.failure()) {
    return err;
  }
  return norm_fwd<true>(stream, "rms_norm_fwd", s, x, sv, ParamView{}, *y, nullptr,
                        static_cast<float*>(rstd->untyped_data()), epsilon);
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormFwdCuda, jm::cuda::LayerNormFwd,
                              jm::bind::layer_norm_fwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormFwdCuda, jm::cuda::RmsNormFwd,
                              jm::bind::rms_norm_fwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
