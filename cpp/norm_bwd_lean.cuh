// LayerNorm / RMSNorm fused backward for 16-bit types (v19; norm_bwd.cu takes it for 16-byte packs, C <= 12288
// and a scale shared by every row) and f32 (v20: rows of K = 4 packs of 4 per thread, C = 1024..8192, the
// partials in registers where norm_bwd_fused_kernel keeps them in shared memory): norm_bwd.cu's
// norm_bwd_fused_kernel with fewer instructions per element.
// Why: Nsight Compute on that kernel (bf16 LayerNorm, C = 8192; RESULTS.md "v18") counted 44 thread
// instructions per element, the SM issuing half the time at 4 warps per scheduler, the DRAM at 46% of its
// rate: bound by its instructions. The arithmetic itself is ~18 per element (two passes over raw packs,
// each unpacking x and dy). What this kernel drops:
//   * the scale's test per pack (present? row group?) and its `1.0f` moves: one dense pointer, 16-byte
//     loads, the thread's scale columns held in registers across its rows at K = 2;
//   * the branches per pack: a thread's packs per row K = 2 or 3 fit the row (K = ceil(packs / tpr), not
//     the fixed 3 that left a third of the slots empty at C = 1024..8192); in full rows every load is
//     plain; elsewhere empty slots read a real pack of x (the index clamped: its xhat is finite whenever
//     the row's are) and zeros of dy, so they add exact zeros to the sums and partials without a branch;
//   * the team sums' sequential loop (each thread added the team's 16 warp partials from shared memory:
//     32 loads and adds per row): the partials go back into registers and a butterfly adds them (4 steps);
//   * xhat = ((x - x0) - mean) * rstd by one subtraction and one FMA, (x - x0) * rstd + (-mean * rstd);
//     dx = rstd * g + (xhat * gx + g0), rstd folded into the row's two constants; RMSNorm's sums skip Σg;
//   * the repacking of 16-bit halves: rows are held as uint4 words (a Pack of bf16 copied from a load cost
//     2.3 PRMT per element at C = 768).
// And it loads the next row's packs and statistics into a second set of registers before it works on
// the current row (kAhead = 1 at K = 2; 2: two rows ahead, three sets, an A/B option), so a team's loads
// are in flight while it computes. Measured (RESULTS.md "v19"): ~29 instructions per element (LayerNorm
// bf16 8192), 1.11-1.22x the old kernel at C = 1024..8192, a tie at 768.
// Geometry and partials as in partials.cuh (teams of tpr threads, one row per team at a time, dscale / dbias
// partials in registers, summed per block into the workspace in the same order as norm_bwd_fused_kernel).
// v31: each team at its own barrier; RMSNorm's 16-bit rows of 769..1024 packs at K = 4, partials in shared memory
// (RESULTS.md "v31"). v32: the K = 3 rows one row ahead with the scale held, LayerNorm's partials by quads (norm_bwd.cu
// norm_bwd_lean). v33: kStages, the rows of wide teams through stages of shared memory filled by bulk copies. v34:
// f32 rows of C = 8196..12288 at K = 6 on 512-thread teams, read from their stages in both passes (kSmemRows). v35:
// LayerNorm's 16-bit staged rows of K = 3 the same way. v36 (the default): kOddTeams, staged teams of any multiple of
// 32 threads (norm_bwd.cu odd_team).
#pragma once

#include "partials.cuh"

namespace jm::cuda {

// team_sum2's result by a butterfly: the warps' partials meet in shared memory (two buffers by row parity,
// one barrier, as team_sum2) and every lane of a warp reads them back in groups of wpt lanes, which the
// xor steps add; every lane of the team ends with the same bits (the adds are commutative).
// kTeamBar (v31): the team's warps meet at the team's own named barrier (1 + team, tpr threads), so the teams of
// a block run out of phase, as blocks do; else at __syncthreads (every team of the block at each row). The
// parity argument holds per team: its warps write only their own slots of `red`. (norm_bwd_fused_kernel's
// team_sum2 the same way measured a tie at f32 C = 768 / 1536: not taken.)
// kOddTeams (v36: norm_bwd.cu odd_team): teams of any multiple of 32 threads (wpt warps); the butterfly
// spans the power of two at or above wpt, its lanes past the team's warps adding zeros. The team's first warp is
// team * wpt, from the barrier's division. v36's first form took it as warp - warp % wpt, a modulo per row that the
// compiler left in the loop (it sat under the lanes' condition): 1-8% slower where it replaced the power-of-two
// form on the H200 (RESULTS.md "v36").
template <int N, bool kTeamBar, bool kOddTeams = false>
__device__ __forceinline__ void team_sum_lean(float (&v)[N], int tpr, TeamRed& red, int parity) {
  static_assert(N <= 2);
  if (tpr <= 32) {
    warp_reduce(v, SumOp{}, tpr);
    return;
  }
  warp_reduce(v, SumOp{});
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int wpt = tpr / 32;
  if (lane == 0) {
#pragma unroll
    for (int n = 0; n < N; ++n) red[parity][n][warp] = v[n];
  }
  const int team = static_cast<int>(threadIdx.x) / tpr;
  if constexpr (kTeamBar) {
    team_barrier(1 + team, tpr);
  } else {
    __syncthreads();
  }
  if constexpr (kOddTeams) {
    const int width = 1 << (32 - __clz(wpt - 1));  // wpt >= 2
    const int w = lane & (width - 1);               // the team's warps, repeated across the lanes
#pragma unroll
    for (int n = 0; n < N; ++n) v[n] = w < wpt ? red[parity][n][team * wpt + w] : 0.0f;
    warp_reduce(v, SumOp{}, width);
  } else {
    const int src = (warp & ~(wpt - 1)) + (lane & (wpt - 1));  // the team's warps, repeated across the lanes
#pragma unroll
    for (int n = 0; n < N; ++n) v[n] = red[parity][n][src];
    warp_reduce(v, SumOp{}, wpt);
  }
}

// One row's registers: its x and dy packs, raw, and its statistics (x0: the row's first element, the
// saved mean's origin; mean_rs = -mean * rstd). An inactive team (row past its block's range) holds
// zeros and rstd 0: every sum and partial it adds is an exact 0.
template <int K>
struct LeanRow {
  uint4 x[K], dy[K];  // packs as words (unpack_words_fresh)
  float x0, mean_rs, rs;
};

template <typename T, bool kRms, int K>
__device__ __forceinline__ void load_lean_row(LeanRow<K>& r, const T* x, const T* dy, const float* mean,
                                              const float* rstd, int64_t row, bool active, bool full, int cols,
                                              int lane, int tpr) {
  const int packs = cols / kVec<T>;
  const int64_t off = row * cols;
  const uint4* xw = reinterpret_cast<const uint4*>(x + off);
  const uint4* dw = reinterpret_cast<const uint4*>(dy + off);
  if (active && full) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      r.x[k] = __ldcs(xw + lane + k * tpr);
      r.dy[k] = __ldcs(dw + lane + k * tpr);
    }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = lane + k * tpr;
      r.x[k] = r.dy[k] = make_uint4(0u, 0u, 0u, 0u);
      if (active) r.x[k] = __ldcs(xw + min(i, packs - 1));
      if (active && i < packs) r.dy[k] = __ldcs(dw + i);
    }
  }
  r.rs = active ? rstd[row] : 0.0f;
  if constexpr (kRms) {
    r.x0 = 0.0f;
    r.mean_rs = 0.0f;
  } else {
    r.x0 = active ? to_float(x[off]) : 0.0f;
    r.mean_rs = active ? -mean[row] * r.rs : 0.0f;
  }
}

// The thread's pack i of a row in its stage (sx, sdy: the row's x and dy packs; sx == nullptr: an inactive row, which
// holds zeros): x clamped into the row (an empty slot's xhat stays finite) and zeros of dy past it, as load_lean_row.
__device__ __forceinline__ void staged_pack(const uint4* sx, const uint4* sdy, int i, bool full, int packs, uint4& xw,
                                            uint4& dw) {
  xw = dw = make_uint4(0u, 0u, 0u, 0u);
  if (sx != nullptr) {
    xw = sx[full ? i : min(i, packs - 1)];
    if (full || i < packs) dw = sdy[i];
  }
}

// A staged row's first element (LayerNorm's saved mean is relative to it); 0 for RMSNorm and an inactive row.
template <typename T, bool kRms>
__device__ __forceinline__ float staged_x0(const uint4* sx) {
  return kRms || sx == nullptr ? 0.0f : to_float(*reinterpret_cast<const T*>(sx));
}

// load_lean_row from a stage in shared memory (kStages: the row's x and dy packs, bulk-copied there) instead of
// global memory; the statistics come from registers (rs, mean_rs: loaded a row ahead).
// ready(k): before the thread reads its pack k (kChunks: that part's copy has landed).
template <typename T, bool kRms, int K, typename Ready>
__device__ __forceinline__ void load_lean_row_staged(LeanRow<K>& r, const uint4* sx, const uint4* sdy, float rs,
                                                     float mean_rs, bool full, int packs, int lane, int tpr,
                                                     Ready&& ready) {
#pragma unroll
  for (int k = 0; k < K; ++k) {
    ready(k);
    staged_pack(sx, sdy, lane + k * tpr, full, packs, r.x[k], r.dy[k]);
  }
  r.rs = rs;
  r.mean_rs = mean_rs;
  r.x0 = staged_x0<T, kRms>(sx);
}

// The quads of pack k in `slab` (nullptr: not wanted) += dy * xhat (kProduct) or += dy.
template <int E, bool kProduct>
__device__ __forceinline__ void add_quads(float* slab, int k, int block, const float (&dv)[E], const float (&xh)[E]) {
  if (slab == nullptr) return;
  float4* const p = partial_quads<E>(slab, k, block);
  const auto add = [&](float& acc, int j) { acc = kProduct ? fmaf(dv[j], xh[j], acc) : acc + dv[j]; };
#pragma unroll
  for (int q = 0; q < E / 4; ++q) {
    float4 v = p[q * block];
    add(v.x, 4 * q);
    add(v.y, 4 * q + 1);
    add(v.z, 4 * q + 2);
    add(v.w, 4 * q + 3);
    p[q * block] = v;
  }
}

// kQuads (K >= 4: RMSNorm's 16-bit rows of 769..1024 packs on teams of 256 threads, norm_bwd.cu's lean_team; v32:
// LayerNorm's K = 3 rows, one row ahead): the partials accumulate in shared memory by quads (partials.cuh's
// partial_quads), where registers do not hold them beside K packs of x and dy (ptxas -v: spills). kTeamBar:
// team_sum_lean's.
// kStages > 0 (v33; kAhead 0, kTeamBar, teams of 64 threads or more): each team's next kStages rows of x and dy
// are in flight into shared memory (bulk copies, one mbarrier per stage, issued by the team's lane 0), after the
// partial slabs: kStages x 2 rows per team (norm_bwd.cu's norm_bwd_lean sizes it). A team reads its row from the stage
// into registers; once the team's row barrier has passed every thread holds it, and the stage takes the row kStages
// ahead. Where one 512-thread team fills an SM, registers held one row ahead at most (32-48 KB of x and dy per SM in
// flight); the stages hold two, for no registers.
// kSmemRows (v34, v35; kStages, not kQuads): the row is not copied into registers; both passes read it from its stage,
// and the stage takes the row kStages ahead after a second team barrier, once the second pass is done. The registers
// hold the partials and the scale instead, and the partial slabs (needed only at the end) take the stages' memory
// (norm_bwd.cu's `shared` size): at f32 K = 6 the row's 48 registers left no room for them (ptxas spilled 32-96 bytes with
// the partials by quads), and LayerNorm's two slabs left room for one stage only. v35: LayerNorm's 16-bit K = 3 rows,
// whose partials v32 put in shared memory by quads (a load and a store of each per pack and row, empty slots included),
// hold them in registers this way (+5-9% where a third of the slots is empty, C = 8200..11264).
// kOddTeams (v36, staged rows only): tpr any multiple of 32 (team_sum_lean's), else a power of two.
template <typename T, bool kRms, int K, bool kHoldScale, int kAhead, bool kTeamBar = true, bool kQuads = (K >= 4),
          int kStages = 0, bool kChunks = false, bool kSmemRows = false, bool kOddTeams = false>
__global__ void __launch_bounds__(kTeamThreads, 1)
    norm_bwd_lean_kernel(const T* __restrict__ x, ParamView scale, const float* __restrict__ mean,
                         const float* __restrict__ rstd, const T* __restrict__ dy, T* __restrict__ dx,
                         int64_t rows, int64_t cols64, int tpr, int64_t groups, int64_t per_group,
                         float* __restrict__ slab_a, float* __restrict__ slab_b) {
  constexpr int E = kVec<T>;  // elements per 16-byte pack
  constexpr int N = kRms ? 1 : 2;  // the row sums: Σ g*xhat (and Σ g)
  __shared__ TeamRed red;
  const PartialBlock blk = partial_block(rows, groups, per_group, 1);
  const int cols = static_cast<int>(cols64);  // <= 512 * K * E
  static_assert(!kOddTeams || kStages > 0, "odd teams: staged rows only (norm_bwd.cu norm_bwd_lean)");
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = kOddTeams ? tid - tid / tpr * tpr : tid & (tpr - 1);
  const int team = static_cast<int>(threadIdx.x) / tpr;
  const int block = static_cast<int>(blockDim.x);
  const int teams = block / tpr;
  const int packs = cols / E;
  const bool full = packs == K * tpr;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const PartialAccsEnd accs = partial_accs_end<E, K>(slab_a, slab_b, block);
  float* const acc_a = accs.a;  // names the lambdas below can capture (a structured binding cannot, in C++17)
  float* const acc_b = accs.b;
  RegPartials<E, kQuads ? 1 : K> reg;  // unused (dead) with kQuads
  if constexpr (kQuads) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int q = 0; q < E / 4; ++q) {
        if (acc_a != nullptr) partial_quads<E>(acc_a, k, block)[q * block] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (acc_b != nullptr) partial_quads<E>(acc_b, k, block)[q * block] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  }
  // The f32 scale of the thread's pack k (the index clamped into the row: an empty slot's dy is 0).
  const auto scale_cols = [&](int k, float (&sc)[E]) {
    load_param_cols<E, ParamLoad::kDense>(scale.data, E * min(lane + k * tpr, packs - 1), true, 0.0f, sc);
  };
  float held[kHoldScale ? K : 1][E];
  if constexpr (kHoldScale) {
#pragma unroll
    for (int k = 0; k < K; ++k) scale_cols(k, held[k]);
  }
  const auto scale_of = [&](int k, float (&sc)[E]) {
    if constexpr (kHoldScale) {
#pragma unroll
      for (int j = 0; j < E; ++j) sc[j] = held[k][j];
    } else {
      scale_cols(k, sc);
    }
  };

  // One row: the sums, the team's reduction, then dx and the partials. parity: the row's TeamRed buffer.
  // after_sums(): once the team's barrier has passed (every thread holds the row).
  // pack_of(k, xw, dw): the thread's pack k of the row's x and dy (held_packs: r's registers; kSmemRows: its stage).
  const auto held_packs = [](const LeanRow<K>& r) {
    return [&r](int k, uint4& xw, uint4& dw) {
      xw = r.x[k];
      dw = r.dy[k];
    };
  };
  const auto work = [&](const LeanRow<K>& r, int64_t row, bool active, int parity, auto&& after_sums,
                        auto&& pack_of) {
    float sums[N] = {};  // sums[0] = Σ g*xhat, sums[1] = Σ g
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float xv[E], dv[E], sc[E];
      uint4 xw, dw;
      pack_of(k, xw, dw);
      unpack_words_fresh<T>(xw, xv);
      unpack_words_fresh<T>(dw, dv);
      scale_of(k, sc);
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const float g = dv[j] * sc[j];
        const float xhat = kRms ? xv[j] * r.rs : fmaf(xv[j] - r.x0, r.rs, r.mean_rs);
        sums[0] = fmaf(g, xhat, sums[0]);
        if constexpr (!kRms) sums[N - 1] += g;
      }
    }
    team_sum_lean<N, kTeamBar, kOddTeams>(sums, tpr, red, parity);
    after_sums();
    // dx = rs * (g - mean(g) - xhat * mean(g*xhat)) = rs * g + (xhat * gx + g0), rs folded into the row's
    // two constants (C >= E >= 4 here: no exact-zero case to keep, as C == 1 has in norm_bwd_fused_kernel).
    const float gx = -r.rs * (sums[0] * inv_cols);
    const float g0 = kRms ? 0.0f : -r.rs * (sums[N - 1] * inv_cols);
    T* const dxr = dx + row * cols;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float xv[E], dv[E], sc[E], out[E];
      [[maybe_unused]] float xh[E];  // kQuads only
      uint4 xw, dw;
      pack_of(k, xw, dw);
      unpack_words_fresh<T>(xw, xv);
      unpack_words_fresh<T>(dw, dv);
      scale_of(k, sc);
#pragma unroll
      for (int j = 0; j < E; ++j) {
        const float xhat = kRms ? xv[j] * r.rs : fmaf(xv[j] - r.x0, r.rs, r.mean_rs);
        out[j] = fmaf(r.rs, dv[j] * sc[j], fmaf(xhat, gx, g0));
        if constexpr (kQuads) {
          xh[j] = xhat;
        } else {
          reg.a[k][j] = fmaf(dv[j], xhat, reg.a[k][j]);
          if constexpr (!kRms) reg.b[k][j] += dv[j];
        }
      }
      if constexpr (kQuads) {
        add_quads<E, true>(acc_a, k, block, dv, xh);
        if constexpr (!kRms) add_quads<E, false>(acc_b, k, block, dv, xh);
      }
      const int i = lane + k * tpr;
      if (active && i < packs) store_pack<E>(dxr, i, out);
    }
  };

  // The rows of a team: base + team for base = blk.begin, + teams, ... (uniform over the block). A ring of
  // kAhead + 1 row registers: each step loads the row kAhead turns ahead, then works on its own row; the
  // steps rotate the roles, so no register copies between rows.
  LeanRow<K> a, b, c;  // b, c: kAhead >= 1, 2 only (else dead)
  int64_t base = blk.begin;
  int parity = 0;
  const auto load = [&](LeanRow<K>& r, int64_t row) {
    load_lean_row<T, kRms, K>(r, x, dy, mean, rstd, row, row < blk.end, full, cols, lane, tpr);
  };
  const auto step = [&](const LeanRow<K>& use, LeanRow<K>& fill) {  // true when the block's rows are done
    const int64_t row = base + team;
    if constexpr (kAhead > 0) load(fill, row + kAhead * int64_t{teams});
    work(use, row, row < blk.end, parity, [] {}, held_packs(use));
    base += teams;
    parity ^= 1;
    return base >= blk.end;
  };
  if constexpr (kStages > 0) {
    static_assert(kAhead == 0 && kTeamBar, "staged rows: no register rows ahead; teams at their own barriers");
    // The team's rows blk.begin + team + j * teams, j = 0, 1, ...; row j in stage j % kStages, its
    // (j / kStages)-th fill. Each team's stages after the slabs (kSmemRows: under them): x packs, then dy packs.
    // kChunks (JAX_MEMOPS_NORM_BWD=v34-chunks, one stage): a stage's row in K parts, part k the packs k * tpr ..
    // (k + 1) * tpr - 1 (each thread's pack k), each on its own mbarrier, so a thread reads pack k once part k has
    // landed, not once the whole row has (with one stage the next row is copied only while this one is worked on:
    // its last bytes are on the path).
    constexpr int kParts = kChunks ? K : 1;
    __shared__ uint64_t bar[kTeamThreads / 64][kStages][kParts];  // teams of >= 64 threads
    // kSmemRows: the stages from the start of the dynamic shared memory; the partial slabs take it after the rows.
    static_assert(!kSmemRows || !kQuads, "rows in shared memory: the partials in registers");
    uint4* const stages = reinterpret_cast<uint4*>(kSmemRows ? dynamic_smem() : static_cast<void*>(accs.end)) +
                          int64_t{team} * kStages * 2 * packs;
    const auto part_packs = [&](int p) { return kChunks ? min(packs - p * tpr, tpr) : packs; };  // <= 0: empty
    const auto issue = [&](int64_t row, int st) {  // lane 0: row's x and dy into stage st
#pragma unroll
      for (int p = 0; p < kParts; ++p) {
        const int first = kChunks ? p * tpr : 0;
        if (part_packs(p) <= 0) continue;
        const uint32_t bytes = static_cast<uint32_t>(part_packs(p)) * 16u;
        mbar_arrive_expect(&bar[team][st][p], 2 * bytes);
        bulk_load(stages + st * 2 * packs + first, x + row * cols + first * E, bytes, &bar[team][st][p]);
        bulk_load(stages + st * 2 * packs + packs + first, dy + row * cols + first * E, bytes, &bar[team][st][p]);
      }
    };
    int64_t row = blk.begin + team;
    if (lane == 0) {
#pragma unroll
      for (int st = 0; st < kStages; ++st) {
#pragma unroll
        for (int p = 0; p < kParts; ++p) mbar_init(&bar[team][st][p]);
        if (row + st * int64_t{teams} < blk.end) issue(row + st * int64_t{teams}, st);
      }
    }
    __syncthreads();  // the barriers are initialized before anyone waits on them
    const auto stats = [&](int64_t r, float& rs, float& mean_rs) {
      rs = r < blk.end ? rstd[r] : 0.0f;
      mean_rs = kRms || r >= blk.end ? 0.0f : -mean[r] * rs;
    };
    float rs, mean_rs;
    stats(row, rs, mean_rs);
    int st = 0;
    uint32_t phase = 0;
    // Every team takes the same number of steps (the block's rows over its teams, rounded up), as the register
    // rows do: a team past its last row works on zeros, adding exact zeros to its partials, and meets its barrier as
    // often as the others. (v33's first loop stopped each team at its last row; racecheck then reported the
    // partials' stores and the block's reads of them, across finish_partials' __syncthreads, as races.)
    const int64_t steps = ceil_div(blk.end - blk.begin, int64_t{teams});
    for (int64_t j = 0; j < steps; ++j, row += teams) {
      const bool active = row < blk.end;
      float next_rs, next_mean_rs;  // the next row's statistics in flight through this one
      stats(row + teams, next_rs, next_mean_rs);
      const uint4* const sx = stages + st * 2 * packs;
      if (active && !kChunks) mbar_wait(&bar[team][st][0], phase);
      const int64_t refill = row + int64_t{kStages} * teams;
      const auto refill_stage = [&] {
        if (lane == 0 && refill < blk.end) {
          fence_proxy_async_smem();  // the team's reads of the stage (before its barrier) before the copy
          issue(refill, st);
        }
      };
      if constexpr (kSmemRows) {
        // Both passes read the row from its stage (the registers hold the partials instead); the stage takes its next
        // row once the team's second pass is done (a second team barrier).
        const uint4* const row_sx = active ? sx : nullptr;
        a.rs = rs;
        a.mean_rs = mean_rs;
        a.x0 = staged_x0<T, kRms>(row_sx);
        const auto stage_pack = [&](int k, uint4& xw, uint4& dw) {
          staged_pack(row_sx, sx + packs, lane + k * tpr, full, packs, xw, dw);
        };
        work(a, row, active, parity, [] {}, stage_pack);
        team_barrier(1 + team, tpr);
        refill_stage();
      } else {
        // kChunks: part k before pack k (a clamped empty slot reads the row's last pack, in part k or before it)
        const auto part_ready = [&](int k) {
          if (kChunks && active && part_packs(k) > 0) mbar_wait(&bar[team][st][k], phase);
        };
        load_lean_row_staged<T, kRms, K>(a, active ? sx : nullptr, sx + packs, rs, mean_rs, full, packs, lane, tpr,
                                         part_ready);
        work(a, row, active, parity, refill_stage, held_packs(a));
      }
      parity ^= 1;
      rs = next_rs;
      mean_rs = next_mean_rs;
      if (++st == kStages) {
        st = 0;
        phase ^= 1u;
      }
    }
  } else {
    load(a, base + team);
    if constexpr (kAhead == 2) load(b, base + team + teams);
    if (base < blk.end) {
      for (;;) {
        if constexpr (kAhead == 0) {
          if (step(a, a)) break;
          load(a, base + team);
        } else if constexpr (kAhead == 1) {
          if (step(a, b) || step(b, a)) break;
        } else {
          if (step(a, c) || step(b, a) || step(c, b)) break;
        }
      }
    }
  }
  if constexpr (!kQuads) {
    if constexpr (kSmemRows) __syncthreads();  // the slabs take the stages' memory: every team is done with its rows
    store_partials<E, K>(acc_a, reg.a);
    if constexpr (!kRms) store_partials<E, K>(acc_b, reg.b);
  }
  if (acc_a != nullptr) finish_partials<E, K, kQuads>(acc_a, tpr, 0, cols, slab_a, blk.row_out);
  if (acc_b != nullptr) finish_partials<E, K, kQuads>(acc_b, tpr, 0, cols, slab_b, blk.row_out);
}

}  // namespace jm::cuda
