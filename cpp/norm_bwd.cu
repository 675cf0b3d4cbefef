// LayerNorm and RMSNorm backward over the last axis: the XLA FFI handlers JmLayerNormBwdCuda and JmRmsNormBwdCuda.
// One kernel template serves both norms (kRms drops the mean and dbias). norm_bwd_fused_kernel (norm_bwd_rows.cuh: x
// and dy in registers, dscale / dbias partials) takes C <= 12288 vectorized (v17: 16384 f32, 24576 16-bit) / 4096
// unvectorized, else norm_bwd_kernel plus column sums; 16-bit rows of C <= 12288 (v19) and f32 rows of C = 1024..12288
// (v20, v34; lean_team) with a scale shared by every row take norm_bwd_lean.cuh's kernel. The forward: norm_fwd.cu.
#include "cuda_common.cuh"
#include "norm_bwd_lean.cuh"
#include "norm_bwd_rows.cuh"
#include "partials.cuh"
#include "bindings.h"
#include "handlers.h"

#include <optional>
#include <type_traits>

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

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
// `kernel`: norm_bwd_fused_kernel<T, V, kRms, K, Tdy> or norm_bwd_lean_kernel<T, kRms, K, ...> (same arguments).
// stage_bytes: the shared memory each team's stages take beyond the partial slabs (norm_bwd_lean_kernel's kStages;
// 0: none).
template <int V, int K, typename T, typename Tdy, typename Kernel>
ffi::Error norm_bwd_one_pass(Kernel kernel, const DeviceInfo& dev, cudaStream_t stream, const char* what,
                             RowShape s, int tpr, const T* xp, ParamView scale, const float* mean,
                             const float* rstd, const Tdy* dyp, T* dxp, const GradView& dscale,
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

// The backward without norm_bwd_lean.cuh's kernels (V: 16-byte packs of T where every buffer is aligned and C a
// multiple of them, else 1): norm_bwd_fused_kernel where its teams hold the row and the gradients' workspace is usable
// (or none is wanted), else norm_bwd_kernel for dx and column sums re-reading x and dy. dy of type Tdy: T's, or y's
// where the forward's `dtype` made it another (one read of x and dy, one write of dx either way).
template <int V, bool kRms, typename T, typename Tdy>
ffi::Error norm_bwd_general(const DeviceInfo& dev, cudaStream_t stream, const char* what, RowShape s, const T* xp,
                            ParamView scale, const float* mean, const float* rstd, const Tdy* dyp, T* dxp,
                            const GradView& dscale, const GradView& dbias, const PartialsView& ws) {
  const bool want = dscale.data != nullptr || dbias.data != nullptr;
  if (!want || ws.data != nullptr) {
    constexpr int kPacks = kFusedPacks<V>;
    if (const int tpr = team_size(s.cols / V, kPacks); tpr <= kTeamThreads) {
      return norm_bwd_one_pass<V, kPacks>(norm_bwd_fused_kernel<T, V, kRms, kPacks, Tdy>, dev, stream, what, s, tpr,
                                          xp, scale, mean, rstd, dyp, dxp, dscale, dbias, ws);
    }
    constexpr int kLong = kFusedLongPacks<T, V, Tdy>;
    if constexpr (kLong > 0) {
      if (const int tpr = team_size(s.cols / V, kLong); tpr <= kTeamThreads) {
        return norm_bwd_one_pass<V, kLong>(norm_bwd_fused_kernel<T, V, kRms, kLong, Tdy>, dev, stream, what, s, tpr,
                                           xp, scale, mean, rstd, dyp, dxp, dscale, dbias, ws);
      }
    }
  }
  // Rows longer than the registers hold (or no usable workspace): the row kernel for dx, then the
  // column sums re-read x and dy.
  if (auto err = launch_rows(norm_bwd_kernel<T, V, kRms, Tdy>, stream, s, V, BwdRowCache<T, Tdy, V>(s.cols).stride,
                             what, xp, scale, mean, rstd, dyp, dxp, s.rows, s.cols);
      err.failure()) {
    return err;
  }
  return launch_column_sums(stream, NormGradElem<T, kRms, Tdy>{xp, dyp, mean, rstd, s.cols}, s.cols, dscale, dbias,
                            what);
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
    T* dxp = static_cast<T*>(dx.untyped_data());
    if (dy.element_type() != x.element_type()) {  // the forward's `dtype` made y's another: norm_bwd_general
      return dispatch_float(dy.element_type(), [&](auto tag_dy) {
        using Tdy = elem_t<decltype(tag_dy)>;
        const Tdy* dyp = static_cast<const Tdy*>(dy.untyped_data());
        return with_vec<T>(vectorizable<T>(s.cols, {xp, dyp, dxp, scale.data}), [&](auto v) {
          return norm_bwd_general<decltype(v)::value, kRms>(dev, stream, what, s, xp, scale, mean, rstd, dyp, dxp,
                                                            dscale, dbias, ws);
        });
      });
    }
    const T* dyp = static_cast<const T*>(dy.untyped_data());
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
      }
      return norm_bwd_general<V, kRms>(dev, stream, what, s, xp, scale, mean, rstd, dyp, dxp, dscale, dbias, ws);
    });
  });
}

ffi::Error LayerNormBwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer mean,
                        ffi::AnyBuffer rstd, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                        ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> dbias,
                        ffi::Result<ffi::AnyBuffer> workspace) {
  RowShape s;
  ParamView sv;
  GradView gs, gb;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_size(x, dy, "dy"), check_same(x, *dx, "dx"),
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

ffi::Error RmsNormBwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer rstd,
                      ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                      ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> workspace) {
  RowShape s;
  ParamView sv;
  GradView gs;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_size(x, dy, "dy"), check_same(x, *dx, "dx"),
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

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormBwdCuda, jm::cuda::LayerNormBwd,
                              jm::bind::layer_norm_bwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormBwdCuda, jm::cuda::RmsNormBwd,
                              jm::bind::rms_norm_bwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
