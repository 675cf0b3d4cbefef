// Softmax on the CPU: three-pass row softmax, the exps within 2 ulp (host_math.h) and summed in blocks of float lanes
// into double (sum_in_lanes); rows longer than kLongRow by column tiles, which the pool shares where rows are fewer
// than its threads. Every algorithm name is served by this one kernel.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cpu_common.h"
#include "bindings.h"
#include "handlers.h"
#include "host_math.h"

namespace jm::cpu {
namespace {

// ---- Long rows: by column tiles ----------------------------------------------------------------------------------
// A row of more than kLongRow elements is reduced by its column tiles (ColumnTiles): each tile's max m_t and
// s_t = Σ e, e = exp(x - m_t); merged in tile order into the row's max M and S = Σ s_t exp(m_t - M); then y = e f_t,
// f_t = exp(m_t - M) / S. The same operations, so the same bits, whether one thread runs a row's tiles in turn
// (keeping e in its row buffer) or the pool shares them (keeping e in y or the calling thread's buffer between its
// two passes, v94; making it again from x only where neither can hold it): the pool shares the tiles where whole rows
// would leave its threads idle (share_long_rows; v91: one row of 2^20 5.4-7.5x faster on 16 CPUs, 1.35-2x on two).

struct TileSum {
  float max;
  bool nan;
  double sum;  // Σ exp(x - max); 0 for a tile of -inf or with a NaN
};

// A tile's max and sum; its exps into e (in place over x allowed) where e is not null.
inline TileSum tile_sum(const float* x, int64_t w, float* e) {
  TileSum t{};
  t.max = max_of(x, w, &t.nan);
  if (t.nan || t.max == -INFINITY) return t;
  const float m = t.max;
  if (e) {
    for (int64_t c = 0; c < w; ++c) e[c] = host::exp_nonpositive(x[c] - m);  // vectorized
    t.sum = sum_of(e, w);
  } else {
    t.sum = sum_in_lanes(w, [&](int64_t c) { return host::exp_nonpositive(x[c] - m); });
  }
  return t;
}

// Each tile's factor f_t (0 for a tile of -inf) from a row's n tile sums; false where the row is NaN throughout (a
// NaN in it, or no entry above -inf), as a whole row's would be.
inline bool tile_factors(const TileSum* t, int64_t n, float* f) {
  bool nan = false;
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    nan = nan || t[i].nan;
    m = std::max(m, t[i].max);
  }
  if (nan || m == -INFINITY) return false;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i].max != -INFINITY) sum += t[i].sum * std::exp(double(t[i].max) - double(m));
  }
  for (int64_t i = 0; i < n; ++i) {
    f[i] = t[i].max == -INFINITY ? 0.0f : static_cast<float>(std::exp(double(t[i].max) - double(m)) / sum);
  }
  return true;
}

// y of one tile: e f (e from the tile's first pass, or again from x where `e` is null); zeros for a tile of -inf, NaN
// for a NaN row (ok false).
template <typename R>
void tile_out(const float* x, const float* e, const TileSum& t, float f, bool ok, R* y, int64_t w) {
  if (!ok || t.max == -INFINITY) {
    std::fill(y, y + w, from_float<R>(ok ? 0.0f : std::numeric_limits<float>::quiet_NaN()));
  } else if (e) {
    for (int64_t c = 0; c < w; ++c) y[c] = from_float<R>(e[c] * f);  // vectorized
  } else {
    const float m = t.max;
    for (int64_t c = 0; c < w; ++c) y[c] = from_float<R>(host::exp_nonpositive(x[c] - m) * f);
  }
}

// Rows [r0, r1). `row` holds the row's exps (and first, for 16-bit rows, the row as floats; for f16 last its results:
// cpu_common.h's rows as floats). Long rows tile by tile.
template <typename T>
void softmax_rows(const T* x, T* y, RowShape s, int64_t r0, int64_t r1) {
  using R = row_t<T>;
  const RowScratch row_buf(kScratchA, static_cast<size_t>(s.cols));
  float* const row = row_buf.data();
  const ColumnTiles tiles(s.cols);
  std::vector<TileSum> sums(s.cols > kLongRow ? tiles.n : 0);
  std::vector<float> factors(sums.size());
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = floats_of(x + r * s.cols, s.cols, row);
    R* yr = out_row(y + r * s.cols, row);
    if (s.cols > kLongRow) {
      for (int64_t t = 0; t < tiles.n; ++t) {
        sums[t] = tile_sum(xr + tiles.begin(t), tiles.begin(t + 1) - tiles.begin(t), row + tiles.begin(t));
      }
      const bool ok = tile_factors(sums.data(), tiles.n, factors.data());
      for (int64_t t = 0; t < tiles.n; ++t) {
        const int64_t c0 = tiles.begin(t);
        tile_out(row + c0, row + c0, sums[t], factors[t], ok, yr + c0, tiles.begin(t + 1) - c0);
      }
    } else {
      bool nan = false;
      float m = max_of(xr, s.cols, &nan);
      if (nan) m = std::numeric_limits<float>::quiet_NaN();  // a NaN poisons its own row only
      for (int64_t c = 0; c < s.cols; ++c) row[c] = host::exp_nonpositive(xr[c] - m);  // vectorized
      const float inv = static_cast<float>(1.0 / sum_of(row, s.cols));
      for (int64_t c = 0; c < s.cols; ++c) yr[c] = from_float<R>(row[c] * inv);
    }
    finish_row(row, y + r * s.cols, s.cols);
  }
}

// The long rows' tiles shared by the pool: the tile sums, each row's factors, then the outputs.
template <typename T>
void softmax_shared_tiles(ffi::ThreadPool& pool, const T* x, T* y, RowShape s) {
  using R = row_t<T>;
  const ColumnTiles tiles(s.cols);
  std::vector<TileSum> sums(static_cast<size_t>(s.rows * tiles.n));
  std::vector<float> factors(sums.size());
  std::vector<char> ok(static_cast<size_t>(s.rows));
  const auto tile_x = [&](int64_t r, int64_t c0, int64_t w, float* buf) {
    return floats_of(x + r * s.cols + c0, w, buf);
  };
  // The first pass's exps, kept for the second, which scales them (each exp made once, as in one thread's rows; v94):
  // in y itself for f32; for 16-bit rows in the calling thread's float buffer where they fit in it (kept_row), else
  // the second pass makes them again from x.
  const size_t n = static_cast<size_t>(s.size());
  const bool keep16 = !std::is_same_v<T, float> && kept_row(n);
  const RowScratch kept(kScratchD, keep16 ? n : 0);  // (the tiles' own buffers: slots A and B)
  float* exps = keep16 ? kept.data() : nullptr;
  if constexpr (std::is_same_v<T, float>) exps = y;
  const auto exps_at = [exps](int64_t o) { return exps ? exps + o : nullptr; };
  for_each_tile(pool, s, tiles, [&](int64_t u, int64_t r, int64_t c0, int64_t c1) {
    const RowScratch buf(kScratchA, floats_buffer<T>(c1 - c0));
    sums[u] = tile_sum(tile_x(r, c0, c1 - c0, buf.data()), c1 - c0, exps_at(r * s.cols + c0));
  });
  for (int64_t r = 0; r < s.rows; ++r) ok[r] = tile_factors(&sums[r * tiles.n], tiles.n, &factors[r * tiles.n]);
  for_each_tile(pool, s, tiles, [&](int64_t u, int64_t r, int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0, o = r * s.cols + c0;
    const float* e = exps_at(o);
    const RowScratch buf(kScratchA, e ? 0 : floats_buffer<T>(w)), ybuf(kScratchB, row_buffer<T>(w));
    R* yr = out_row(y + o, ybuf.data());
    tile_out(e ? e : tile_x(r, c0, w, buf.data()), e, sums[u], factors[u], ok[r] != 0, yr, w);
    finish_row(ybuf.data(), y + o, w);
  });
}

// Σ y dy over columns [c0, c1) of a row (a long row's tile).
template <typename R>
double dot_of(const R* y, const R* dy, int64_t c0, int64_t c1) {
  return sum_in_lanes(c1 - c0, [&](int64_t c) { return to_float(y[c0 + c]) * to_float(dy[c0 + c]); });
}

// dx = y (dy - d) over n elements (a row, or a long row's tile).
template <typename R>
void dx_of(const R* y, const R* dy, float d, R* dx, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dx[c] = from_float<R>(to_float(y[c]) * (to_float(dy[c]) - d));  // vectorized
}

template <typename T>
void softmax_bwd_rows(const T* y, const T* dy, T* dx, RowShape s, int64_t r0, int64_t r1) {
  using R = row_t<T>;
  const RowScratch ybuf(kScratchA, row_buffer<T>(s.cols)), dybuf(kScratchB, row_buffer<T>(s.cols));
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * s.cols;
    const R* yr = in_row(y + o, s.cols, ybuf.data());
    const R* dyr = in_row(dy + o, s.cols, dybuf.data());
    const float d = static_cast<float>(row_sum(s.cols, [&](int64_t c) { return to_float(yr[c]) * to_float(dyr[c]); }));
    R* dxr = out_row(dx + o, dybuf.data());
    dx_of(yr, dyr, d, dxr, s.cols);
    finish_row(dybuf.data(), dx + o, s.cols);
  }
}

// The long rows' tiles shared by the pool, backward: each tile's Σ y dy, added in tile order per row, then dx.
template <typename T>
void softmax_bwd_shared_tiles(ffi::ThreadPool& pool, const T* y, const T* dy, T* dx, RowShape s) {
  using R = row_t<T>;
  const ColumnTiles tiles(s.cols);
  std::vector<double> dots(static_cast<size_t>(s.rows * tiles.n));
  std::vector<float> row_dots(static_cast<size_t>(s.rows));
  for_each_tile(pool, s, tiles, [&](int64_t u, int64_t r, int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0, o = r * s.cols + c0;
    const RowScratch ybuf(kScratchA, row_buffer<T>(w)), dybuf(kScratchB, row_buffer<T>(w));
    dots[u] = dot_of(in_row(y + o, w, ybuf.data()), in_row(dy + o, w, dybuf.data()), 0, w);
  });
  for (int64_t r = 0; r < s.rows; ++r) row_dots[r] = static_cast<float>(tiles_total(dots, tiles, r));
  for_each_tile(pool, s, tiles, [&](int64_t, int64_t r, int64_t c0, int64_t c1) {
    const int64_t w = c1 - c0, o = r * s.cols + c0;
    const RowScratch ybuf(kScratchA, row_buffer<T>(w)), dybuf(kScratchB, row_buffer<T>(w));
    const R* yr = in_row(y + o, w, ybuf.data());
    const R* dyr = in_row(dy + o, w, dybuf.data());
    const float d = row_dots[r];
    R* dxr = out_row(dx + o, dybuf.data());
    dx_of(yr, dyr, d, dxr, w);
    finish_row(dybuf.data(), dx + o, w);
  });
}

ffi::Error softmax_fwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::Result<ffi::AnyBuffer> y, int64_t algorithm) {
  // Indices of jm.SOFTMAX_ALGORITHMS: 0 = auto, 1..7 = the seed's v1..v7 (cpp/softmax_ladder.cu on CUDA);
  // on the CPU all of them are this one kernel.
  constexpr int64_t kLastAlgorithm = 7;
  if (algorithm < 0 || algorithm > kLastAlgorithm) {
    return ffi::Error::InvalidArgument("softmax: unknown algorithm index " + std::to_string(algorithm) +
                                       " (0 = auto, 1..7 = the seed's v1..v7)");
  }
  RowShape s;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, *y, "y"); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    if (share_long_rows(pool, s)) {
      softmax_shared_tiles(pool, xp, yp, s);
    } else {
      parallel_for(pool, s.rows, piece_rows(s.cols), [&](int64_t r0, int64_t r1) { softmax_rows(xp, yp, s, r0, r1); });
    }
    return ffi::Error::Success();
  });
}

ffi::Error softmax_bwd(ffi::ThreadPool pool, ffi::AnyBuffer y, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx) {
  RowShape s;
  if (auto err = row_shape(y, "y", &s); err.failure()) return err;
  if (auto err = check_same(y, dy, "dy"); err.failure()) return err;
  if (auto err = check_same(y, *dx, "dx"); err.failure()) return err;
  return dispatch_float(y.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* yp = static_cast<const T*>(y.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx->untyped_data());
    if (share_long_rows(pool, s)) {
      softmax_bwd_shared_tiles(pool, yp, dyp, dxp, s);
    } else {
      parallel_for(pool, s.rows, piece_rows(s.cols),
                   [&](int64_t r0, int64_t r1) { softmax_bwd_rows(yp, dyp, dxp, s, r0, r1); });
    }
    return ffi::Error::Success();
  });
}

}  // namespace
}  // namespace jm::cpu

namespace ffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxFwdCpu, jm::cpu::softmax_fwd, jm::bind::softmax_fwd(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmSoftmaxBwdCpu, jm::cpu::softmax_bwd, jm::bind::softmax_bwd(jm::cpu::cpu_binding()));
