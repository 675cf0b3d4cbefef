// LayerNorm / RMSNorm forward v10 "pipe" (an A/B option, JAX_MEMOPS_NORM_FWD=v10-pipe; norms.cu): team rows
// staged through shared memory by bulk copies. A tile is the R = kTeamBlock / tpr consecutive rows that a
// block's teams take at once: R * C contiguous elements, one bulk copy (cp.async.bulk, sm_90). `stages`
// tile buffers per block; while the block works on tile i, the copies of tiles i + 1 .. i + stages - 1 are
// in flight. Each team then takes its row's packs from shared memory into registers and runs v4's row
// passes (norm_row_from_packs: exact two-pass statistics, y with 16-byte streaming stores).
// Why: the register rows (v3, v4, v9-6) have loads in flight only in a row's load phase, at most 64-96 KB
// per SM, and the 16-bit LayerNorm rows of 768-2048 columns sit at 84-89% of the copy (RESULTS.md, "v9").
// Here the copy engine keeps (stages - 1) tiles per block in flight through the reductions and stores:
// 2 blocks x 3 x 24 KB at C = 768 in 16-bit.
// Rows must start 16-byte aligned (x, y aligned; C % V == 0: no edges); team rows only (C <= 32 * 8 * V);
// rows + R <= INT_MAX (32-bit row indices, as v4). The host picks stages (kPipeSmem / tile bytes, 2..6).
#pragma once

#include "norm_fwd_half.cuh"

namespace jm::cuda {

inline constexpr int kPipeMaxStages = 6;
inline constexpr int kPipeSmem = 100 * 1024;  // per block: two blocks per SM (228 KB)

template <typename T, bool kRms>
__global__ void __launch_bounds__(kTeamBlock, 2)
    norm_fwd_pipe_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, T* __restrict__ y,
                         float* __restrict__ mean_out, float* __restrict__ rstd_out, int64_t rows, int cols,
                         float epsilon, int tpr, int stages) {
#if JM_BULK_COPY
  constexpr int V = kVec<T>;
  constexpr int N = kRowPacks<T>;  // packs per thread: tpr * N >= C / V (the host's team plan)
  using P = Pack<T, V>;
  __shared__ uint64_t full[kPipeMaxStages];
  P* tiles_smem = reinterpret_cast<P*>(dynamic_smem());  // [stages][R * C / V]
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & (tpr - 1);
  const int group = tid / tpr;
  const int per_tile = kTeamBlock / tpr;
  const int packs = cols / V;
  const int tile_packs = per_tile * packs;
  const int64_t tiles = ceil_div(rows, int64_t{per_tile});
  const float inv_cols = 1.0f / static_cast<float>(cols);

  // Thread 0: the bulk copy of tile t (its rows that exist) into stage st, completing on full[st].
  const auto issue = [&](int64_t t, int st) {
    const int64_t row0 = t * per_tile;
    const int64_t n = min(int64_t{per_tile}, rows - row0);
    const uint32_t bytes = static_cast<uint32_t>(n * packs * sizeof(P));
    mbar_arrive_expect(&full[st], bytes);
    bulk_load(tiles_smem + st * tile_packs, x + row0 * cols, bytes, &full[st]);
  };
  if (tid == 0) {
    for (int st = 0; st < stages; ++st) mbar_init(&full[st]);
    for (int st = 0; st + 1 < stages; ++st) {
      const int64_t t = blockIdx.x + int64_t{st} * gridDim.x;
      if (t < tiles) issue(t, st);
    }
  }
  __syncthreads();  // the barriers are initialized before anyone waits on them

  int st = 0, phase = 0, parity = 0;  // tile i's stage (i % stages), that stage's fill parity, row_sums'
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x, parity ^= 1) {
    // Every thread is done with the previous tile's stage: it takes the tile stages - 1 ahead.
    __syncthreads();
    if (tid == 0) {
      const int64_t ahead = t + int64_t{stages - 1} * gridDim.x;
      if (ahead < tiles) {
        fence_proxy_async_smem();
        issue(ahead, st == 0 ? stages - 1 : st - 1);
      }
    }
    mbar_wait(&full[st], static_cast<uint32_t>(phase));

    const int64_t row64 = t * per_tile + group;
    const bool valid = row64 < rows;
    const int row = static_cast<int>(valid ? row64 : 0);
    const int64_t off = int64_t{row} * cols;
    const P* src = tiles_smem + st * tile_packs + group * packs;
    P raw[N];
#pragma unroll
    for (int k = 0; k < N; ++k) raw[k] = load_shared_or_zero(src + lane + k * tpr, valid && lane + k * tpr < packs);
    RowSpan<T, V> sp(x + off, cols, valid);  // head 0, tail 0: aligned rows
    norm_row_from_packs<T, kRms, false>(raw, 0.0f, sp, x, y, off, row, valid, lane, tpr, tpr, parity, cols, inv_cols,
                                        epsilon, scale, bias, mean_out, rstd_out);
    if (++st == stages) {
      st = 0;
      phase ^= 1;
    }
  }
#else
  __trap();  // the host launches this kernel on sm_90 only
#endif
}

}  // namespace jm::cuda
