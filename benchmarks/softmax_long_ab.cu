// The softmax forward's long rows inside one process (issue 4: C = 50257 / 131072 at 77-83% of the copy; RESULTS.md
// "v36"; the method: inproc_ab.cuh): the handler's own choice (softmax.cu included whole: launch_fwd_v3, the default
// version, v49) against v27 (no prefetch into L2), the bulk-copy cluster alone with 0 / 60 / 75 / 90% of each CTA's
// next share prefetched into L2 (v49's rule: 75%; 16-bit rows also from one buffer, v5-s1), a two-pass kernel with L2 as the row buffer whose passes are
// pipelined across rows (v36: softmax_fwd_l2pipe_kernel below), v14's two-pass kernel and three copies of the same
// bytes. (Calls 1-2 of v49 measured other prefetches: branch v49-ahead.) Per variant: GB/s (x
// read, y written), its ratio to the default (median of the per-sample ratios); the default twice (A/A). Every output
// checked against float64 on sampled rows, NaN poured into the outputs first.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/softmax_long_ab.cu \
//        cpp/softmax_ladder.cu -o /tmp/softmax_long_ab && /tmp/softmax_long_ab [f32:C | bf16:C ...]
#include "softmax_ab_common.cuh"
#include "softmax.cu"

namespace jm::cuda::smx {

// Why: v14's two-pass kernel gives each CTA one row at a time, so between its pass 1 (HBM reads) and pass 2 (L2
// re-reads, HBM writes) sit the row's block reduction, and the SM's HBM reads stop through pass 2 unless a second CTA
// per SM loads meanwhile — which doubles the rows L2 must hold (f32 50257 at two per SM: 53 MB, thrashing). Here one
// loop reads row r from HBM (pass 1: max and sum, online per batch) while it re-reads row r - step from L2 and writes
// its y (pass 2, with r - step's statistics from the loop before): every iteration both reads and writes HBM, and the
// rows L2 holds are about one per CTA (what pass 1 has read of r, what pass 2 has not yet re-read of r - step).
// One CTA of NT threads per SM (kMinBlocks 1) or more (kMinBlocks 2: NT = 512 at 64 registers); B packs of each
// row per thread per batch.
template <typename T, int NT, int B, int kMinBlocks = 1>
__global__ void __launch_bounds__(NT, kMinBlocks)
    softmax_fwd_l2pipe_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const int tid = static_cast<int>(threadIdx.x);
  const RowIter<false> it(NT);
  MaxSum prev_ms{0.0f, 1.0f};
  float prev_inv = 1.0f;
  int64_t prev = -1;
  int parity = 0;
  for (int64_t row = blockIdx.x;; row += gridDim.x, parity ^= 1) {
    const bool cur = row < rows;
    if (!cur && prev < 0) break;
    const T* xr = x + (cur ? row : 0) * int64_t{cols};
    const T* xq = x + (prev >= 0 ? prev : 0) * int64_t{cols};
    T* yq = y + (prev >= 0 ? prev : 0) * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, cur);
    const RowSpan<T, V, int> sq(xq, cols, prev >= 0);
    const T* xb = xr + sp.head;
    const T* qb = xq + sq.head;
    T* yb = yq + sq.head;
    const int n = max(sp.body, sq.body);
    MaxSum acc = MergeOp::identity();
    for (int i0 = tid; i0 < n; i0 += B * NT) {
      P a[B], b[B];
#pragma unroll
      for (int j = 0; j < B; ++j) {
        if (i0 + j * NT < sp.body) a[j] = load_raw<V>(xb, i0 + j * NT);  // HBM; stays in L2 for pass 2
      }
#pragma unroll
      for (int j = 0; j < B; ++j) {
        if (i0 + j * NT < sq.body) b[j] = load_stream<V>(qb, i0 + j * NT);  // L2, its last use
      }
      acc = MergeOp()(acc, batch_max_sum<NT>(a, i0, sp.body));
#pragma unroll
      for (int j = 0; j < B; ++j) {
        if (i0 + j * NT < sq.body) {
          float v[V];
          unpack_fresh(b[j], v);
          P out;
#pragma unroll
          for (int e = 0; e < V; ++e) out.v[e] = from_float<T>(ex2_ftz((v[e] - prev_ms.m) * kLog2e) * prev_inv);
          store_stream<V>(yb, i0 + j * NT, out);
        }
      }
    }
    if (prev >= 0) write_edges(prev_ms, prev_inv, xq, yq, sq, cols, it);
    if (cur) {
      prev_ms = block_reduce_rows<MergeOp>(with_edges(acc, xr, sp, cols, it), parity);
      prev_inv = 1.0f / prev_ms.s;
      prev = row;
    } else {
      prev = -1;
    }
  }
}

}  // namespace jm::cuda::smx

namespace {

namespace smx = jm::cuda::smx;
using inproc::kElems;
using inproc::kSamples;
using inproc::kWarmup;

template <typename T>
bool run_case(const char* dtype, int cols, int sms) {
  const int64_t rows = kElems / cols, n = rows * cols, bytes = n * int64_t{sizeof(T)};
  const jm::RowShape s{rows, cols};
  const auto resident = [&](auto kernel, int block, const T* x, T* y) {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, 0));
    const int64_t grid = std::min<int64_t>(rows, int64_t{per_sm} * sms);
    kernel<<<static_cast<unsigned>(grid), block>>>(x, y, rows, cols);
  };
  struct Kernel {
    std::string name;
    std::function<void(const T*, T*)> launch;
  };
  // The handler's default (v49) or another version of it; the bulk-copy cluster alone (where 16-bit rows take the L2
  // two-pass kernel by default too) with ahead_pct % of each CTA's next share prefetched into L2.
  const auto handler = [&](jm::cuda::FwdVersion version) {
    return [&, version](const T* x, T* y) {
      bool launched = false;
      if (jm::cuda::launch_fwd_v3<T>(nullptr, s, true, version, x, y, &launched).failure() || !launched) {
        std::fprintf(stderr, "the handler's kernel did not launch\n");
        std::exit(1);
      }
    };
  };
  jm::cuda::DeviceInfo dev;
  if (jm::cuda::device_info(&dev).failure()) std::exit(1);
  const auto bulk_copy = [&](int ahead_pct, jm::cuda::FwdVersion version = jm::cuda::FwdVersion::kV5) {
    return [&, ahead_pct, version](const T* x, T* y) {
      bool launched = false;
      if (jm::cuda::launch_fwd_tma<T, smx::kTmaBlock, true>(dev, nullptr, s, version, x, y, &launched, ahead_pct)
              .failure() ||
          !launched) {
        std::fprintf(stderr, "the bulk-copy cluster did not launch\n");
        std::exit(1);
      }
    };
  };
  using jm::cuda::FwdVersion;
  std::vector<Kernel> ks = {
      {"default (v49)", handler(FwdVersion::kV49)},
      {"default again (A/A)", handler(FwdVersion::kV49)},
      {"v27 (no prefetch)", handler(FwdVersion::kV27)},
      {"bulk-copy cluster, ahead 0%", bulk_copy(0)},
      {"bulk-copy cluster, ahead 60%", bulk_copy(60)},
      {"bulk-copy cluster, ahead 75%", bulk_copy(75)},
      {"bulk-copy cluster, ahead 90%", bulk_copy(90)},
      {"bulk-copy cluster, one buffer (v5-s1), ahead 0%", bulk_copy(0, FwdVersion::kV5S1)},
      {"bulk-copy cluster, one buffer (v5-s1), ahead 75%", bulk_copy(75, FwdVersion::kV5S1)},
      {"v14 two-pass, 512 x 2 per SM",
       [&](const T* x, T* y) { resident(smx::softmax_fwd_l2_kernel<T>, smx::kL2Block, x, y); }},
      {"pipelined, 1024 x 4 packs, 1 per SM",
       [&](const T* x, T* y) { resident(smx::softmax_fwd_l2pipe_kernel<T, 1024, 4>, 1024, x, y); }},
      {"pipelined, 512 x 8 packs, 1 per SM",
       [&](const T* x, T* y) { resident(smx::softmax_fwd_l2pipe_kernel<T, 512, 8>, 512, x, y); }},
      {"pipelined, 512 x 4 packs, 2 per SM",
       [&](const T* x, T* y) { resident(smx::softmax_fwd_l2pipe_kernel<T, 512, 4, 2>, 512, x, y); }},
      {"pipelined, 256 x 8 packs, 2 per SM",
       [&](const T* x, T* y) { resident(smx::softmax_fwd_l2pipe_kernel<T, 256, 8, 2>, 256, x, y); }},
  };
  T* x;
  CK(cudaMalloc(&x, bytes));
  fill_x<<<1024, 256>>>(x, n, 7u + cols);
  CK(cudaGetLastError());
  std::vector<T*> ys(ks.size() + 3);
  for (T*& y : ys) {
    CK(cudaMalloc(&y, bytes));
    CK(cudaMemset(y, 0xff, bytes));  // NaN in every dtype
  }
  std::vector<inproc::Variant> vs;
  for (size_t i = 0; i < ks.size(); ++i) vs.push_back({ks[i].name, [&, i] { ks[i].launch(x, ys[i]); }, {}});
  const size_t c0 = ks.size();
  add_copies(vs, x, reinterpret_cast<void* const*>(ys.data() + c0), bytes);
  inproc::time_rotated(vs, kWarmup, kSamples);
  CK(cudaDeviceSynchronize());
  double best_copy = 0;
  for (size_t i = c0; i < vs.size(); ++i) best_copy = std::max(best_copy, 2.0 * bytes / inproc::median(vs[i].ms) / 1e6);
  std::printf("\n**%s, C = %d, %lld rows** (%.1f MB per row)\n\n| variant | GB/s | %% of the best copy | / default "
              "(per sample: median, q1, q3) | check |\n|---|---|---|---|---|\n",
              dtype, cols, static_cast<long long>(rows), cols * double(sizeof(T)) / 1e6);
  bool ok = true;
  for (size_t i = 0; i < vs.size(); ++i) {
    const double gbs = 2.0 * bytes / inproc::median(vs[i].ms) / 1e6;
    double r[3];
    inproc::sample_ratio(vs[i], vs[0], r);
    const std::string check = i < c0 ? check_cell(x, ys[i], rows, cols, &ok) : "-";
    std::printf("| %s | %.0f | %.1f | %.3f (%.3f, %.3f) | %s |\n", vs[i].name.c_str(), gbs, 100 * gbs / best_copy,
                r[0], r[1], r[2], check.c_str());
  }
  for (T* y : ys) CK(cudaFree(y));
  CK(cudaFree(x));
  return ok;
}

}  // namespace

// Arguments: cases as dtype:C (f32 or bf16), default f32:50257 bf16:50257 f32:131072 bf16:131072.
int main(int argc, char** argv) {
  return run_cases(argc, argv, {"f32:50257", "bf16:50257", "f32:131072", "bf16:131072"},
                   "softmax forward, long rows", run_case<float>, run_case<__nv_bfloat16>);
}
