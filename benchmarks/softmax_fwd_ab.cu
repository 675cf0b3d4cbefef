// The softmax forward's register rows inside one process (issue 4's C = 128 / 512, where the bench reads ours at
// 0.95-1.03x XLA; RESULTS.md "v23"; the method: inproc_ab.cuh): the rule (softmax_fwd_regs.cuh; softmax_fwd.cu's
// for C <= 4096, 16-bit 2048: 4 packs per thread, tpr = the smallest power of two >= 4 that holds the row, blocks
// of 256 for sub-warp rows, one row per block beyond, a full grid) against other geometries of the same kernel
// (tpr <= 1024), XLA's layout of short rows (softmax_fwd_tiled_kernel below; RESULTS.md "v24") and three copies
// of the same bytes (the ceiling's spread). Per variant: GB/s (x read, y
// written), its ratio to the rule (median of the per-sample ratios); the rule twice (A/A). Every output checked
// against float64 on sampled rows, NaN poured into the outputs first.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/softmax_fwd_ab.cu \
//        -o /tmp/softmax_fwd_ab && /tmp/softmax_fwd_ab [f32:C | bf16:C ...]   (default f32:128 bf16:128 f32:512
//        bf16:512)
#include <cmath>

#include "softmax_ab_common.cuh"
#include "softmax_fwd_regs.cuh"

namespace jm::cuda::smx {

// XLA's layout of short rows (benchmarks/xla_kernels.py: its Triton softmax takes tiles of 16 rows x 128 on 4
// warps at C = 128, bf16 and f32): the tpr threads of a row hold one 16-byte pack each (tpr = the row's packs),
// so one warp load covers 32 / tpr whole rows, 512 contiguous bytes, where the register rows' covers 32 / tpr
// rows in pieces of tpr packs (64 bytes for 16-bit C = 128). A thread holds R rows (slot r: the warp's rows
// r * 32 / tpr + its team), reduced by R interleaved butterflies. Rows of whole packs, tpr a power of two <= 32.
// Measured (RESULTS.md "v24"): 0.80-0.86 of the rule at bf16 C = 128 / 256, 0.91 at f32 128 (R = 2, 4; R = 8
// 0.63-0.68): the contiguous warp loads are not what the rule lacks.
template <typename T, int R>
__global__ void __launch_bounds__(256) softmax_fwd_tiled_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                               int64_t rows, int cols, int tpr) {
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const int lane = threadIdx.x & 31, teams = 32 / tpr, team = lane / tpr, tl = lane % tpr;
  const int64_t per_warp = int64_t{teams} * R, warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t w0 = (blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32) * per_warp; w0 < rows;
       w0 += warps * per_warp) {
    P raw[R];
    bool valid[R];
    float m[R], s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = w0 + r * teams + team;
      valid[r] = row < rows && tl * V < cols;
      if (valid[r]) raw[r] = load_nc<V>(x + row * cols, tl);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      m[r] = butterfly<MaxNanOp>(valid[r] ? pack_max_nan(raw[r], -INFINITY) : -INFINITY, tpr);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v[V];
      unpack_fresh(raw[r], v);
      const float ref = safe_max(m[r]);
      s[r] = 0.0f;
      if (valid[r]) {
#pragma unroll
        for (int j = 0; j < V; ++j) s[r] += ex2_ftz((v[j] - ref) * kLog2e);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = butterfly<AddOp>(s[r], tpr);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (!valid[r]) continue;
      float v[V];
      unpack_fresh(raw[r], v);
      const float inv = 1.0f / s[r];
      P out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(ex2_ftz((v[j] - m[r]) * kLog2e) * inv);
      store_raw<V>(y + (w0 + r * teams + team) * cols, tl, out);
    }
  }
}

}  // namespace jm::cuda::smx

namespace {

namespace smx = jm::cuda::smx;
using jm::cuda::kVec;

using inproc::kElems;
using inproc::kSamples;
using inproc::kWarmup;

// The smallest power of two >= min_tpr threads that holds the row (softmax_fwd.cu's rule: min_tpr = kMinTpr, 4).
int rule_tpr(int cols, int elems_per_thread, int min_tpr = smx::kMinTpr) {
  int tpr = min_tpr;
  while (tpr * elems_per_thread < cols) tpr *= 2;
  return tpr;
}

struct Geometry {
  std::string name;
  int packs, tpr, block;
  bool persistent;
  int tiled_rows = 0;  // > 0: softmax_fwd_tiled_kernel, this many rows per thread (packs 1, tpr the row's packs)
  int min_blocks = 1;  // > 1: the register kernel bounded to that many blocks of 256 per SM (sub-warp rows)
};

template <typename T, int R>
void launch_tiled(const T* x, T* y, int64_t rows, int cols, int tpr) {
  const int64_t per_block = int64_t{256 / 32} * (32 / tpr) * R;
  smx::softmax_fwd_tiled_kernel<T, R><<<static_cast<unsigned>((rows + per_block - 1) / per_block), 256>>>(
      x, y, rows, cols, tpr);
}

template <typename T, int N, int kMinBlocks = 1>
void launch_regs(const T* x, T* y, int64_t rows, int cols, const Geometry& g, int sms) {
  constexpr bool kKeep = sizeof(T) == 4 && N <= smx::kFwdPacks;  // f32 exps kept where they fit 64 registers
  const auto kernel = smx::softmax_fwd_regs_kernel<T, N, kKeep, false, false, true, kMinBlocks>;
  int64_t grid = (rows + g.block / g.tpr - 1) / (g.block / g.tpr);
  if (g.persistent) {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, g.block, 0));
    grid = std::min<int64_t>(grid, int64_t{per_sm} * sms);
  }
  kernel<<<static_cast<unsigned>(grid), g.block>>>(x, y, rows, cols, g.tpr);
}

template <typename T, int N>
void launch_bounded(const T* x, T* y, int64_t rows, int cols, const Geometry& g, int sms) {
  switch (g.min_blocks) {
    case 5: return launch_regs<T, N, 5>(x, y, rows, cols, g, sms);
    case 6: return launch_regs<T, N, 6>(x, y, rows, cols, g, sms);
    default: return launch_regs<T, N, 8>(x, y, rows, cols, g, sms);
  }
}

template <typename T>
void launch_geometry(const T* x, T* y, int64_t rows, int cols, const Geometry& g, int sms) {
  switch (g.tiled_rows) {
    case 0: break;
    case 2: return launch_tiled<T, 2>(x, y, rows, cols, g.tpr);
    case 4: return launch_tiled<T, 4>(x, y, rows, cols, g.tpr);
    default: return launch_tiled<T, 8>(x, y, rows, cols, g.tpr);
  }
  if (g.min_blocks > 1) {  // sub-warp rows, blocks of 256
    switch (g.packs) {
      case 1: return launch_bounded<T, 1>(x, y, rows, cols, g, sms);
      case 2: return launch_bounded<T, 2>(x, y, rows, cols, g, sms);
      default: return launch_bounded<T, 4>(x, y, rows, cols, g, sms);
    }
  }
  switch (g.packs) {
    case 1: return launch_regs<T, 1>(x, y, rows, cols, g, sms);
    case 2: return launch_regs<T, 2>(x, y, rows, cols, g, sms);
    case 4: return launch_regs<T, 4>(x, y, rows, cols, g, sms);
    default: return launch_regs<T, 8>(x, y, rows, cols, g, sms);
  }
}

template <typename T>
bool run_case(const char* dtype, int cols, int sms) {
  constexpr int V = kVec<T>;
  const int64_t rows = kElems / cols, n = rows * cols, bytes = n * int64_t{sizeof(T)};
  const int tpr = rule_tpr(cols, smx::kFwdPacks * V);
  const auto block_of = [](int t) { return t <= 32 ? smx::kSubWarpBlock : t; };  // block rows: one per block
  std::vector<Geometry> gs = {{"rule", 4, tpr, block_of(tpr), false},
                              {"rule again (A/A)", 4, tpr, block_of(tpr), false}};
  for (int packs : {1, 2, 8}) {
    const int t = rule_tpr(cols, packs * V);
    if (t <= smx::kMaxBlock && t != tpr) {
      gs.push_back({std::to_string(packs) + " packs, tpr " + std::to_string(t), packs, t, block_of(t), false});
    }
  }
  // Rows of fewer threads than the rule's 4 (a warp load then spans 16 or 32 rows, 32 or 16 bytes each): 8 packs
  // on 2 threads or 1 where they hold the row (16-bit C <= 128, f32 <= 64).
  for (int t : {2, 1}) {
    if (t * 8 * V >= cols) {
      gs.push_back({"8 packs, tpr " + std::to_string(t), 8, t, block_of(t), false});
    }
  }
  // The rule with fewer registers, more blocks resident (Nsight Compute: the rule's 4 blocks of 256 per SM, 50%
  // theoretical occupancy, where XLA's Triton kernel runs at 100%): >= 5, 6, 8 blocks of 256 per SM (softmax_fwd.cu
  // takes 6 for 16-bit 4-pack rows since v24; the "rule" here stays v23's 64 registers).
  if (tpr <= 32) {
    for (int b : {5, 6, 8}) {
      gs.push_back({"rule, >= " + std::to_string(b) + " blocks per SM", 4, tpr, 256, false, 0, b});
    }
  }
  // Fewer bytes per thread, more blocks per SM (XLA's Triton kernel at C = 128: 32 bytes per thread, 16 blocks of 128
  // per SM, 100% occupancy): 1 or 2 packs at >= 6 / 8 blocks of 256 (bf16: 32-40 registers, no spill; the 8-pack
  // rows spill at >= 5 and f32's 2 packs at >= 8, ptxas -v).
  for (int packs : {1, 2}) {
    const int t = rule_tpr(cols, packs * V);
    if (t > 32) continue;
    for (int b : {6, 8}) {
      gs.push_back({std::to_string(packs) + " packs, tpr " + std::to_string(t) + ", >= " + std::to_string(b) +
                    " blocks per SM", packs, t, 256, false, 0, b});
    }
  }
  // XLA's block size, 128 threads (twice the blocks resident at the same registers; a block's slots free sooner).
  if (tpr <= 32) {
    gs.push_back({"rule, >= 6 blocks per SM, blocks of 128", 4, tpr, 128, false, 0, 6});
    const int t = rule_tpr(cols, 2 * V);
    if (t <= 32) gs.push_back({"2 packs, tpr " + std::to_string(t) + ", >= 8 blocks, of 128", 2, t, 128, false, 0, 8});
  }
  // XLA's layout: rows of 32 packs at most (whole packs), R rows per thread.
  if (cols % V == 0 && cols / V <= 32 && (cols / V & (cols / V - 1)) == 0) {
    for (int r : {2, 4, 8}) {
      gs.push_back({"tiled, " + std::to_string(r) + " rows per thread", 1, cols / V, 256, false, r});
    }
  }
  if (tpr <= 32) {
    gs.push_back({"blocks of 512", 4, tpr, 512, false});
    gs.push_back({"blocks of 1024", 4, tpr, 1024, false});
  }
  gs.push_back({"persistent grid", 4, tpr, block_of(tpr), true});
  T* x;
  CK(cudaMalloc(&x, bytes));
  fill_x<<<1024, 256>>>(x, n, 99u + cols);
  CK(cudaGetLastError());
  std::vector<T*> ys(gs.size() + 3);
  for (T*& y : ys) {
    CK(cudaMalloc(&y, bytes));
    CK(cudaMemset(y, 0xff, bytes));
  }
  std::vector<inproc::Variant> vs;
  for (size_t i = 0; i < gs.size(); ++i) {
    vs.push_back({gs[i].name, [&, i] { launch_geometry<T>(x, ys[i], rows, cols, gs[i], sms); }, {}});
  }
  add_copies(vs, x, reinterpret_cast<void* const*>(ys.data() + gs.size()), bytes);
  inproc::time_rotated(vs, kWarmup, kSamples);
  CK(cudaDeviceSynchronize());
  std::printf("\n**%s, C = %d, %lld rows** (rule: tpr %d)\n\n| variant | GB/s | / rule (per sample: median, q1, q3) "
              "| check |\n|---|---|---|---|\n",
              dtype, cols, static_cast<long long>(rows), tpr);
  bool ok = true;
  for (size_t i = 0; i < vs.size(); ++i) {
    const double gbs = 2.0 * bytes / inproc::median(vs[i].ms) / 1e6;
    double r[3];
    inproc::sample_ratio(vs[i], vs[0], r);
    const std::string check = i < gs.size() ? check_cell(x, ys[i], rows, cols, &ok) : "-";
    std::printf("| %s | %.0f | %.3f (%.3f, %.3f) | %s |\n", vs[i].name.c_str(), gbs, r[0], r[1], r[2], check.c_str());
  }
  for (T* y : ys) CK(cudaFree(y));
  CK(cudaFree(x));
  return ok;
}

}  // namespace

// Arguments: cases as dtype:C (f32 or bf16), default f32:128 bf16:128 f32:512 bf16:512.
int main(int argc, char** argv) {
  return run_cases(argc, argv, {"f32:128", "bf16:128", "f32:512", "bf16:512"}, "softmax forward", run_case<float>,
                   run_case<__nv_bfloat16>);
}
