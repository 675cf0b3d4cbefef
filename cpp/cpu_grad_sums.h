// The CPU backward kernels' parameter-gradient sums (dscale, dbias: per-column sums over the rows of each row group),
// deterministic: every split of the work is fixed by the shape alone, never by the threads.
//
// Two splits (sum_in_runs, v70). Where the gradients share one row grouping, the rows: each group's rows in runs of
// whole rows, each run's column sums written as one row — the gradient's own row where a group is one run, else a
// partial row of the backward's workspace (the CUDA kernels' [S, G*P, C] partials, ffi_common.h's PartialsView), which
// sum_partials then adds per group in run order. A kernel streams its rows once, computing dx and the sums together.
// Otherwise (the gradients' groupings differ), the columns: each piece of columns over every row in order. That split
// read a few hundred bytes of each row, each on its own 4 KB page, out of reach of the hardware prefetchers: the f32
// GELU training step at 4096 x 1024 took 15 ms on one core, 3.6x its backward without parameter gradients (RESULTS.md
// "The CPU handlers, v70").
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu_common.h"

namespace jm::cpu {

// A wanted parameter gradient of no rows: zeros (nothing else writes it).
inline void zero_grad(const GradView& g, int64_t cols) {
  if (g.data) std::fill(g.data, g.data + g.groups * cols, 0.0f);
}

// Runs of consecutive rows, each summed into one output row: the rows of each group of n rows split into `pieces`
// balanced runs (partial_range), run j of group g written to row g * stride + j of `out` (rows of `ld` floats, from
// column c0). out == nullptr: the gradient is not wanted.
struct Runs {
  float* out = nullptr;
  int64_t n = 1, pieces = 1, stride = 1, ld = 0, c0 = 0;

  // Each row group one run, written into its row of g (columns c0 ..).
  static Runs groups(const GradView& g, RowShape s, int64_t c0) { return {g.data, g.rows_per_group, 1, 1, s.cols, c0}; }

  // The run holding row r: its index within r's group, and its output row.
  int64_t run_of(int64_t r) const { return ((r % n + 1) * pieces - 1) / n; }
  float* out_row(int64_t r) const { return out + (r / n * stride + run_of(r)) * ld + c0; }
  // Whether row r is the first / last row of its run.
  bool starts_at(int64_t r) const { return r % n == run_of(r) * n / pieces; }
  bool ends_at(int64_t r) const { return r % n + 1 == (run_of(r) + 1) * n / pieces; }
  // The most rows a run holds.
  int64_t longest() const { return (n + pieces - 1) / pieces; }
};

// Column sums of float terms over runs of rows, for columns c0 .. c0 + width of a gradient. Each row adds its terms to
// float partials (add: the loops run at the float vector width); end_row folds them into double sums every 16 rows
// and where a run ends, and there writes the run's sums as floats to its output row and starts again from 0. No float
// partial holds more than 16 terms (as in sum_in_lanes), and where the folds fall depends on the shape alone: the same
// result whatever the threads, in every build. (v55: in double per term, the training steps' column sums ran at half
// the vector width with a conversion per term.) Where no run holds more than 16 rows, its one fold would give the
// float partials back unchanged (0 + p in double, rounded to float: p), so the partials are summed in the run's output
// row itself, its first row written as term + 0 (the bits of 0 + term, -0 included): no fold, no buffers to allocate
// and zero per piece, the same bits (v93).
class ColumnSums {
 public:
  ColumnSums(const Runs& runs, int64_t width)
      : runs_(runs),
        width_(width),
        in_place_(runs.longest() <= kDepth),
        part_(runs.out && !in_place_ ? width : 0),
        total_(part_.size()) {}
  bool wanted() const { return runs_.out != nullptr; }
  // Row r's terms, term(c) for c < width, added to the partials: a loop per sum, not a test per element (it
  // vectorizes).
  template <class F>
  void add(int64_t r, const F& term) {
    if (!in_place_) {
      float* p = part_.data();
      for (int64_t c = 0; c < width_; ++c) p[c] += term(c);
      return;
    }
    float* p = runs_.out_row(r);
    if (runs_.starts_at(r)) {
      for (int64_t c = 0; c < width_; ++c) p[c] = term(c) + 0.0f;
    } else {
      for (int64_t c = 0; c < width_; ++c) p[c] += term(c);
    }
  }
  void end_row(int64_t r) {
    if (!runs_.out || in_place_) return;
    const bool run_ends = runs_.ends_at(r);
    if (++pending_ < kDepth && !run_ends) return;
    for (size_t c = 0; c < part_.size(); ++c) {
      total_[c] += part_[c];
      part_[c] = 0.0f;
    }
    pending_ = 0;
    if (!run_ends) return;
    float* out = runs_.out_row(r);
    for (size_t c = 0; c < total_.size(); ++c) out[c] = static_cast<float>(total_[c]);
    std::fill(total_.begin(), total_.end(), 0.0);
  }

 private:
  static constexpr int kDepth = 16;  // rows per fold
  Runs runs_;
  int64_t width_;
  bool in_place_;
  std::vector<float> part_;
  std::vector<double> total_;
  int pending_ = 0;
};

// Columns per piece of the column split over `rows` rows: about kPieceElems elements, but at least 128 columns, so
// that each row's part is long enough for vectorized loops and whole cache lines (8 columns of 4096 rows left the
// sums' loops 8 long and read 32 bytes per 4 KB row; 64 or 128 columns: the f32 training steps of GELU and LayerNorm
// 1.3-1.5x faster, RESULTS.md "The CPU handlers, v24"). The sums run in row order whatever the width: the same
// results.
inline int64_t piece_cols(int64_t rows) { return std::max<int64_t>(128, piece_rows(rows)); }

// At most this many runs in all: pieces of parallel work for 64 threads; more would only add partial rows.
inline constexpr int64_t kMaxRuns = 64;

// Runs per group of n rows of `cols` elements, of `groups` groups, at most `per_group` (the workspace's partial rows):
// runs of at least 32 rows, so that writing and reading back a run's partial row costs <= 1/48 of its rows' traffic per
// gradient (x, dy and dx in f32; 1/24 in 16-bit), and 2^15 elements (kPieceElems; 2^16 took the column split at
// 300 x 1024 and 512 x 768, 1.0-1.5x slower: RESULTS.md "The CPU handlers, v70").
inline int64_t runs_per_group(int64_t n, int64_t cols, int64_t groups, int64_t per_group) {
  const int64_t run_rows = std::max<int64_t>(32, (kPieceElems + cols - 1) / std::max<int64_t>(1, cols));
  const int64_t most = std::min(per_group, (kMaxRuns + groups - 1) / groups);
  return std::clamp<int64_t>(n / run_rows, 1, std::max<int64_t>(1, most));
}

// g[group][c] = the sum over j < pieces of partial row group * P + j of slab, column c, added in double in j order.
inline void sum_partials(ffi::ThreadPool& pool, const float* slab, const PartialsView& ws, int64_t pieces,
                         const GradView& g, int64_t cols) {
  if (!g.data) return;
  parallel_for(pool, cols, piece_cols(ws.groups * pieces), [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(static_cast<size_t>(c1 - c0));
    for (int64_t group = 0; group < ws.groups; ++group) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < pieces; ++j) {
        const float* p = slab + (group * ws.per_group + j) * cols + c0;
        for (int64_t c = 0; c < c1 - c0; ++c) acc[c] += p[c];
      }
      float* out = g.data + group * cols + c0;
      for (int64_t c = 0; c < c1 - c0; ++c) out[c] = static_cast<float>(acc[c]);
    }
  });
}

// The fewest runs for which the row split is taken, unless x is small. Fewer runs (one group of < 256 rows or < 2^18
// elements) would leave most threads of a large machine idle, where the column split has a piece per 128 columns or
// more; below 256 rows its pieces are wider than that and stream (at 64 rows of 50257, GELU's runs in column tiles ran
// at 0.75-0.96x its speed; RESULTS.md "The CPU handlers, v70").
inline constexpr int64_t kMinRuns = 8;

// Columns per tile of the row split where a kernel's rows need no row-wide reduction (GELU): a row's working set in
// the sums (x, dy, dx, g and the float and double partials: ~40 bytes a column) then stays in L1 / L2 where rows are
// long (at 256 rows of 50257: f16 3-8% faster than whole rows, f32 0-4%).
inline constexpr int64_t kTileCols = 4096;

// The row split of a backward with wanted parameter gradients a, b (rows > 0; a or b wanted): rows_fn(runs_a,
// runs_b, r0, r1, c0, c1) over rows [r0, r1), whole runs, and columns [c0, c1), all of them unless tiles_ok (GELU) and
// the rows are longer than kTileCols; run by the pool, then the partial rows summed. Column tiles change no sum: each
// column is summed over the same rows in the same order. False, doing nothing, where the columns are to be split
// instead: a and b grouped differently, or fewer than kMinRuns runs for an x that is not small (one group without a
// workspace gives one run).
template <class F>
bool sum_in_runs(ffi::ThreadPool& pool, const PartialsView& ws, RowShape s, const GradView& a, const GradView& b,
                 bool tiles_ok, const F& rows_fn) {
  if (a.data && b.data && a.groups != b.groups) return false;
  const int64_t groups = (a.data ? a : b).groups, n = s.rows / groups;
  const int64_t pieces = runs_per_group(n, s.cols, groups, ws.data ? ws.per_group : 1);
  const ColumnTiles tiles(s.cols, tiles_ok ? kTileCols : std::max<int64_t>(s.cols, 1));
  if (groups * pieces < kMinRuns && s.size() > 2 * kPieceElems) return false;
  Runs ra = Runs::groups(a, s, 0), rb = Runs::groups(b, s, 0);
  float* slab_b = nullptr;
  if (pieces > 1) {  // the workspace's partial rows: slab 0 for the first wanted gradient
    slab_b = ws.data + (a.data ? ws.slab : 0);
    ra = {a.data ? ws.data : nullptr, n, pieces, ws.per_group, s.cols, 0};
    rb = {b.data ? slab_b : nullptr, n, pieces, ws.per_group, s.cols, 0};
  }
  const auto run_begin = [&](int64_t u) {  // the first row of run u (u = groups * pieces: the rows' end)
    int64_t begin, end;
    partial_range(n, pieces, u % pieces, &begin, &end);
    return u / pieces * n + begin;
  };
  const auto at = [](Runs r, int64_t c0) {
    r.c0 = c0;
    return r;
  };
  // A piece of parallel work: consecutive runs (or tiles of runs), about kPieceElems elements or more.
  const int64_t unit_elems = std::max<int64_t>(1, n / pieces * (s.cols / tiles.n));
  parallel_for(pool, groups * pieces * tiles.n, std::max<int64_t>(1, kPieceElems / unit_elems),
               [&](int64_t u0, int64_t u1) {
                 if (tiles.n == 1) return rows_fn(ra, rb, run_begin(u0), run_begin(u1), int64_t{0}, s.cols);
                 for (int64_t u = u0; u < u1; ++u) {
                   const int64_t run = u / tiles.n, c0 = tiles.begin(u % tiles.n), c1 = tiles.begin(u % tiles.n + 1);
                   rows_fn(at(ra, c0), at(rb, c0), run_begin(run), run_begin(run + 1), c0, c1);
                 }
               });
  if (pieces > 1) {
    sum_partials(pool, ws.data, ws, pieces, a, s.cols);
    sum_partials(pool, slab_b, ws, pieces, b, s.cols);
  }
  return true;
}

}  // namespace jm::cpu
