// v95's measurement (RESULTS.md, the thirty-ninth session): norms_cpu.cc's norm_jvp_rows on one thread, f32 rows,
// best of 15 calls per norm. Built against one source tree (the old one, or one with v95.patch applied):
//   g++ -std=c++17 -O3 -ffp-contract=off -I$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())") -ISRC/cpp \
//       -DNORMS_CC='"SRC/cpp/norms_cpu.cc"' jvp_rows_mb.cc -o mb && ./mb ROWS COLS
#include NORMS_CC
#include <chrono>
#include <cstdio>
#include <random>

using namespace jm;
using namespace jm::cpu;

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: %s ROWS COLS\n", argv[0]), 2;
  const int64_t R = atoll(argv[1]), C = atoll(argv[2]);
  std::vector<float> x(R * C), t(R * C), y(R * C), ty(R * C), s(C, 1.1f), ts(C, 0.3f), b(C, 0.2f), tb(C, -0.1f);
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(g);
  for (auto& v : t) v = nd(g);
  const RowShape sh{R, C};
  // One parameter row for every row: rows_per_group = R.
  const ParamView sv{s.data(), R}, bv{b.data(), R}, tsv{ts.data(), R}, tbv{tb.data(), R};
  for (int rms = 0; rms < 2; ++rms) {
    double best = 1e9;
    for (int rep = 0; rep < 15; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      if (rms) {
        norm_jvp_rows<float, float, true>(x.data(), sv, ParamView{}, t.data(), tsv, ParamView{}, y.data(), ty.data(),
                                          1e-6f, sh, 0, R);
      } else {
        norm_jvp_rows<float, float, false>(x.data(), sv, bv, t.data(), tsv, tbv, y.data(), ty.data(), 1e-6f, sh, 0, R);
      }
      best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s %ldx%ld: %.1f us (%.3f ns/elem) y[5]=%g ty[5]=%g\n", rms ? "rms" : "ln ", (long)R, (long)C, best,
                best * 1e3 / double(R * C), y[5], ty[5]);
  }
}
