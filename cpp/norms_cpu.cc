// LayerNorm and RMSNorm on the CPU: two-pass statistics over each row (float terms, summed in blocks of float lanes
// into double: sum_in_lanes), one template for both norms (kRms drops the mean and the bias). x (and dx) of type T,
// y (and dy) of type Ty, which the ops' `dtype` may make another (a bfloat16 x normalized into float32).
#include <cmath>

#include "cpu_common.h"
#include "cpu_grad_sums.h"
#include "bindings.h"
#include "handlers.h"

namespace jm::cpu {
namespace {

// LayerNorm statistics are taken of d = x - x[row, 0] (exact for nearby values), so a large mean with a
// tiny variance loses nothing to the rounding of the mean; the saved "mean" is mean(d) and every kernel,
// forward and backward, CPU and CUDA, forms xhat = (x - x[row, 0] - mean) * rstd.
template <typename T, bool kRms>
float row_pivot(const T* xr, int64_t cols) {
  return kRms || cols == 0 ? 0.0f : to_float(xr[0]);
}

// The steps that whole rows and a shared long row's tiles (below) share, so that both make the same operations, and
// the same bits. y of columns [0, n) from their d = x - pivot (d(c)).
template <typename Ry, bool kRms, class D>
void norm_out(int64_t n, const D& d, float m, float rs, const float* sc, const float* bi, Ry* y) {
  if constexpr (kRms) {
    for (int64_t c = 0; c < n; ++c) y[c] = from_float<Ry>(d(c) * rs * sc[c]);
  } else {
    for (int64_t c = 0; c < n; ++c) y[c] = from_float<Ry>((d(c) - m) * rs * sc[c] + bi[c]);
  }
}

// The backward's xhat and g = dy * scale of columns [0, n) (in place over xr / dyr allowed: f16 rows as floats).
template <typename R, typename Rdy>
void norm_bwd_terms(const R* xr, const Rdy* dyr, const float* sc, float pivot, float m, float rs, float* xhat, float* g,
                    int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    xhat[c] = (to_float(xr[c]) - pivot - m) * rs;
    g[c] = to_float(dyr[c]) * sc[c];
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) of columns [0, n) (in place over g allowed).
template <typename R>
void norm_dx(const float* xhat, const float* g, float rs, float mg, float mgx, R* dx, int64_t n) {
  for (int64_t c = 0; c < n; ++c) dx[c] = from_float<R>(rs * (g[c] - mg - xhat[c] * mgx));
}

// A whole row's mean of d (0 for RMSNorm) and rstd, d(c) = x - pivot; the mean as rounded is what the kernels save and
// subtract.
template <bool kRms, class D>
void row_stats(int64_t n, const D& d, float epsilon, float* mean, float* rstd) {
  const float m = kRms ? 0.0f : static_cast<float>(row_sum(n, d) / double(n));
  const double ss = row_sum(n, [&](int64_t c) {
    const float e = d(c) - m;
    return e * e;
  });
  *mean = m;
  *rstd = static_cast<float>(1.0 / std::sqrt(ss / double(n) + double(epsilon)));
}

// Rows [r0, r1). The loops vectorize: d = x - pivot, the sums in lanes (sum_in_lanes), absent parameters as rows of 1
// and 0 (ParamRows). d is made from x in each pass: a row of floats written and read back cost RMSNorm up to 1.8x at
// long rows (v85). bf16 LayerNorm's three passes keep it as floats, read in the loops as kept[c] (made from x in each
// pass, its conversions cost 1.05-1.5x where the row stays in cache; read through the lambda d, 5% at C = 1024).
// f16 x (or y) passes through floats in the buffer: x's, then y's in place.
template <typename T, typename Ty, bool kRms>
void norm_fwd_rows(const T* x, ParamView scale, ParamView bias, Ty* y, float* mean, float* rstd,
                   float epsilon, RowShape s, int64_t r0, int64_t r1) {
  using R = row_t<T>;
  using Ry = row_t<Ty>;
  constexpr bool kKeepD = !kRms && std::is_same_v<T, bf16>;
  const ParamRows scales(scale, 1.0f, s.cols, kScaleRow), biases(bias, 0.0f, s.cols, kBiasRow);
  const RowScratch buf(kScratchA, kKeepD ? static_cast<size_t>(s.cols)
                                         : std::max(row_buffer<T>(s.cols), row_buffer<Ty>(s.cols)));
  float* const kept = buf.data();
  for (int64_t r = r0; r < r1; ++r) {
    const R* xr = in_row(x + r * s.cols, s.cols, kept);
    const float pivot = row_pivot<T, kRms>(x + r * s.cols, s.cols);
    if constexpr (kKeepD) {
      for (int64_t c = 0; c < s.cols; ++c) kept[c] = to_float(xr[c]) - pivot;
    }
    const auto d = [xr, pivot](int64_t c) { return to_float(xr[c]) - pivot; };  // (kKeepD reads kept[c] instead)
    const auto kept_d = [kept](int64_t c) { return kept[c]; };
    float m, rs;
    if constexpr (kKeepD) {
      row_stats<kRms>(s.cols, kept_d, epsilon, &m, &rs);
    } else {
      row_stats<kRms>(s.cols, d, epsilon, &m, &rs);
    }
    if (!kRms) mean[r] = m;
    rstd[r] = rs;
    const float* sc = scales.row(r);
    const float* bi = biases.row(r);
    Ry* yr = out_row(y + r * s.cols, kept);  // f16 y: the buffer, converted by finish_row
    if constexpr (kKeepD) {
      norm_out<Ry, kRms>(s.cols, kept_d, m, rs, sc, bi, yr);
    } else {
      norm_out<Ry, kRms>(s.cols, d, m, rs, sc, bi, yr);
    }
    finish_row(kept, y + r * s.cols, s.cols);
  }
}

// Forward mode, rows [r0, r1): y as norm_fwd_rows makes it (the same statistics and bits) and its tangent
// scale * rstd * (t - mean(t) - xhat * mean(t * xhat)) + xhat * tscale + tbias (RMSNorm: no mean(t), no tbias), t the
// tangent of x; absent tangent parameters are rows of 0. x and t are read once from memory, each row's passes then
// hit the cache.
template <typename T, typename Ty, bool kRms>
void norm_jvp_rows(const T* x, ParamView scale, ParamView bias, const T* tx, ParamView tscale, ParamView tbias, Ty* y,
                   Ty* ty, float epsilon, RowShape s, int64_t r0, int64_t r1) {
  using R = row_t<T>;
  using Ry = row_t<Ty>;
  const ParamRows scales(scale, 1.0f, s.cols, kScaleRow), biases(bias, 0.0f, s.cols, kBiasRow);
  const ParamRows tscales(tscale, 0.0f, s.cols, kTangentScaleRow), tbiases(tbias, 0.0f, s.cols, kTangentBiasRow);
  // f16 rows as floats (cpu_common.h): x, t, y and ty each in a buffer of its own.
  const RowScratch xbuf(kScratchA, row_buffer<T>(s.cols)), tbuf(kScratchB, row_buffer<T>(s.cols)),
      ybuf(kScratchC, row_buffer<Ty>(s.cols)), tybuf(kScratchD, row_buffer<Ty>(s.cols));
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * s.cols;
    const R* xr = in_row(x + o, s.cols, xbuf.data());
    const R* tr = in_row(tx + o, s.cols, tbuf.data());
    const float pivot = row_pivot<T, kRms>(x + o, s.cols);
    const auto d = [xr, pivot](int64_t c) { return to_float(xr[c]) - pivot; };
    float m, rs;
    row_stats<kRms>(s.cols, d, epsilon, &m, &rs);
    const float* sc = scales.row(r);
    norm_out<Ry, kRms>(s.cols, d, m, rs, sc, biases.row(r), out_row(y + o, ybuf.data()));
    finish_row(ybuf.data(), y + o, s.cols);
    const auto xhat = [&](int64_t c) { return (d(c) - m) * rs; };
    const float mt = kRms ? 0.0f : static_cast<float>(row_sum(s.cols, [tr](int64_t c) { return to_float(tr[c]); }) /
                                                      double(s.cols));
    const float mtx = static_cast<float>(row_sum(s.cols, [&](int64_t c) { return to_float(tr[c]) * xhat(c); }) /
                                         double(s.cols));
    const float* tsc = tscales.row(r);
    const float* tbi = tbiases.row(r);
    Ry* tyr = out_row(ty + o, tybuf.data());
    for (int64_t c = 0; c < s.cols; ++c) {
      const float h = xhat(c);
      tyr[c] = from_float<Ry>(sc[c] * (rs * (to_float(tr[c]) - mt - h * mtx)) + h * tsc[c] + tbi[c]);
    }
    finish_row(tybuf.data(), ty + o, s.cols);
  }
}

// dx of rows [r0, r1): rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale; the mean(g) term only for
// LayerNorm. With ra / rb wanted (out != nullptr), also dscale = Σ dy * xhat and dbias = Σ dy over these rows, into
// their runs' rows (cpu_grad_sums.h): x and dy read once for all three.
template <typename T, typename Ty, bool kRms>
void norm_bwd_rows(const T* x, ParamView scale, const float* mean, const float* rstd, const Ty* dy, T* dx, Runs ra,
                   Runs rb, RowShape s, int64_t r0, int64_t r1) {
  using R = row_t<T>;
  const ParamRows scales(scale, 1.0f, s.cols, kScaleRow);
  ColumnSums ds(ra, s.cols), db(rb, s.cols);
  const size_t n = static_cast<size_t>(s.cols), dy_kept = ds.wanted() || db.wanted() ? row_buffer<Ty>(s.cols) : 0;
  const RowScratch xhat_buf(kScratchA, n), g_buf(kScratchB, n), dy_buf(kScratchC, dy_kept);  // f16 dy kept beside g
  float* const xhat = xhat_buf.data();
  float* const g = g_buf.data();
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t o = r * s.cols;
    const float pivot = row_pivot<T, kRms>(x + o, s.cols), m = kRms ? 0.0f : mean[r], rs = rstd[r];
    const float* sc = scales.row(r);
    const R* xr = in_row(x + o, s.cols, xhat);  // f16 rows: into xhat and g or dy_buf (rows as floats)
    const row_t<Ty>* dyr = in_row(dy + o, s.cols, dy_kept == 0 ? g : dy_buf.data());
    norm_bwd_terms(xr, dyr, sc, pivot, m, rs, xhat, g, s.cols);
    if (ds.wanted()) ds.add(r, [&](int64_t c) { return to_float(dyr[c]) * xhat[c]; });
    if (db.wanted()) db.add(r, [&](int64_t c) { return to_float(dyr[c]); });
    ds.end_row(r);
    db.end_row(r);
    const double sum_gx = row_sum(s.cols, [&](int64_t c) { return g[c] * xhat[c]; });
    const double sum_g = kRms ? 0.0 : row_sum(s.cols, [g](int64_t c) { return g[c]; });
    const float mg = static_cast<float>(sum_g / double(s.cols));
    const float mgx = static_cast<float>(sum_gx / double(s.cols));
    norm_dx(xhat, g, rs, mg, mgx, out_row(dx + o, g), s.cols);
    finish_row(g, dx + o, s.cols);
  }
}

// dscale = Σ dy * xhat and dbias = Σ dy per row group, of columns [c0, c1) over every row in order: the column split
// (cpu_grad_sums.h), beside norm_bwd_rows's dx.
template <typename T, typename Ty, bool kRms>
void norm_bwd_param_cols(const T* x, const float* mean, const float* rstd, const Ty* dy, GradView dscale,
                         GradView dbias, RowShape s, int64_t c0, int64_t c1) {
  const int64_t w = c1 - c0;
  ColumnSums ds(Runs::groups(dscale, s, c0), w), db(Runs::groups(dbias, s, c0), w);
  const RowScratch xbuf(kScratchA, ds.wanted() ? row_buffer<T>(w) : 0), dybuf(kScratchB, row_buffer<Ty>(w));
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t o = r * s.cols;
    const float pivot = row_pivot<T, kRms>(x + o, s.cols), m = kRms ? 0.0f : mean[r], rs = rstd[r];
    const auto* dyr = in_row(dy + o + c0, w, dybuf.data());
    if (ds.wanted()) {
      const auto* xr = in_row(x + o + c0, w, xbuf.data());
      ds.add(r, [&](int64_t c) { return to_float(dyr[c]) * ((to_float(xr[c]) - pivot - m) * rs); });
    }
    if (db.wanted()) db.add(r, [&](int64_t c) { return to_float(dyr[c]); });
    ds.end_row(r);
    db.end_row(r);
  }
}

// ---- A few long rows: their column tiles shared by the pool (v92) --------------------------------------------------
// Where share_long_rows (cpu_common.h) says so, each pass over the rows (sums, then outputs) runs tile by tile on the
// pool, every tile making its d = x - pivot (and f16 rows' floats) again; a row's sums are its tiles' in tile order,
// as row_sum adds them in the rows above: the same operations, so the same bits as one thread's. The norms' passes are
// light (no exps) and mostly bound by memory, so they share only from a row length times threads of 2^20: a 2^20 row
// then runs 3.3-6x faster on 16 CPUs, 1.8-3.7x on 4 and 1.3-2.2x on two, where rows of 2^17-2^18 on two cores gained
// nothing against the pool's three wake-ups (RESULTS.md "v92").
inline constexpr int64_t kNormShareWork = int64_t{1} << 20;

inline bool share_norm_rows(ffi::ThreadPool& pool, RowShape s) { return share_long_rows(pool, s, kNormShareWork); }

// One pass over every tile of rows [0, s.rows): tile(u, r, c0, c1, xr) with xr the tile's x (f16 as floats).
template <typename T, class F>
void each_x_tile(ffi::ThreadPool& pool, const T* x, RowShape s, const ColumnTiles& tiles, const F& tile) {
  for_each_tile(pool, s, tiles, [&](int64_t u, int64_t r, int64_t c0, int64_t c1) {
    const RowScratch buf(kScratchA, row_buffer<T>(c1 - c0));
    tile(u, r, c0, c1, in_row(x + r * s.cols + c0, c1 - c0, buf.data()));
  });
}

template <typename T, typename Ty, bool kRms>
void norm_fwd_shared(ffi::ThreadPool& pool, const T* x, ParamView scale, ParamView bias, Ty* y, float* mean,
                     float* rstd, float epsilon, RowShape s) {
  const ColumnTiles tiles(s.cols);
  std::vector<double> part(static_cast<size_t>(s.rows * tiles.n));
  std::vector<float> pivot(static_cast<size_t>(s.rows)), m(pivot.size(), 0.0f), rs(pivot.size());
  for (int64_t r = 0; r < s.rows; ++r) pivot[r] = row_pivot<T, kRms>(x + r * s.cols, s.cols);
  if (!kRms) {
    each_x_tile(pool, x, s, tiles, [&](int64_t u, int64_t r, int64_t c0, int64_t c1, const auto* xr) {
      part[u] = sum_in_lanes(c1 - c0, [&](int64_t c) { return to_float(xr[c]) - pivot[r]; });
    });
    for (int64_t r = 0; r < s.rows; ++r) {
      mean[r] = m[r] = static_cast<float>(tiles_total(part, tiles, r) / double(s.cols));
    }
  }
  each_x_tile(pool, x, s, tiles, [&](int64_t u, int64_t r, int64_t c0, int64_t c1, const auto* xr) {
    part[u] = sum_in_lanes(c1 - c0, [&](int64_t c) {
      const float e = (to_float(xr[c]) - pivot[r]) - m[r];
      return e * e;
    });
  });
  for (int64_t r = 0; r < s.rows; ++r) {
    const double ss = tiles_total(part, tiles, r);
    rstd[r] = rs[r] = static_cast<float>(1.0 / std::sqrt(ss / double(s.cols) + double(epsilon)));
  }
  each_x_tile(pool, x, s, tiles, [&](int64_t, int64_t r, int64_t c0, int64_t c1, const auto* xr) {
    const int64_t w = c1 - c0;
    const ParamRows scales(scale, 1.0f, s.cols, kScaleRow, w), biases(bias, 0.0f, s.cols, kBiasRow, w);
    const float* sc = scales.at(r, c0);
    const float* bi = biases.at(r, c0);
    const RowScratch ybuf(kScratchB, row_buffer<Ty>(c1 - c0));
    const float p = pivot[r];
    norm_out<row_t<Ty>, kRms>(w, [&](int64_t c) { return to_float(xr[c]) - p; }, m[r], rs[r], sc, bi,
                              out_row(y + r * s.cols + c0, ybuf.data()));
    finish_row(ybuf.data(), y + r * s.cols + c0, c1 - c0);
  });
}

// dx alone (the parameter gradients by columns, norm_bwd_param_cols): the tiles' Σ g and Σ g xhat, then dx.
template <typename T, typename Ty, bool kRms>
void norm_bwd_dx_shared(ffi::ThreadPool& pool, const T* x, ParamView scale, const float* mean, const float* rstd,
                        const Ty* dy, T* dx, RowShape s) {
  const ColumnTiles tiles(s.cols);
  std::vector<double> part_g(static_cast<size_t>(s.rows * tiles.n)), part_gx(part_g.size());
  std::vector<float> mg(static_cast<size_t>(s.rows), 0.0f), mgx(mg.size());
  // A tile's xhat and g into this thread's buffers (as norm_bwd_rows makes them); then fn(xhat, g, dx's tile).
  const auto tile_terms = [&](int64_t r, int64_t c0, int64_t c1, const auto& fn) {
    const int64_t w = c1 - c0, o = r * s.cols + c0;
    const float pivot = row_pivot<T, kRms>(x + r * s.cols, s.cols), m = kRms ? 0.0f : mean[r], rs = rstd[r];
    const ParamRows scales(scale, 1.0f, s.cols, kScaleRow, w);
    const float* sc = scales.at(r, c0);
    const RowScratch xhat_buf(kScratchA, static_cast<size_t>(w)), g_buf(kScratchB, static_cast<size_t>(w));
    float* const xhat = xhat_buf.data();
    float* const g = g_buf.data();
    // f16: into xhat and g (rows as floats), as norm_bwd_rows
    norm_bwd_terms(in_row(x + o, w, xhat), in_row(dy + o, w, g), sc, pivot, m, rs, xhat, g, w);
    fn(xhat, g, w, rs);
  };
  for_each_tile(pool, s, tiles, [&](int64_t u, int64_t r, int64_t c0, int64_t c1) {
    tile_terms(r, c0, c1, [&](const float* xhat, const float* g, int64_t w, float) {
      part_gx[u] = sum_in_lanes(w, [&](int64_t c) { return g[c] * xhat[c]; });
      if (!kRms) part_g[u] = sum_in_lanes(w, [g](int64_t c) { return g[c]; });
    });
  });
  for (int64_t r = 0; r < s.rows; ++r) {
    if (!kRms) mg[r] = static_cast<float>(tiles_total(part_g, tiles, r) / double(s.cols));
    mgx[r] = static_cast<float>(tiles_total(part_gx, tiles, r) / double(s.cols));
  }
  for_each_tile(pool, s, tiles, [&](int64_t, int64_t r, int64_t c0, int64_t c1) {
    tile_terms(r, c0, c1, [&](const float* xhat, const float* g, int64_t w, float rs) {
      const RowScratch dxbuf(kScratchC, row_buffer<T>(w));
      norm_dx(xhat, g, rs, mg[r], mgx[r], out_row(dx + r * s.cols + c0, dxbuf.data()), w);
      finish_row(dxbuf.data(), dx + r * s.cols + c0, w);
    });
  });
}

template <bool kRms>
ffi::Error norm_fwd(ffi::ThreadPool& pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, const ffi::AnyBuffer* bias,
                    ffi::AnyBuffer y, const ffi::AnyBuffer* mean, ffi::AnyBuffer rstd, float epsilon) {
  RowShape s;
  ParamView sv, bv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_size(x, y, "y"); err.failure()) return err;
  if (auto err = param_view(scale, s, "scale", &sv); err.failure()) return err;
  if (bias) {
    if (auto err = param_view(*bias, s, "bias", &bv); err.failure()) return err;
  }
  if (auto err = check_stats(rstd, s, "rstd"); err.failure()) return err;
  if (mean) {
    if (auto err = check_stats(*mean, s, "mean"); err.failure()) return err;
  }
  return dispatch_float_pair(x.element_type(), y.element_type(), [&](auto tag, auto tag_y) {
    using T = elem_t<decltype(tag)>;
    using Ty = elem_t<decltype(tag_y)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    Ty* yp = static_cast<Ty*>(y.untyped_data());
    float* mp = mean ? static_cast<float*>(mean->untyped_data()) : nullptr;
    float* rp = static_cast<float*>(rstd.untyped_data());
    if (share_norm_rows(pool, s)) {
      norm_fwd_shared<T, Ty, kRms>(pool, xp, sv, bv, yp, mp, rp, epsilon, s);
      return ffi::Error::Success();
    }
    parallel_for(pool, s.rows, piece_rows(s.cols), [&](int64_t r0, int64_t r1) {
      norm_fwd_rows<T, Ty, kRms>(xp, sv, bv, yp, mp, rp, epsilon, s, r0, r1);
    });
    return ffi::Error::Success();
  });
}

template <bool kRms>
ffi::Error norm_jvp(ffi::ThreadPool& pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, const ffi::AnyBuffer* bias,
                    ffi::AnyBuffer tx, ffi::AnyBuffer tscale, const ffi::AnyBuffer* tbias, ffi::AnyBuffer y,
                    ffi::AnyBuffer ty, float epsilon) {
  RowShape s;
  ParamView sv, bv, tsv, tbv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_same(x, tx, "tx"); err.failure()) return err;
  if (auto err = check_size(x, y, "y"); err.failure()) return err;
  if (auto err = check_same(y, ty, "ty"); err.failure()) return err;
  if (auto err = param_view(scale, s, "scale", &sv); err.failure()) return err;
  if (auto err = param_view(tscale, s, "tscale", &tsv); err.failure()) return err;
  if (bias) {
    if (auto err = param_view(*bias, s, "bias", &bv); err.failure()) return err;
    if (auto err = param_view(*tbias, s, "tbias", &tbv); err.failure()) return err;
  }
  return dispatch_float_pair(x.element_type(), y.element_type(), [&](auto tag, auto tag_y) {
    using T = elem_t<decltype(tag)>;
    using Ty = elem_t<decltype(tag_y)>;
    parallel_for(pool, s.rows, piece_rows(s.cols), [&](int64_t r0, int64_t r1) {
      norm_jvp_rows<T, Ty, kRms>(data_as<const T>(x), sv, bv, data_as<const T>(tx), tsv, tbv, data_as<Ty>(y),
                                 data_as<Ty>(ty), epsilon, s, r0, r1);
    });
    return ffi::Error::Success();
  });
}

template <bool kRms>
ffi::Error norm_bwd(ffi::ThreadPool& pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, const ffi::AnyBuffer* mean,
                    ffi::AnyBuffer rstd, ffi::AnyBuffer dy, ffi::AnyBuffer dx, ffi::AnyBuffer dscale,
                    const ffi::AnyBuffer* dbias, ffi::AnyBuffer workspace) {
  RowShape s;
  ParamView sv;
  GradView dsv, dbv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = check_size(x, dy, "dy"); err.failure()) return err;
  if (auto err = check_same(x, dx, "dx"); err.failure()) return err;
  if (auto err = param_view(scale, s, "scale", &sv); err.failure()) return err;
  if (auto err = check_stats(rstd, s, "rstd"); err.failure()) return err;
  if (mean) {
    if (auto err = check_stats(*mean, s, "mean"); err.failure()) return err;
  }
  if (auto err = grad_view(dscale, s, "dscale", &dsv); err.failure()) return err;
  if (dbias) {
    if (auto err = grad_view(*dbias, s, "dbias", &dbv); err.failure()) return err;
  }
  return dispatch_float_pair(x.element_type(), dy.element_type(), [&](auto tag, auto tag_y) {
    using T = elem_t<decltype(tag)>;
    using Ty = elem_t<decltype(tag_y)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    const float* mp = mean ? static_cast<const float*>(mean->untyped_data()) : nullptr;
    const float* rp = static_cast<const float*>(rstd.untyped_data());
    const Ty* dyp = static_cast<const Ty*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx.untyped_data());
    const PartialsView ws = partials_view(workspace, s, dsv, dbv);
    const auto rows = [&](Runs ra, Runs rb, int64_t r0, int64_t r1, int64_t /*c0 = 0*/, int64_t /*c1 = cols*/) {
      norm_bwd_rows<T, Ty, kRms>(xp, sv, mp, rp, dyp, dxp, ra, rb, s, r0, r1);
    };
    const auto dx_only = [&] {
      if (share_norm_rows(pool, s)) return norm_bwd_dx_shared<T, Ty, kRms>(pool, xp, sv, mp, rp, dyp, dxp, s);
      parallel_for(pool, s.rows, piece_rows(s.cols), [&](int64_t r0, int64_t r1) {
        rows(Runs{}, Runs{}, r0, r1, 0, s.cols);
      });
    };
    if (s.rows == 0) {
      zero_grad(dsv, s.cols);
      zero_grad(dbv, s.cols);
    } else if (!dsv.data && !dbv.data) {
      dx_only();
    } else if (!sum_in_runs(pool, ws, s, dsv, dbv, /*tiles_ok=*/false, rows)) {  // else dx by rows, sums by columns
      dx_only();
      parallel_for(pool, s.cols, piece_cols(s.rows), [&](int64_t c0, int64_t c1) {
        norm_bwd_param_cols<T, Ty, kRms>(xp, mp, rp, dyp, dsv, dbv, s, c0, c1);
      });
    }
    return ffi::Error::Success();
  });
}

ffi::Error layer_norm_fwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                          ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> mean,
                          ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  return norm_fwd<false>(pool, x, scale, &bias, *y, &*mean, *rstd, epsilon);
}

ffi::Error rms_norm_fwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Result<ffi::AnyBuffer> rstd, float epsilon) {
  return norm_fwd<true>(pool, x, scale, nullptr, *y, nullptr, *rstd, epsilon);
}

ffi::Error layer_norm_jvp(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                          ffi::AnyBuffer tx, ffi::AnyBuffer tscale, ffi::AnyBuffer tbias, ffi::Result<ffi::AnyBuffer> y,
                          ffi::Result<ffi::AnyBuffer> ty, float epsilon) {
  return norm_jvp<false>(pool, x, scale, &bias, tx, tscale, &tbias, *y, *ty, epsilon);
}

ffi::Error rms_norm_jvp(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer tx,
                        ffi::AnyBuffer tscale, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> ty,
                        float epsilon) {
  return norm_jvp<true>(pool, x, scale, nullptr, tx, tscale, nullptr, *y, *ty, epsilon);
}

// The backward handlers' workspace (handlers.h): the CUDA kernels' partial rows, which the CPU's row split uses too
// (cpu_grad_sums.h).
ffi::Error layer_norm_bwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer mean,
                          ffi::AnyBuffer rstd, ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx,
                          ffi::Result<ffi::AnyBuffer> dscale, ffi::Result<ffi::AnyBuffer> dbias,
                          ffi::Result<ffi::AnyBuffer> workspace) {
  return norm_bwd<false>(pool, x, scale, &mean, rstd, dy, *dx, *dscale, &*dbias, *workspace);
}

ffi::Error rms_norm_bwd(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer rstd,
                        ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                        ffi::Result<ffi::AnyBuffer> workspace) {
  return norm_bwd<true>(pool, x, scale, nullptr, rstd, dy, *dx, *dscale, nullptr, *workspace);
}

}  // namespace
}  // namespace jm::cpu

namespace ffi = xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormFwdCpu, jm::cpu::layer_norm_fwd,
                              jm::bind::layer_norm_fwd(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormBwdCpu, jm::cpu::layer_norm_bwd,
                              jm::bind::layer_norm_bwd(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormFwdCpu, jm::cpu::rms_norm_fwd, jm::bind::rms_norm_fwd(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormBwdCpu, jm::cpu::rms_norm_bwd, jm::bind::rms_norm_bwd(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormJvpCpu, jm::cpu::layer_norm_jvp,
                              jm::bind::layer_norm_jvp(jm::cpu::cpu_binding()));

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormJvpCpu, jm::cpu::rms_norm_jvp, jm::bind::rms_norm_jvp(jm::cpu::cpu_binding()));
