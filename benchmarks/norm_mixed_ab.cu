// The norms' forward from bf16 x into f32 y inside one process (RESULTS.md "v61"; the method: inproc_ab.cuh): why
// v60's RMSNorm rows read 85-90% of the copy where LayerNorm's rows of the same plan read 91-93% (C = 1024 on the
// H200). One lead, from ptxas: RMSNorm's team-row instance takes 48 registers, LayerNorm's 56-64, so 5 CTAs of 256
// threads sit on an SM against 4 — more f32 stores in flight at once. Each variant here is v60's kernel and plan; the
// "at n" variants add dynamic shared memory the kernel never touches, only so that n CTAs fit on an SM (occupancy
// alone changes; measured in the fifteenth session: not the cause). "v62": the candidate's kernel in the same plan, y
// stored in whole 32-byte sectors (norm_fwd_lean.cuh's kSectors; added after that session's run, measured in the
// sixteenth on an H100: +1.5..7%, the default since; RESULTS.md "v62"; in the seventeenth on the H200 beside the
// candidate v64, the same sectors made by swapping halves of x: RESULTS.md "v63"). Beside them: the widening itself
// (bf16 read, f32 written, no arithmetic: the ceiling of this mix of reads and writes), as the
// kernels store y and in whole sectors, and the 1-pack copy of the same bytes.
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr \
//        -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -Icpp benchmarks/norm_mixed_ab.cu \
//        -o /tmp/norm_mixed_ab && /tmp/norm_mixed_ab [C ...]   (default: 768 1024 4096 12288)
//
// Every output is checked: y against a float64 reference on sampled rows, rstd (and LayerNorm's mean) against the
// op's v60 run, outputs poisoned with NaN bytes before the first launch.
#include <cmath>
#include <string>
#include <vector>

#include "inproc_ab.cuh"
#include "norm_fwd_lean.cuh"

namespace {

using bf16 = __nv_bfloat16;
using jm::cuda::plan_norm_rows;
using jm::cuda::RowsPlan;
using inproc::kElems;
constexpr float kEps = 1e-5f;
constexpr int kPacks = 4;  // norm_fwd.cu's kMixedPacks

__global__ void fill_x(bf16* x, int64_t n, int cols) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float row_off = static_cast<float>(inproc::hash(static_cast<uint32_t>(i / cols), 0x9e37u) & 0xff) / 32 - 4;
    const float u = static_cast<float>(inproc::hash(static_cast<uint32_t>(i), 31u) & 0xffffff) / 8388608.0f - 1.0f;
    x[i] = __float2bfloat16(row_off + u);
  }
}

// The widening alone: 8 bf16 in (16 bytes), 8 floats out (one 32-byte sector of y), one pack per thread, full grid
// (packs a multiple of 64). kFullSectors false: as the norms' kernels store a pack's y (norm_fwd_lean.cuh's quarter
// stores), its two halves by two instructions, each of which writes half of 32 sectors. True: lane pairs swap halves
// (one shuffle per float of a half) so that each instruction writes 16 whole sectors — the lead this tests: with y
// written half a sector per instruction, L2 sees twice the write requests (Nsight Compute: L2 at 91-94% of its peak
// in both norms' bf16-into-f32 rows, DRAM at 69-75%).
template <bool kFullSectors>
__global__ void widen(const uint4* __restrict__ x, float4* __restrict__ y, int64_t packs) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const uint4 w = __ldg(x + i);
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
  float f[8];
  for (int j = 0; j < 4; ++j) {
    f[2 * j] = __uint_as_float(u[j] << 16);
    f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
  }
  float4 lo = make_float4(f[0], f[1], f[2], f[3]), hi = make_float4(f[4], f[5], f[6], f[7]);
  if constexpr (!kFullSectors) {
    y[2 * i] = lo;
    y[2 * i + 1] = hi;
  } else {
    // Even lane (pack i) and odd lane (pack i + 1): the even one sends its high half, the odd one its low half.
    const bool odd = threadIdx.x & 1;
    const float4 send = odd ? lo : hi;
    const float4 got = make_float4(__shfl_xor_sync(~0u, send.x, 1), __shfl_xor_sync(~0u, send.y, 1),
                                   __shfl_xor_sync(~0u, send.z, 1), __shfl_xor_sync(~0u, send.w, 1));
    // First instruction: the even lane's sector (its low half, then its high half from the odd lane's hands).
    // Second: the odd lane's sector (its low half from the even lane's hands, then its high half).
    const int64_t even = i & ~int64_t{1};
    y[2 * even + odd] = odd ? got : lo;
    y[2 * (even + 1) + odd] = odd ? hi : got;
  }
}

struct Out {
  float *y, *mean, *rstd;
};

// v60's instance for bf16 x into f32 y at kPacks packs (norm_fwd.cu's norm_fwd_lean_rows: scale and, for
// LayerNorm, bias; team rows stage them; cached I/O); kSectors: v62's (y stored in whole sectors).
template <bool kRms, bool kBlock, bool kSectors = false>
constexpr auto kKernel = jm::cuda::norm_fwd_lean_kernel<bf16, kRms, kBlock, kPacks, true, !kRms, true, false, true, 1,
                                                        0, float, kSectors>;
using Kernel = void (*)(const bf16*, const float*, const float*, float*, float*, float*, int64_t, int, float, float,
                        int);

struct Launch {
  RowsPlan plan;
  Kernel kernel;
  int smem = 0;     // dynamic shared memory (unused by the kernel): caps the CTAs per SM
  int per_sm = 0;   // CTAs per SM at that smem (the occupancy query)
  int regs = 0;
};

// v60's kernel (`sectors`: v62's) in v60's plan, with the least smem that leaves at most want_per_sm CTAs on an SM
// (0: none added).
template <bool kRms>
Launch plan_for(int cols, int want_per_sm, bool sectors = false) {
  Launch l;
  l.plan = plan_norm_rows<bf16, kPacks>(cols);
  const auto set = [&](Kernel kernel) {
    l.kernel = kernel;
    cudaFuncAttributes a;
    CK(cudaFuncGetAttributes(&a, kernel));
    l.regs = a.numRegs;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&l.per_sm, kernel, l.plan.block, 0));
    // The least smem (in 1 KB steps) that leaves at most want_per_sm CTAs on an SM.
    while (want_per_sm > 0 && l.per_sm > want_per_sm && l.smem < 200 * 1024) {
      l.smem += 1024;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&l.per_sm, kernel, l.plan.block, l.smem));
    }
  };
  const auto pick = [&](auto block) {
    constexpr bool kB = decltype(block)::value;
    set(sectors ? kKernel<kRms, kB, true> : kKernel<kRms, kB>);
  };
  if (l.plan.block_rows) {
    pick(std::true_type{});
  } else {
    pick(std::false_type{});
  }
  return l;
}

void run(const Launch& l, const bf16* x, const float* scale, const float* bias, const Out& o, int64_t rows, int cols) {
  const unsigned grid = static_cast<unsigned>((rows + l.plan.rows_per_block - 1) / l.plan.rows_per_block);
  l.kernel<<<grid, l.plan.block, l.smem>>>(x, scale, bias, o.y, o.mean, o.rstd, rows, cols,
                                           1.0f / static_cast<float>(cols), kEps, l.plan.tpr);
}

// y of sampled rows against float64 (relative to the row's largest |y|), the statistics against ref's.
bool check(bool rms, const std::vector<bf16>& x, const std::vector<float>& sc, const std::vector<float>& bi,
           const Out& o, const Out& ref, int64_t rows, int cols, std::string* why) {
  const int64_t n = rows * cols;
  std::vector<float> y(n), m(rows), r(rows), mr(rows), rr(rows);
  CK(cudaMemcpy(y.data(), o.y, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(m.data(), o.mean, rows * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), o.rstd, rows * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(mr.data(), ref.mean, rows * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rr.data(), ref.rstd, rows * 4, cudaMemcpyDeviceToHost));
  double worst = 0, worst_stat = 0;
  for (int64_t row = 0; row < rows; row += std::max<int64_t>(1, rows / 97)) {
    const bf16* xr = x.data() + row * cols;
    double mu = 0, var = 0, ymax = 0;
    if (!rms) {
      for (int c = 0; c < cols; ++c) mu += __bfloat162float(xr[c]);
      mu /= cols;
    }
    for (int c = 0; c < cols; ++c) var += (__bfloat162float(xr[c]) - mu) * (__bfloat162float(xr[c]) - mu);
    const double rs = 1.0 / std::sqrt(var / cols + kEps);
    std::vector<double> want(cols);
    for (int c = 0; c < cols; ++c) {
      want[c] = (__bfloat162float(xr[c]) - mu) * rs * sc[c] + (rms ? 0.0 : bi[c]);
      ymax = std::max(ymax, std::fabs(want[c]));
    }
    for (int c = 0; c < cols; ++c) {
      const double got = y[row * cols + c];
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - want[c]) / ymax : 1e30);
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    const double dm = rms ? 0.0 : std::fabs(static_cast<double>(m[row]) - mr[row]) / (std::fabs(mr[row]) + 1e-3);
    const double dr = std::fabs(static_cast<double>(r[row]) - rr[row]) / std::fabs(rr[row]);
    worst_stat = std::max({worst_stat, std::isfinite(dm) ? dm : 1e30, std::isfinite(dr) ? dr : 1e30});
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0e/%.0e", worst, worst_stat);
  *why = buf;
  return worst < 1e-5 && worst_stat < 1e-5;
}

// Both widenings' first m elements equal x's values exactly (bf16 into f32 is exact).
bool widen_ok(const std::vector<bf16>& x, const float* a, const float* b, int64_t m) {
  std::vector<float> ha(m), hb(m);
  CK(cudaMemcpy(ha.data(), a, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb.data(), b, m * 4, cudaMemcpyDeviceToHost));
  for (int64_t i = 0; i < m; ++i) {
    const float want = __bfloat162float(x[i]);
    if (!(ha[i] == want && hb[i] == want)) return false;
  }
  return true;
}

bool run_width(int cols) {
  const int64_t rows = kElems / cols, n = rows * cols;
  bf16* x;
  float *scale, *bias, *src;
  CK(cudaMalloc(&x, n * 2));
  CK(cudaMalloc(&scale, cols * 4));
  CK(cudaMalloc(&bias, cols * 4));
  CK(cudaMalloc(&src, n * 3));  // the copy's source
  CK(cudaMemset(src, 0x3c, n * 3));
  fill_x<<<1024, 256>>>(x, n, cols);
  CK(cudaGetLastError());
  const auto [sc, bi] = inproc::param_rows(scale, bias, cols);

  // The variants of each op: v60 (twice: the A/A pair), then v60's kernel at fewer CTAs per SM.
  struct Norm {
    bool rms;
    const char* name;
    Launch l;
    Out o;
  };
  std::vector<Norm> norms;
  for (const bool rms : {false, true}) {
    const Launch base = rms ? plan_for<true>(cols, 0) : plan_for<false>(cols, 0);
    const char* op = rms ? "RMSNorm" : "LayerNorm";
    norms.push_back({rms, op, base, {}});
    norms.push_back({rms, op, base, {}});
    norms.push_back({rms, rms ? "RMSNorm v62" : "LayerNorm v62",
                     rms ? plan_for<true>(cols, 0, true) : plan_for<false>(cols, 0, true), {}});
    // Occupancy caps in threads per SM: 1024 and 768 (LayerNorm's team rows hold 4 CTAs of 256 by registers).
    int last = base.per_sm;
    for (const int threads : {1024, 768}) {
      const int want = threads / base.plan.block;
      if (want < 1 || want >= last) continue;
      last = want;
      norms.push_back({rms, op, rms ? plan_for<true>(cols, want) : plan_for<false>(cols, want), {}});
    }
  }
  for (Norm& v : norms) {
    CK(cudaMalloc(&v.o.y, n * 4));
    CK(cudaMalloc(&v.o.mean, rows * 4));
    CK(cudaMalloc(&v.o.rstd, rows * 4));
    CK(cudaMemset(v.o.y, 0xff, n * 4));
    CK(cudaMemset(v.o.mean, 0xff, rows * 4));
    CK(cudaMemset(v.o.rstd, 0xff, rows * 4));
  }
  float *wide, *wide2, *dst;  // the widenings' outputs (poisoned: NaN bytes), the copy's
  CK(cudaMalloc(&wide, n * 4));
  CK(cudaMalloc(&wide2, n * 4));
  CK(cudaMalloc(&dst, n * 3));
  CK(cudaMemset(wide, 0xff, n * 4));
  CK(cudaMemset(wide2, 0xff, n * 4));

  std::vector<inproc::Variant> vs;
  vs.push_back({"copy 1", [&] { inproc::copy<1, false>(src, dst, n * 3); }, {}});  // 3n read, 3n written
  const int64_t packs = n / 8 / 256 * 256;  // whole blocks of the widening (the last < 2048 elements left out)
  for (const bool full : {false, true}) {
    vs.push_back({full ? "widen, whole sectors" : "widen", [&, full] {
                    const auto* xw = reinterpret_cast<const uint4*>(x);
                    auto* yw = reinterpret_cast<float4*>(full ? wide2 : wide);
                    const auto grid = static_cast<unsigned>(packs / 256);
                    full ? widen<true><<<grid, 256>>>(xw, yw, packs) : widen<false><<<grid, 256>>>(xw, yw, packs);
                  }, {}});
  }
  for (const Norm& v : norms) {
    vs.push_back({v.name, [&, p = &v] { run(p->l, x, scale, p->rms ? nullptr : bias, p->o, rows, cols); }, {}});
  }
  CK(cudaDeviceSynchronize());
  inproc::time_rotated(vs, inproc::kWarmup, inproc::kSamples);
  CK(cudaDeviceSynchronize());

  std::vector<bf16> hx(n);
  CK(cudaMemcpy(hx.data(), x, n * 2, cudaMemcpyDeviceToHost));
  const double io = 6.0 * n, copy = io / inproc::median(vs[0].ms) / 1e6, wio = 48.0 * packs;
  // The widenings' outputs: x's values, exactly.
  bool ok = widen_ok(hx, wide, wide2, packs * 8);
  std::printf("| %d | copy %.0f GB/s | widen %.0f%%, whole sectors %.0f%% %s |", cols, copy,
              100 * wio / inproc::median(vs[1].ms) / 1e6 / copy, 100 * wio / inproc::median(vs[2].ms) / 1e6 / copy,
              ok ? "ok" : "FAILED");
  size_t first = 0;  // the op's v60 run (its statistics are the reference)
  for (size_t i = 0; i < norms.size(); ++i) {
    const Norm& v = norms[i];
    if (i == 0 || norms[i - 1].rms != v.rms) first = i;
    const double bytes = io + (v.rms ? 4.0 : 8.0) * rows;
    double r[3];
    inproc::sample_ratio(vs[3 + i], vs[3 + first], r);
    std::string why;
    const bool good = check(v.rms, hx, sc, bi, v.o, norms[first].o, rows, cols, &why);
    ok = ok && good;
    std::printf(" %s %d×%d, %d regs%s: %.0f%%, %.3f (%.3f, %.3f) %s%s |", v.name, v.l.per_sm, v.l.plan.block, v.l.regs,
                v.l.smem ? (", +" + std::to_string(v.l.smem / 1024) + " KB").c_str() : "",
                100 * bytes / inproc::median(vs[3 + i].ms) / 1e6 / copy, r[0], r[1], r[2], good ? "ok" : "FAILED ",
                good ? "" : why.c_str());
  }
  std::printf("\n");
  for (Norm& v : norms) {
    CK(cudaFree(v.o.y));
    CK(cudaFree(v.o.mean));
    CK(cudaFree(v.o.rstd));
  }
  CK(cudaFree(wide));
  CK(cudaFree(wide2));
  CK(cudaFree(dst));
  CK(cudaFree(src));
  CK(cudaFree(x));
  CK(cudaFree(scale));
  CK(cudaFree(bias));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs; %d samples, each variant once per sample in a rotated order. Per variant: CTAs per SM × "
              "threads, registers, added shared memory; %% of the copy; per sample the op's v60 time over the "
              "variant's, median (q1, q3); the output check\n\n",
              prop.name, prop.multiProcessorCount, inproc::kSamples);
  std::vector<int> widths;
  for (int i = 1; i < argc; ++i) widths.push_back(std::atoi(argv[i]));
  if (widths.empty()) widths = {768, 1024, 4096, 12288};
  bool ok = true;
  for (int cols : widths) ok = run_width(cols) && ok;
  std::printf("\n%s\n", ok ? "all outputs checked: ok" : "SOME OUTPUTS FAILED THEIR CHECK");
  return ok ? 0 : 1;
}
