// Parameter gradients without re-reading the tensors: the backward kernels (norm_bwd.cu, gelu.cu) accumulate
// per-column partial sums in registers while they write dx, one partial row per block into the [P x C]
// workspace (PartialsView, ffi_common.h); a second small kernel sums the P partials of each group per
// column in a fixed order. No atomics: gradients are bitwise identical run after run.
//
// Geometry shared by these kernels: blocks of up to kTeamThreads threads (blockDim.x, a multiple of
// tpr), split into teams of `tpr` threads (a power of two) that each work on one row at a time; thread
// `lane` of a team owns the packs first + lane + k*tpr, k < K, of every row it visits, so its partial
// sums for those columns stay in its own shared-memory slots (partial_slot) across the rows. Block b works on
// partial j of group g (rows partial_range) and, for GELU (no row reductions), on column tile `tile` of `tiles`:
// b = (g * P + j) * tiles + tile.
#pragma once

#include "cuda_common.cuh"

namespace jm::cuda {

constexpr int kTeamThreads = 512;

// Where a block works: rows [begin, end) of group g, its partial row g*P + j, column tile `tile`.
struct PartialBlock {
  int64_t begin, end, row_out, tile;
};

__device__ __forceinline__ PartialBlock partial_block(int64_t rows, int64_t groups, int64_t per_group,
                                                      int64_t tiles) {
  const int64_t b = blockIdx.x;
  const int64_t tile = b % tiles;
  const int64_t unit = b / tiles;  // g * P + j
  const int64_t g = unit / per_group;
  const int64_t j = unit % per_group;
  const int64_t n = rows / groups;
  PartialBlock out;
  partial_range(n, per_group, j, &out.begin, &out.end);
  out.begin += g * n;
  out.end += g * n;
  out.row_out = unit;
  out.tile = tile;
  return out;
}

// Sum over the tpr threads of a team, the same bits in every one of them. tpr <= 32: xor shuffles;
// else the team's warps meet in shared memory (`red`), summed in warp order. Every thread of the block
// calls it once per row (block-uniform, as the callers' row loops are), with parity = the row loop's
// iteration & 1: the two buffers alternate, so one barrier suffices. A warp that runs ahead writes
// the other buffer, and cannot come back to this one before every thread has passed the next row's
// barrier, i.e. has read this row's sums.
using TeamRed = float[2][2][kTeamThreads / 32];

__device__ __forceinline__ void team_sum2(float (&v)[2], int tpr, TeamRed& red, int parity) {
  if (tpr <= 32) {
    warp_reduce(v, SumOp{}, tpr);
    return;
  }
  warp_reduce(v, SumOp{});
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int wpt = tpr / 32;
  const int first = warp / wpt * wpt;
  if (threadIdx.x % 32 == 0) {
    red[parity][0][warp] = v[0];
    red[parity][1][warp] = v[1];
  }
  __syncthreads();
  v[0] = 0.0f;
  v[1] = 0.0f;
  for (int w = 0; w < wpt; ++w) {
    v[0] += red[parity][0][first + w];
    v[1] += red[parity][1][first + w];
  }
}

// The partial sums live in dynamic shared memory, not registers (registers hold the rows: with both
// there, the kernels spilled): a slab holds blockDim.x * K * V floats; thread tid's sum for element j
// of its pack k is at slab[(k * V + j) * blockDim.x + tid]. For a given (k, j) a warp's 32 threads
// touch 32 consecutive floats: no bank conflicts (a thread-contiguous V-float slot put lanes 16 or 32
// bytes apart: 4-way conflicts for f32, 8-way for 16-bit packs). Only the owner touches its sums until
// finish_partials, so accumulating needs no barrier.
struct PartialSlot {
  float* p = nullptr;  // nullptr: this gradient is not wanted
  int stride = 0;
  __device__ explicit operator bool() const { return p != nullptr; }
  __device__ float& operator[](int j) const { return p[j * stride]; }
};

template <int V, int K>
__device__ __forceinline__ PartialSlot partial_slot(float* slab, int k) {
  if (slab == nullptr) return {};
  const int block = static_cast<int>(blockDim.x);
  return {slab + k * V * block + static_cast<int>(threadIdx.x), block};
}

template <int V, int K>
__host__ __device__ constexpr int64_t partial_slab_floats(int threads = kTeamThreads) {
  return int64_t{threads} * K * V;
}

// The block's accumulation slabs in dynamic shared memory for the gradients whose workspace slabs are given
// (slab_a, then slab_b right after it; nullptr where a gradient is not wanted), `threads` x K x V floats each.
struct PartialAccs {
  float* a;
  float* b;
};

template <int V, int K>
__device__ __forceinline__ PartialAccs partial_accs(const float* slab_a, const float* slab_b, int threads) {
  float* const smem = reinterpret_cast<float*>(dynamic_smem());
  float* const a = slab_a != nullptr ? smem : nullptr;
  float* const b = slab_b == nullptr ? nullptr : a != nullptr ? a + partial_slab_floats<V, K>(threads) : smem;
  return {a, b};
}

// partial_accs and `end`, the dynamic shared memory after the slabs (norm_bwd_lean_kernel's stages; 16-byte aligned,
// as the slabs' sizes). A struct of its own: with `end` in PartialAccs, nvcc compiled gelu_bwd_partials_kernel, which
// never reads it, to different code (36 fewer predicates in its PTX; not measured).
struct PartialAccsEnd {
  float* a;
  float* b;
  float* end;
};

template <int V, int K>
__device__ __forceinline__ PartialAccsEnd partial_accs_end(const float* slab_a, const float* slab_b, int threads) {
  const PartialAccs p = partial_accs<V, K>(slab_a, slab_b, threads);
  float* const smem = reinterpret_cast<float*>(dynamic_smem());
  return {p.a, p.b, smem + ((p.a != nullptr) + (p.b != nullptr)) * partial_slab_floats<V, K>(threads)};
}

// The host's side of it: the bytes of dynamic shared memory a launch of `block` threads needs for `slabs` partial
// slabs of K packs of V, then `stage_bytes` for each team of tpr threads (norm_bwd_lean_kernel's stages; 0: none);
// `shared`: the slabs take the stages' memory (norm_bwd_lean_kernel's kSmemRows), the larger of the two.
template <int V, int K>
inline int64_t partial_smem_bytes(int slabs, int block, int tpr, int64_t stage_bytes = 0, bool shared = false) {
  const int64_t a = slabs * partial_slab_floats<V, K>(block) * int64_t{sizeof(float)};
  const int64_t b = int64_t{block / tpr} * stage_bytes;
  return shared ? std::max(a, b) : a + b;
}

// Zeroes this thread's slots of a slab (nullptr: not wanted).
template <int V, int K>
__device__ __forceinline__ void zero_partials(float* slab) {
  if (slab == nullptr) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const PartialSlot p = partial_slot<V, K>(slab, k);
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = 0.0f;
  }
}

// Partials accumulated in registers instead (16-bit rows, v3): acc[k][j] is this thread's running sum for
// element j of its pack k, over its rows in the same order as the shared-memory slots would take them,
// so the result is bitwise the same; store_partials writes them once into the thread's slots, before
// finish_partials. It saves a shared-memory load and store per element and gradient in the row loop
// (with 16-bit data 2x the elements per byte moved: that traffic, not HBM, capped the v2 kernels).
// Only where the registers hold the partials beside the row (ptxas -v: no spills).
template <int V, int K>
struct RegPartials {
  float a[K][V];
  float b[K][V];
  __device__ RegPartials() {
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        a[k][j] = 0.0f;
        b[k][j] = 0.0f;
      }
    }
  }
};

template <int V, int K>
__device__ __forceinline__ void store_partials(float* slab, const float (&acc)[K][V]) {
  if (slab == nullptr) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const PartialSlot p = partial_slot<V, K>(slab, k);
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = acc[k][j];
  }
}

// Partials accumulated in the slab by quads (norm_bwd_lean.cuh at K >= 4, where registers do not hold them
// beside the row): thread tid's sums for elements 4q..4q+3 of its pack k are one float4 at quad
// (k * V / 4 + q) * blockDim.x + tid, so a thread adds a quad with one 16-byte load and store, and a warp's 32
// quads are 512 contiguous bytes (four wavefronts, no conflict). Only the owner touches them until
// finish_partials<V, K, true>.
template <int V>
__device__ __forceinline__ float4* partial_quads(float* slab, int k, int block) {  // block: blockDim.x
  static_assert(V % 4 == 0);
  return reinterpret_cast<float4*>(slab) + k * (V / 4) * block + static_cast<int>(threadIdx.x);
}

// Sums the teams' partials of one slab in team order and writes them as row `row_out` of workspace
// slab `out` (columns col0 + ...; those >= cols are padding). Block-uniform; starts with a barrier.
// Column col0 + p, p = (k * tpr + lane) * V + j, is element j of pack k of lane `lane` in every team.
// kQuads: the slab holds partial_quads' layout, else partial_slot's.
template <int V, int K, bool kQuads = false>
__device__ __forceinline__ void finish_partials(const float* slab, int tpr, int64_t col0, int64_t cols,
                                                float* __restrict__ out, int64_t row_out) {
  __syncthreads();  // every team's last accumulation is visible
  const int block = static_cast<int>(blockDim.x);
  const int teams = block / tpr;
  const int per_team = K * tpr * V;  // columns of one team's slots
  for (int p = static_cast<int>(threadIdx.x); p < per_team; p += block) {
    const int64_t col = col0 + p;
    if (col >= cols) continue;
    const int k = p / (tpr * V);
    const int rem = p - k * (tpr * V);  // lane * V + j
    const int lane = rem / V;
    const int j = rem - lane * V;
    // team 0's thread `lane`, and the distance between teams
    const float* src = kQuads ? slab + (k * V + (j & ~3)) * block + 4 * lane + (j & 3)
                              : slab + (k * V + j) * block + lane;
    const int team_step = kQuads ? 4 * tpr : tpr;
    float sum = src[0];
    for (int t = 1; t < teams; ++t) sum += src[t * team_step];
    out[row_out * cols + col] = sum;
  }
}

// The smallest power of two tpr with tpr * K >= packs (>= 1); > kTeamThreads when a row does not fit.
inline int team_size(int64_t packs, int k) {
  int64_t tpr = 1;
  while (tpr * k < packs && tpr <= kTeamThreads) tpr *= 2;
  return static_cast<int>(tpr);
}

// Stage 2: out[g, c] = sum over j < P of slab[g*P + j, c], in order (column_sums_kernel's fixed tree).
struct PartialsElem {
  const float* a;
  const float* b;
  int64_t cols;
  int64_t per_group;

  __device__ void operator()(int64_t r, int64_t c, float& ea, float& eb) const {
    ea = a != nullptr ? a[r * cols + c] : 0.0f;
    eb = b != nullptr ? b[r * cols + c] : 0.0f;
  }
};

// The slabs of the workspace for gradients ga, gb (slab 0 = the first wanted); nullptr when not wanted.
inline void partial_slabs(const PartialsView& ws, const GradView& ga, const GradView& gb, float** a,
                          float** b) {
  *a = ga.data != nullptr ? ws.data : nullptr;
  *b = gb.data != nullptr ? ws.data + (ga.data != nullptr ? ws.slab : 0) : nullptr;
}

inline ffi::Error sum_partials(cudaStream_t stream, const PartialsView& ws, int64_t cols,
                               const GradView& ga, const GradView& gb, const char* what) {
  float *a, *b;
  partial_slabs(ws, ga, gb, &a, &b);
  // Partial rows of group g are g*P .. g*P + P - 1: the column sums' groups of P "rows".
  const GradView pa{ga.data, ws.groups, ws.per_group};
  const GradView pb{gb.data, ws.groups, ws.per_group};
  return launch_column_sums(stream, PartialsElem{a, b, cols, ws.per_group}, cols, pa, pb, what);
}

}  // namespace jm::cuda
