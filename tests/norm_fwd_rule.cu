// The norms' forward rule for the lean rows (cpp/norm_fwd.cu: lean_mixed_rows, norm_fwd_lean_rows), run on the host
// with a launch that records the kernel and its plan instead of launching it, under the version that
// JAX_MEMOPS_NORM_FWD names (read once per process): nothing reaches the GPU, so it runs on any machine.
//   sweep  every row length C = 1..24600, x and y of one dtype (bf16, f32, f16) or of the pairs the lean rows take into
//          another (bf16 into f32, f32 into bf16; v66: f16 into f32, f32 into f16) and one they don't (bf16 into f16),
//          LayerNorm with each set of parameters and RMSNorm with and without its scale: the selection never ends in
//          an error, launches at most once, and under v48 and earlier takes no row into another dtype.
//   picks  the kernels and plans the rules name for a few rows (the default v68, v65 the rule before it, v62 the rule
//          before v65, the candidates v63, v66 and v67, v61 the rule before v62, v60 the rule before v61, v58, v57).
// Built and run by tests/test_norm_fwd_rule.py; prints OK last.
#include "norm_fwd.cu"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

namespace jm::cuda {
namespace {

int failures = 0;

void fail(const char* what, int64_t cols, const std::string& detail = "") {
  if (++failures <= 20) std::printf("FAIL %s, C = %lld %s\n", what, static_cast<long long>(cols), detail.c_str());
}

alignas(16) float pool[64];  // the buffers' address (16-byte aligned); never read or written

struct Launch {
  const void* kernel = nullptr;  // nullptr: the call falls through to the kernels after the lean rows
  RowsPlan plan;
  int launches = 0;
};

// norm_fwd's launch of a register-row kernel (kernel, plan, arguments...), recording instead of launching.
struct Record {
  Launch& out;
  template <typename K, typename... Args>
  ffi::Error operator()(K kernel, const RowsPlan& p, Args&&...) const {
    out.kernel = reinterpret_cast<const void*>(kernel);
    out.plan = p;
    ++out.launches;
    return ffi::Error::Success();
  }
};

// What the forward's lean rows launch for x of T into y of Ty, as norm_fwd reaches them, with the parameters given.
template <typename T, typename Ty, bool kRms>
Launch pick(int64_t cols, bool scale, bool bias, const char* what) {
  Launch out;
  constexpr int64_t kRows = 7;
  const RowsPlan plan = plan_norm_rows<T>(cols);
  if constexpr (!std::is_same_v<T, Ty>) {
    if constexpr (!kLeanPair<T, Ty, kRms>) {
      return out;
    } else if (!lean_mixed_rows<T, Ty, kRms>(cols, plan)) {
      return out;
    }
  }
  const ParamView sv{scale ? pool : nullptr, kRows}, bv{bias ? pool : nullptr, kRows};
  const auto done = norm_fwd_lean_rows<T, Ty, kRms>(RowShape{kRows, cols}, plan, reinterpret_cast<const T*>(pool), sv,
                                                    bv, reinterpret_cast<Ty*>(pool), pool, pool, 1e-5f, Record{out});
  if (done && done->failure()) fail(what, cols, done->message());
  if (done.has_value() != (out.launches == 1)) fail(what, cols, "launches: " + std::to_string(out.launches));
  return out;
}

template <typename T, typename Ty>
void sweep(const char* what) {
  const NormFwd v = norm_fwd_version();
  const bool before_v57 = !mixed_v57_or_later(v);
  for (int64_t c = 1; c <= 24600; ++c) {
    Launch l[6] = {pick<T, Ty, false>(c, true, true, what), pick<T, Ty, false>(c, true, false, what),
                   pick<T, Ty, false>(c, false, true, what), pick<T, Ty, false>(c, false, false, what),
                   pick<T, Ty, true>(c, true, false, what),  pick<T, Ty, true>(c, false, false, what)};
    if constexpr (!std::is_same_v<T, Ty>) {
      for (const Launch& one : l) {
        if (before_v57 && one.kernel != nullptr) fail(what, c, "into another dtype before v57");
      }
    }
  }
}

// The kernel `k` with its plan's threads per row `tpr` and rows per block, at C = cols.
void expect(const char* what, int64_t cols, const Launch& got, const void* k, int tpr, int rows_per_block = -1) {
  if (got.kernel != k) fail(what, cols, k == nullptr ? "launched, expected none" : "another kernel or none");
  if (k != nullptr && got.kernel == k && got.plan.tpr != tpr) fail(what, cols, "tpr " + std::to_string(got.plan.tpr));
  if (rows_per_block > 0 && got.plan.rows_per_block != rows_per_block) fail(what, cols, "rows per block");
}

template <typename K>
const void* at(K kernel) {
  return reinterpret_cast<const void*>(kernel);
}

using bf16 = __nv_bfloat16;

// The lean kernel's rows of T (bf16; v66: f16 too) into f32 at 4 packs per thread with cached I/O and a scale
// (LayerNorm: a bias too, staged), in whole sectors (kSectors, the 13th argument: v62, v63 and the default where
// lean_sector_stores says) or not (v61, v60, v58).
template <bool kRms, bool kBlockRow, typename T = bf16>
const void* mixed_lean(bool sectors) {
  constexpr bool kBias = !kRms;
  constexpr int P = 4;
  return sectors ? at(norm_fwd_lean_kernel<T, kRms, kBlockRow, P, true, kBias, true, false, true, 1, 0, float, 1>)
                 : at(norm_fwd_lean_kernel<T, kRms, kBlockRow, P, true, kBias, true, false, true, 1, 0, float>);
}

// What norm_fwd_mixed launches for x of T into y of Ty at C = cols where v3's rows take it (aligned buffers).
template <typename T, typename Ty, bool kRms>
Launch pick_v3(int64_t cols, const char* what) {
  Launch out;
  const ParamView sv{pool, 7};
  const auto err = norm_fwd_mixed<T, Ty, kRms>(nullptr, what, RowShape{7, cols}, reinterpret_cast<const T*>(pool), sv,
                                               ParamView{}, reinterpret_cast<Ty*>(pool), pool, pool, 1e-5f, Record{out});
  if (err.failure() || out.launches != 1) fail(what, cols, err.message());
  return out;
}

void picks(const char* version) {
  const bool v57 = std::strcmp(version, "v57") == 0;
  const bool v68 = std::strcmp(version, "") == 0;  // the default: v67 but LayerNorm's f16 rows over 256 threads
  const bool v67 = std::strcmp(version, "v67") == 0 || v68;  // v66, and f16 rows of x's dtype on the lean rows
  const bool v66 = std::strcmp(version, "v66") == 0 || v67;  // v65, and the f16 pairs on the lean rows
  const bool v65 = std::strcmp(version, "v65") == 0 || v66;
  const bool v63 = std::strcmp(version, "v63") == 0;  // v62, and v3's rows from 16-bit x into f32 in whole sectors
  const bool v62 = std::strcmp(version, "v62") == 0 || v63 || v65;  // (v65: not at every C, see below)
  const bool v61 = std::strcmp(version, "v61") == 0 || v62, v60 = std::strcmp(version, "v60") == 0;
  if (!v61 && !v60 && std::strcmp(version, "v58") != 0 && !v57) return;
  // v3's rows for the rows into another dtype the lean rows leave: cached I/O into a narrower dtype by default and
  // under v61, into every dtype under v60, else streaming.
  expect("f32 into bf16 RMSNorm on v3's rows", 4096, pick_v3<float, bf16, true>(4096, "f32 into bf16 RMSNorm"),
         v61 || v60 ? at(norm_fwd_rows_kernel<float, true, true, bf16, true>)
                    : at(norm_fwd_rows_kernel<float, true, true, bf16, false>), 128);
  expect("f32 into f16 LayerNorm on v3's rows", 1024, pick_v3<float, __half, false>(1024, "f32 into f16 LayerNorm"),
         v61 || v60 ? at(norm_fwd_rows_kernel<float, false, false, __half, true>)
                    : at(norm_fwd_rows_kernel<float, false, false, __half, false>), 32);
  // (v63, and the default but LayerNorm beyond C = 12288: v3's rows from 16-bit x into f32 store whole sectors.)
  expect("f16 into f32 LayerNorm on v3's rows", 1024, pick_v3<__half, float, false>(1024, "f16 into f32 LayerNorm"),
         v60          ? at(norm_fwd_rows_kernel<__half, false, false, float, true>)
         : v63 || v65 ? at(norm_fwd_rows_kernel<__half, false, false, float, false, true>)
                      : at(norm_fwd_rows_kernel<__half, false, false, float, false>), 16);
  expect("f16 into f32 LayerNorm on v3's rows", 16384, pick_v3<__half, float, false>(16384, "f16 into f32 LayerNorm"),
         v60   ? at(norm_fwd_rows_kernel<__half, false, true, float, true>)
         : v63 ? at(norm_fwd_rows_kernel<__half, false, true, float, false, true>)
               : at(norm_fwd_rows_kernel<__half, false, true, float, false>), 256);
  expect("bf16 into f32 RMSNorm on v3's rows", 16384, pick_v3<bf16, float, true>(16384, "bf16 into f32 RMSNorm"),
         v60          ? at(norm_fwd_rows_kernel<bf16, true, true, float, true>)
         : v63 || v65 ? at(norm_fwd_rows_kernel<bf16, true, true, float, false, true>)
                      : at(norm_fwd_rows_kernel<bf16, true, true, float, false>), 256);
  expect("bf16 into f16 LayerNorm on v3's rows", 4096, pick_v3<bf16, __half, false>(4096, "bf16 into f16 LayerNorm"),
         v60 ? at(norm_fwd_rows_kernel<bf16, false, true, __half, true>)
             : at(norm_fwd_rows_kernel<bf16, false, true, __half, false>), 64);
  // x's dtype alone: bf16 LayerNorm 4096 on v48's pair rows (either version).
  const Launch pair = pick<bf16, bf16, false>(4096, true, true, "bf16 LayerNorm 4096");
  if (pair.kernel == nullptr || pair.plan.rows_per_block != 2) fail("bf16 LayerNorm on pair rows", 4096);
  // f32 x into bf16: the tuned block rows of 3-4 packs (parameters held where lean_block_plan says), not 2.
  expect("f32 into bf16 LayerNorm", 4096, pick<float, bf16, false>(4096, true, true, ""),
         at(norm_fwd_lean_kernel<float, false, true, 4, true, true, true, false, true, 1, 0, bf16>), 256);
  expect("f32 into bf16 LayerNorm", 2048, pick<float, bf16, false>(2048, true, true, ""),
         at(norm_fwd_lean_kernel<float, false, true, 4, true, true, true, true, true, 1, 0, bf16>), 128);
  expect("f32 into bf16 RMSNorm", 1024, pick<float, bf16, true>(1024, true, false, ""),
         at(norm_fwd_lean_kernel<float, true, true, 4, true, false, true, true, true, 1, 0, bf16>), 64);
  expect("f32 into bf16 RMSNorm (2 packs: v3)", 4096, pick<float, bf16, true>(4096, true, false, ""), nullptr, 0);
  if (v57) {  // v57: bf16 x into f32 on LayerNorm's team rows at v3's packs (6 where v10 takes them), else v3
    expect("bf16 into f32 LayerNorm", 1024, pick<bf16, float, false>(1024, true, true, ""),
           at(norm_fwd_lean_kernel<bf16, false, false, 8, true, true, true, false, true, 1, 0, float>), 16);
    expect("bf16 into f32 LayerNorm", 768, pick<bf16, float, false>(768, true, true, ""),
           at(norm_fwd_lean_kernel<bf16, false, false, 6, true, true, true, false, true, 1, 0, float>), 16);
    expect("bf16 into f32 LayerNorm (block rows: v3)", 4096, pick<bf16, float, false>(4096, true, true, ""),
           nullptr, 0);
    expect("bf16 into f32 RMSNorm (v3)", 1024, pick<bf16, float, true>(1024, true, false, ""), nullptr, 0);
  } else {  // v65, v63, v62, v61, v60, v58: 4 packs per thread, team rows to C = 1024, block rows beyond, RMSNorm too
            // (v62, v63: y's stores in whole sectors; v65: LayerNorm's only at 4 packs a thread and <= 256 threads)
    expect("bf16 into f32 RMSNorm", 1024, pick<bf16, float, true>(1024, true, false, ""),
           mixed_lean<true, false>(v62), 32);
    expect("bf16 into f32 LayerNorm", 1024, pick<bf16, float, false>(1024, true, true, ""),
           mixed_lean<false, false>(v62), 32);
    expect("bf16 into f32 LayerNorm (3 packs a thread)", 768, pick<bf16, float, false>(768, true, true, ""),
           mixed_lean<false, false>(v62 && !v65), 32);
    expect("bf16 into f32 LayerNorm", 4096, pick<bf16, float, false>(4096, true, true, ""),
           mixed_lean<false, true>(v62), 128, 1);
    expect("bf16 into f32 LayerNorm (384 threads)", 12288, pick<bf16, float, false>(12288, true, true, ""),
           mixed_lean<false, true>(v62 && !v65), 384, 1);
    expect("bf16 into f32 RMSNorm", 12288, pick<bf16, float, true>(12288, true, false, ""),
           mixed_lean<true, true>(v62), 384, 1);
    expect("bf16 into f32 LayerNorm (beyond 384 threads: v3)", 12296, pick<bf16, float, false>(12296, true, true, ""),
           nullptr, 0);
    expect("bf16 into f32 LayerNorm (beyond 384 threads: v3)", 16384, pick<bf16, float, false>(16384, true, true, ""),
           nullptr, 0);
  }
  // v66: the f16 pairs as bf16's (f16 x into f32 at 4 packs, LayerNorm's sectors by v65's rule; f32 x into f16 on the
  // tuned block rows); elsewhere v3's rows.
  const auto f16_lean = [&](const void* k) { return v66 ? k : nullptr; };
  expect("f16 into f32 RMSNorm", 1024, pick<__half, float, true>(1024, true, false, ""),
         f16_lean(mixed_lean<true, false, __half>(true)), 32);
  expect("f16 into f32 LayerNorm (3 packs a thread)", 768, pick<__half, float, false>(768, true, true, ""),
         f16_lean(mixed_lean<false, false, __half>(false)), 32);
  expect("f16 into f32 LayerNorm", 4096, pick<__half, float, false>(4096, true, true, ""),
         f16_lean(mixed_lean<false, true, __half>(true)), 128, v66 ? 1 : -1);
  // (v68: LayerNorm's over 256 threads on v3's rows.)
  expect("f16 into f32 LayerNorm (384 threads)", 12288, pick<__half, float, false>(12288, true, true, ""),
         f16_lean(v68 ? nullptr : mixed_lean<false, true, __half>(false)), v66 && !v68 ? 384 : 0, v66 && !v68 ? 1 : -1);
  expect("f16 into f32 RMSNorm (384 threads)", 12288, pick<__half, float, true>(12288, true, false, ""),
         f16_lean(mixed_lean<true, true, __half>(true)), 384, v66 ? 1 : -1);
  expect("f16 into f32 LayerNorm (beyond 384 threads: v3)", 16384, pick<__half, float, false>(16384, true, true, ""),
         nullptr, 0);
  expect("f32 into f16 LayerNorm", 4096, pick<float, __half, false>(4096, true, true, ""),
         f16_lean(at(norm_fwd_lean_kernel<float, false, true, 4, true, true, true, false, true, 1, 0, __half>)), 256);
  expect("f32 into f16 RMSNorm (2 packs: v3)", 4096, pick<float, __half, true>(4096, true, false, ""), nullptr, 0);
  // v67: f16 rows of x's dtype at 4 packs with cached I/O to 384 threads (team rows stage the parameters); v68
  // LayerNorm's to 256.
  const auto f16_rows = [&](const void* k) { return v67 ? k : nullptr; };
  expect("f16 LayerNorm", 1024, pick<__half, __half, false>(1024, true, true, ""),
         f16_rows(at(norm_fwd_lean_kernel<__half, false, false, 4, true, true, true, false, true>)), 32);
  expect("f16 RMSNorm", 4096, pick<__half, __half, true>(4096, true, false, ""),
         f16_rows(at(norm_fwd_lean_kernel<__half, true, true, 4, true, false, true, false, true>)), 128);
  expect("f16 LayerNorm (288 threads)", 8200, pick<__half, __half, false>(8200, true, true, ""),
         f16_rows(v68 ? nullptr : at(norm_fwd_lean_kernel<__half, false, true, 4, true, true, true, false, true>)),
         v67 && !v68 ? 288 : 0);
  expect("f16 RMSNorm (384 threads)", 12288, pick<__half, __half, true>(12288, true, false, ""),
         f16_rows(at(norm_fwd_lean_kernel<__half, true, true, 4, true, false, true, false, true>)), 384);
  expect("f16 LayerNorm (beyond 384 threads: v3)", 12296, pick<__half, __half, false>(12296, true, true, ""), nullptr,
         0);
}

}  // namespace
}  // namespace jm::cuda

int main() {
  using namespace jm::cuda;
  const char* env = std::getenv("JAX_MEMOPS_NORM_FWD");
  const char* version = env != nullptr ? env : "";
  sweep<bf16, bf16>("bf16");
  sweep<float, float>("f32");
  sweep<__half, __half>("f16");
  sweep<bf16, float>("bf16 into f32");
  sweep<float, bf16>("f32 into bf16");
  sweep<bf16, __half>("bf16 into f16");
  sweep<__half, float>("f16 into f32");
  sweep<float, __half>("f32 into f16");
  picks(version);
  if (failures > 0) {
    std::printf("%d failures (JAX_MEMOPS_NORM_FWD=%s)\n", failures, version);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
