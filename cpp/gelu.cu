// GELU (tanh approximation) of an affine input u = x*scale + bias: CUDA kernels and XLA FFI handlers
// (JmGeluFwdCuda, JmGeluJvpCuda, JmGeluBwdCuda). scale/bias are per-column arrays (possibly grouped) or, when the array
// is absent, the scalar attributes scale_value/bias_value.
#include "cuda_common.cuh"
#include "partials.cuh"
#include "gelu_math.h"  // jm::gelu, jm::gelu_grad: the math shared with the CPU kernels
#include "bindings.h"
#include "handlers.h"

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

// The forward's load batch, as registers per thread (kBatch: 4 per 16-byte pack): v3's 4 packs issued before any
// is used (v2: 2) for 16-bit rows with parameter arrays and for unvectorized rows; since v29, 2 packs for f32 rows
// with parameter arrays and 1 where both parameters are attributes (a flat run of packs). Measured inside one
// process (benchmarks/gelu_fwd_ab.cu, two rounds, A/A within 1%; RESULTS.md "v29"): f32 with arrays 2 packs
// +1.5..2.1% (1: -1.3..1.8%), attributes 1 pack +2.4..2.6% (f32) and +1.4..1.7% (bf16); bf16 with arrays 2 packs
// -4..5%, 1 pack -15% (each pack's 8 + 8 parameter floats). A full-grid copy reads 4.2 TB/s at 1 pack per
// thread, 4.05 at 4 (benchmarks/copy_ceiling.cu).
template <typename T, int V, ParamMode M>
inline constexpr int kFwdBatchRegs = V == 1 ? 16 : M == ParamMode::kScalars ? 4 : sizeof(T) == 4 ? 8 : 16;
// Launch bound: f32 4 blocks of 256 per SM (<= 64 registers); 16-bit packs unpack to 8 floats (and 8 + 8
// parameters), which spill at 64 registers: 3 blocks (72 registers, ptxas -v).
template <typename T>
inline constexpr int kFwdBlocksPerSm = sizeof(T) == 2 ? 3 : 4;

// gelu_fwd: elementwise grid-stride loop over V-element packs (16-byte accesses when the packs and the
// buffers are aligned: with_param_mode_and_vec), batched loads; each pack's (row, column), for the parameters
// (ParamMode M), is tracked incrementally, and not at all when both are attributes.
template <typename T, int V, ParamMode M>
__global__ void __launch_bounds__(kElemBlock, kFwdBlocksPerSm<T>)
    gelu_fwd_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, float scale_value,
                    float bias_value, T* __restrict__ y, int64_t rows, int64_t cols) {
  constexpr int kRegs = kFwdBatchRegs<T, V, M>;
  for_grid_packs<V, kRegs>({x}, rows * cols / V, cols, [&](int64_t q, const RowColCursor& at, const auto& p) {
    float v[V], s[V], b[V];
    unpack_fresh(p[0], v);  // 16-bit: converted here, not hoisted (the batch stays raw: half the registers)
    load_param_at<M>(scale, at, cols, scale_value, s);
    load_param_at<M>(bias, at, cols, bias_value, b);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = gelu(v[j] * s[j] + b[j]);
    store_pack<V>(y, q, v);
  });
}

// gelu_bwd without parameter gradients: the same elementwise loop, dx = dy * gelu'(u) * s.
template <typename T, int V, ParamMode M>
__global__ void __launch_bounds__(kElemBlock)
    gelu_bwd_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, float scale_value,
                    float bias_value, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                    int64_t cols) {
  for_grid_packs<V, kParamBatchRegs>({x, dy}, rows * cols / V, cols, [&](int64_t q, const RowColCursor& at, const auto& p) {
    float v[V], g[V], s[V], b[V];
    unpack(p[0], v);
    unpack(p[1], g);
    load_param_at<M>(scale, at, cols, scale_value, s);
    load_param_at<M>(bias, at, cols, bias_value, b);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = g[j] * gelu_grad(v[j] * s[j] + b[j]) * s[j];
    store_pack<V>(dx, q, v);
  });
}

// Forward mode: y = gelu(u) and its tangent gelu'(u) * (tx * s + x * ts + tb) in one elementwise pass over x and tx
// (ts, tb: the parameters' tangents, 0 where absent; an absent ts drops the term x * ts, which at x = +-inf would be
// NaN). y has the forward kernel's bits (the same gelu).
template <typename T, int V, ParamMode M>
__global__ void __launch_bounds__(kElemBlock)
    gelu_jvp_kernel(const T* __restrict__ x, const T* __restrict__ tx, ParamView scale, ParamView bias,
                    ParamView tscale, ParamView tbias, float scale_value, float bias_value, T* __restrict__ y,
                    T* __restrict__ ty, int64_t rows, int64_t cols) {
  const bool scale_tangent = tscale.data != nullptr;  // uniform: a select, no divergence
  for_grid_packs<V, kParamBatchRegs>({x, tx}, rows * cols / V, cols, [&](int64_t q, const RowColCursor& at,
                                                                         const auto& p) {
    float v[V], t[V], s[V], b[V], ts[V], tb[V];
    unpack(p[0], v);
    unpack(p[1], t);
    load_param_at<M>(scale, at, cols, scale_value, s);
    load_param_at<M>(bias, at, cols, bias_value, b);
    load_param_at<M>(tscale, at, cols, 0.0f, ts);
    load_param_at<M>(tbias, at, cols, 0.0f, tb);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float u = v[j] * s[j] + b[j];
      const float du = t[j] * s[j] + (scale_tangent ? v[j] * ts[j] : 0.0f);
      t[j] = gelu_grad(u) * (du + tb[j]);
      v[j] = gelu(u);
    }
    store_pack<V>(y, q, v);
    store_pack<V>(ty, q, t);
  });
}

// Packs per thread of gelu_bwd_partials (16 elements; 8 unvectorized): x and dy of one row's packs are
// loaded before any is used.
template <int V>
inline constexpr int kGeluPacks = V == 1 ? 8 : 16 / V;

// Rows a team loads before computing any (v3): 16-bit rows hold half the bytes per element, so a
// thread takes two rows' packs at once to keep as many bytes in flight as f32 does with one. Device
// code only: on sm_80 two rows spill (8 bytes at 128 registers, ptxas -v), so one row there.
template <typename T, int V>
__device__ constexpr int gelu_rows() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return sizeof(T) == 2 && V > 1 ? 2 : 1;
#else
  return 1;
#endif
}

// gelu_bwd with array scale/bias and parameter gradients, in ONE pass over x and dy (geometry:
// partials.cuh). Block b covers rows [begin, end) of one group and column tile `tile` (tpr * K packs);
// per element t = dy * gelu'(x*s + b), dx = t * s, and the thread's partials gain t * x (dscale, slab_a)
// and t (dbias, slab_b). Rows are independent here, so the teams just stride over the block's rows
// (team t: rows begin + t, begin + t + teams, ..., R of them loaded at a time and summed in that
// order); the partials stay in registers (RegPartials) and go to shared memory once at the end, where
// the teams' partials become the block's workspace row.
template <typename T, int V>
__global__ void __launch_bounds__(kTeamThreads, 1)
    gelu_bwd_partials_kernel(const T* __restrict__ x, ParamView scale, ParamView bias, float scale_value,
                             float bias_value, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                             int64_t cols, int tpr, int64_t tiles, int64_t groups, int64_t per_group,
                             float* __restrict__ slab_a, float* __restrict__ slab_b) {
  constexpr int K = kGeluPacks<V>;
  constexpr int R = gelu_rows<T, V>();
  const PartialBlock blk = partial_block(rows, groups, per_group, tiles);
  const int lane = static_cast<int>(threadIdx.x) & (tpr - 1);
  const int team = static_cast<int>(threadIdx.x) / tpr;
  const int teams = kTeamThreads / tpr;
  const int64_t first = blk.tile * tpr * K;  // the tile's first pack
  const int64_t packs = cols / V;
  const auto [acc_a, acc_b] = partial_accs<V, K>(slab_a, slab_b, kTeamThreads);
  RegPartials<V, K> reg;
  for (int64_t row0 = blk.begin + team; row0 < blk.end; row0 += int64_t{R} * teams) {  // no barriers inside
    Pack<T, V> px[R][K], pd[R][K];
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const int64_t row = row0 + int64_t{q} * teams;
      const T* xr = x + row * cols;
      const T* dyr = dy + row * cols;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t i = first + lane + k * tpr;
        if (row < blk.end && i < packs) {
          px[q][k] = load_raw<V>(xr, i);
          pd[q][k] = load_raw<V>(dyr, i);
        }
      }
    }
#pragma unroll
    for (int q = 0; q < R; ++q) {
      const int64_t row = row0 + int64_t{q} * teams;
      if (row >= blk.end) break;  // uniform over the team
      T* dxr = dx + row * cols;
      const float* scale_row = param_row(scale, row, cols);
      const float* bias_row = param_row(bias, row, cols);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const int64_t i = first + lane + k * tpr;
        if (i < packs) {
          float xv[V], dv[V], sc[V], bs[V], out[V];
          unpack_fresh(px[q][k], xv);
          unpack_fresh(pd[q][k], dv);
          load_param<V>(scale_row, i, scale_value, sc);
          load_param<V>(bias_row, i, bias_value, bs);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const float t = dv[j] * gelu_grad(xv[j] * sc[j] + bs[j]);
            out[j] = t * sc[j];
            reg.a[k][j] += t * xv[j];
            reg.b[k][j] += t;
          }
          store_pack<V>(dxr, i, out);
        }
      }
    }
  }
  store_partials<V, K>(acc_a, reg.a);
  store_partials<V, K>(acc_b, reg.b);
  if (acc_a != nullptr) finish_partials<V, K>(acc_a, tpr, first * V, cols, slab_a, blk.row_out);
  if (acc_b != nullptr) finish_partials<V, K>(acc_b, tpr, first * V, cols, slab_b, blk.row_out);
}

// gelu_bwd with parameter gradients runs in the column-sum kernel, which visits every element once:
// it writes dx and yields dscale += dy*gelu'(u)*x, dbias += dy*gelu'(u).
template <typename T>
struct GeluGradElem {
  const T* x;
  const T* dy;
  T* dx;
  ParamView scale;
  ParamView bias;
  float scale_value;
  float bias_value;
  int64_t cols;

  __device__ void operator()(int64_t r, int64_t c, float& dscale, float& dbias) const {
    const int64_t i = r * cols + c;
    const float* scale_row = param_row(scale, r, cols);
    const float* bias_row = param_row(bias, r, cols);
    const float s = scale_row != nullptr ? scale_row[c] : scale_value;
    const float b = bias_row != nullptr ? bias_row[c] : bias_value;
    const float xv = to_float(x[i]);
    const float t = to_float(dy[i]) * gelu_grad(xv * s + b);
    dx[i] = from_float<T>(t * s);
    dscale = t * xv;
    dbias = t;
  }
};

ffi::Error GeluFwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                   ffi::Result<ffi::AnyBuffer> y, float scale_value, float bias_value) {
  RowShape s;
  ParamView sv, bv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, *y, "y"), param_view(scale, s, "scale", &sv),
                              param_view(bias, s, "bias", &bv)});
      err.failure()) {
    return err;
  }
  if (s.size() == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    T* yp = static_cast<T*>(y->untyped_data());
    return with_param_mode_and_vec<T>(sv, bv, s, {xp, yp, sv.data, bv.data}, [&](auto mode, auto vec) {
      constexpr ParamMode M = decltype(mode)::value;
      constexpr int V = decltype(vec)::value;
      constexpr int kPacks = kBatch<T, V, 1, kFwdBatchRegs<T, V, M>>;
      return launch(gelu_fwd_kernel<T, V, M>, elementwise_grid(dev, s.size() / V, kPacks), dim3(kElemBlock), 0,
                    stream, "gelu_fwd", xp, sv, bv, scale_value, bias_value, yp, s.rows, s.cols);
    });
  });
}

ffi::Error GeluJvp(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias, ffi::AnyBuffer tx,
                   ffi::AnyBuffer tscale, ffi::AnyBuffer tbias, ffi::Result<ffi::AnyBuffer> y,
                   ffi::Result<ffi::AnyBuffer> ty, float scale_value, float bias_value) {
  RowShape s;
  ParamView sv, bv, tsv, tbv;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, tx, "tx"), check_same(x, *y, "y"), check_same(x, *ty, "ty"),
                              param_view(scale, s, "scale", &sv), param_view(bias, s, "bias", &bv),
                              param_view(tscale, s, "tscale", &tsv), param_view(tbias, s, "tbias", &tbv)});
      err.failure()) {
    return err;
  }
  if (s.size() == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  // The four parameters' mode: the primals' and the tangents' pairs, the more general of the two.
  const ParamMode mode = std::max(param_mode(sv, bv, s.rows), param_mode(tsv, tbv, s.rows));
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = data_as<const T>(x);
    const T* txp = data_as<const T>(tx);
    T* yp = data_as<T>(*y);
    T* typ = data_as<T>(*ty);
    return with_param_mode(mode, [&](auto m) {
      constexpr ParamMode M = decltype(m)::value;
      const bool vec = vectorizable<T>(M == ParamMode::kScalars ? s.size() : s.cols,
                                       {xp, txp, yp, typ, sv.data, bv.data, tsv.data, tbv.data});
      return with_vec<T>(vec, [&](auto v) {
        constexpr int V = decltype(v)::value;
        return launch(gelu_jvp_kernel<T, V, M>, elementwise_grid(dev, s.size() / V, kBatch<T, V, 2, kParamBatchRegs>),
                      dim3(kElemBlock), 0, stream, "gelu_jvp", xp, txp, sv, bv, tsv, tbv, scale_value, bias_value,
                      yp, typ, s.rows, s.cols);
      });
    });
  });
}

ffi::Error GeluBwd(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                   ffi::AnyBuffer dy, ffi::Result<ffi::AnyBuffer> dx, ffi::Result<ffi::AnyBuffer> dscale,
                   ffi::Result<ffi::AnyBuffer> dbias, ffi::Result<ffi::AnyBuffer> workspace,
                   float scale_value, float bias_value) {
  RowShape s;
  ParamView sv, bv;
  GradView gs, gb;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, dy, "dy"), check_same(x, *dx, "dx"),
                              param_view(scale, s, "scale", &sv), param_view(bias, s, "bias", &bv),
                              grad_view(*dscale, s, "dscale", &gs), grad_view(*dbias, s, "dbias", &gb)});
      err.failure()) {
    return err;
  }
  if (s.rows == 0) {
    return first_error({zero_grad(stream, gs, s.cols, "gelu_bwd"), zero_grad(stream, gb, s.cols, "gelu_bwd")});
  }
  if (s.cols == 0) return ffi::Error::Success();
  DeviceInfo dev;
  if (auto err = device_info(&dev); err.failure()) return err;
  return dispatch_float(x.element_type(), [&](auto tag) {
    using T = elem_t<decltype(tag)>;
    const T* xp = static_cast<const T*>(x.untyped_data());
    const T* dyp = static_cast<const T*>(dy.untyped_data());
    T* dxp = static_cast<T*>(dx->untyped_data());
    const PartialsView ws = partials_view(*workspace, s, gs, gb);
    if (ws.data != nullptr) {
      const bool vec = vectorizable<T>(s.cols, {xp, dyp, dxp, sv.data, bv.data});
      if (auto err = with_vec<T>(vec, [&](auto v) {
            constexpr int V = decltype(v)::value;
            constexpr int K = kGeluPacks<V>;
            const int64_t packs = s.cols / V;
            const int tpr = std::min(team_size(packs, K), kTeamThreads);
            const int64_t tiles = ceil_div(packs, int64_t{tpr} * K);
            float *a, *b;
            partial_slabs(ws, gs, gb, &a, &b);
            const size_t smem = static_cast<size_t>((a != nullptr) + (b != nullptr)) *
                                partial_slab_floats<V, K>() * sizeof(float);
            return launch(gelu_bwd_partials_kernel<T, V>,
                          dim3(static_cast<unsigned>(ws.groups * ws.per_group * tiles)), dim3(kTeamThreads),
                          smem, stream, "gelu_bwd", xp, sv, bv, scale_value, bias_value, dyp, dxp, s.rows,
                          s.cols, tpr, tiles, ws.groups, ws.per_group, a, b);
          });
          err.failure()) {
        return err;
      }
      return sum_partials(stream, ws, s.cols, gs, gb, "gelu_bwd");
    }
    if (gs.data != nullptr || gb.data != nullptr) {  // no usable workspace: re-reading column sums
      const GeluGradElem<T> elem{xp, dyp, dxp, sv, bv, scale_value, bias_value, s.cols};
      return launch_column_sums(stream, elem, s.cols, gs, gb, "gelu_bwd");
    }
    return with_param_mode_and_vec<T>(sv, bv, s, {xp, dyp, dxp, sv.data, bv.data}, [&](auto mode, auto vec) {
      constexpr ParamMode M = decltype(mode)::value;
      constexpr int V = decltype(vec)::value;
      return launch(gelu_bwd_kernel<T, V, M>, elementwise_grid(dev, s.size() / V, kBatch<T, V, 2, kParamBatchRegs>),
                    dim3(kElemBlock), 0, stream, "gelu_bwd", xp, sv, bv, scale_value, bias_value, dyp, dxp,
                    s.rows, s.cols);
    });
  });
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluFwdCuda, jm::cuda::GeluFwd,
                              jm::bind::gelu_fwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluBwdCuda, jm::cuda::GeluBwd,
                              jm::bind::gelu_bwd(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmGeluJvpCuda, jm::cuda::GeluJvp,
                              jm::bind::gelu_jvp(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
