// Forward mode of LayerNorm and RMSNorm on CUDA (JmLayerNormJvpCuda, JmRmsNormJvpCuda): y and its tangent
//   ty = scale * rstd * (t - mean(t) - xhat * mean(t * xhat)) + xhat * tscale + tbias   (RMSNorm: no mean(t), no tbias)
// from x and its tangent t, each read from HBM once: four passes of memory, where the forward kernel and the tangent
// map that XLA fuses take five. The general row kernel's geometry (cuda_row_launch.cuh: tpr threads per row, the grid
// striding over rows), its rows cached in shared memory where they fit, else re-read (L2 hits). The statistics are
// the forward's in form (norm_fwd.cu's v1 kernel): LayerNorm's centred on the first pass's mean m1 (d = x - m1, var =
// (Σd² - (Σd)²/C) / C: no E[x²] - E[x]² cancellation), so x = 1e4 + 1e-2 noise keeps its accuracy; its y is not the
// forward kernel's bits, whose kernels sum in another order.
#include "cuda_common.cuh"
#include "bindings.h"
#include "handlers.h"

namespace ffi = xla::ffi;

namespace jm::cuda {
namespace {

struct JvpParams {
  ParamView scale, bias, tscale, tbias;  // bias and tbias absent (data nullptr) for RMSNorm
};

template <typename T, int V, bool kRms, typename Ty>
__global__ void __launch_bounds__(kMaxRowThreads, 1)
    norm_jvp_kernel(const T* __restrict__ x, const T* __restrict__ tx, JvpParams p, Ty* __restrict__ y,
                    Ty* __restrict__ ty, int64_t rows, int64_t cols, float epsilon, RowPlan plan) {
  const RowSlot slot(plan);
  T* cache = slot.cache<T>(plan, 2 * cols);  // x's row, then t's
  const int64_t packs = cols / V;
  const float fcols = static_cast<float>(cols);
  for_slot_rows(slot, rows, [&](int64_t row, bool active) {
    const int64_t n = active ? packs : 0;
    const T* xr = x + row * cols;
    const T* tr = tx + row * cols;

    // Pass 1 (HBM): LayerNorm Σx; RMSNorm Σx² and Σt·x, all it needs.
    float first[2] = {0.0f, 0.0f};
    for_row_packs<V>({xr, tr}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& q) {
      if (cache != nullptr) {
        store_raw<V>(cache, i, q[0]);
        store_raw<V>(cache + cols, i, q[1]);
      }
      float v[V], t[V];
      unpack(q[0], v);
      unpack(q[1], t);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        first[0] += kRms ? v[j] * v[j] : v[j];
        if constexpr (kRms) first[1] += t[j] * v[j];
      }
    });
    row_reduce(first, plan.tpr, SumOp{});

    const T* xs = cache != nullptr ? cache : xr;
    const T* ts = cache != nullptr ? cache + cols : tr;
    float shift = 0.0f, dmean = 0.0f, rstd, mt = 0.0f, mtx;  // xhat = ((x - shift) - dmean) * rstd
    if constexpr (kRms) {
      rstd = 1.0f / sqrtf(first[0] / fcols + epsilon);
      mtx = first[1] * rstd / fcols;
    } else {
      // Pass 2 (the cache): Σd, Σd², Σt, Σt·d with d = x - shift.
      shift = first[0] / fcols;
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for_row_packs<V>({xs, ts}, n, slot.lane, plan.tpr, [&](int64_t, const auto& q) {
        float v[V], t[V];
        unpack(q[0], v);
        unpack(q[1], t);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float dv = v[j] - shift;
          d[0] += dv;
          d[1] += dv * dv;
          d[2] += t[j];
          d[3] += t[j] * dv;
        }
      });
      row_reduce(d, plan.tpr, SumOp{});
      dmean = d[0] / fcols;
      rstd = 1.0f / sqrtf(clamp_var((d[1] - d[0] * dmean) / fcols) + epsilon);
      mt = d[2] / fcols;
      mtx = (d[3] - dmean * d[2]) * rstd / fcols;  // Σt·xhat = rstd (Σt·d - dmean Σt)
    }

    // The output pass: y and its tangent.
    const float* sc = param_row(p.scale, row, cols);
    const float* bi = param_row(p.bias, row, cols);
    const float* tsc = param_row(p.tscale, row, cols);
    const float* tbi = param_row(p.tbias, row, cols);
    Ty* yr = y + row * cols;
    Ty* tyr = ty + row * cols;
    for_row_packs<V, kParamBatchRegs>({xs, ts}, n, slot.lane, plan.tpr, [&](int64_t i, const auto& q) {
      float v[V], t[V], s[V], b[V], dts[V], dtb[V];
      unpack(q[0], v);
      unpack(q[1], t);
      load_param<V>(sc, i, 1.0f, s);
      load_param<V>(bi, i, 0.0f, b);
      load_param<V>(tsc, i, 0.0f, dts);
      load_param<V>(tbi, i, 0.0f, dtb);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float h = ((v[j] - shift) - dmean) * rstd;
        v[j] = h * s[j] + b[j];
        t[j] = s[j] * (rstd * (t[j] - mt - h * mtx)) + h * dts[j] + dtb[j];
      }
      store_pack<V>(yr, i, v);
      store_pack<V>(tyr, i, t);
    });
  });
}

// The launch plan (JAX_MEMOPS_NORM_JVP, an A/B switch). v1 plans as the 64-register row kernels do, up to 512 threads a
// row. v2 plans for what this kernel's 88-122 registers allow, 512 threads an SM, with rows of at most 256 threads, so
// that two rows share an SM where v1 left one. v3, the default: v2 up to 8 packs a thread (2048 packs a row), v1
// beyond. Measured on an H100 (RESULTS.md, the thirty-ninth session; 2^26 elements, two rounds): v2 against v1
// LayerNorm bf16 12288 +51% (58% of the copy -> 84%), bf16 16384 +30%, f32 8192 +19%, RMSNorm bf16 12288 +29%; but f32
// 12288 -4..-10% and f32 16384 -27..-31% (12 and 16 packs a thread), where v3 keeps v1.
enum class NormJvpPlan { kV1, kV2, kV3 };

RowLimits norm_jvp_limits(int64_t packs) {
  static const NormJvpPlan v = env_choice("JAX_MEMOPS_NORM_JVP", {{"v1", NormJvpPlan::kV1}, {"v2", NormJvpPlan::kV2}},
                                          NormJvpPlan::kV3);
  const RowLimits two_rows{kMaxRowThreads / 2, kMaxRowThreads};
  if (v == NormJvpPlan::kV3) return packs <= 8 * two_rows.max_tpr ? two_rows : RowLimits{};
  return v == NormJvpPlan::kV2 ? two_rows : RowLimits{};
}

template <bool kRms>
ffi::Error norm_jvp(cudaStream_t stream, const char* what, const ffi::AnyBuffer& x, const ffi::AnyBuffer& tx,
                    const JvpParams& p, ffi::AnyBuffer& y, ffi::AnyBuffer& ty, float epsilon) {
  RowShape s;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (s.size() == 0) return ffi::Error::Success();
  return dispatch_float_pair(x.element_type(), y.element_type(), [&](auto tag, auto tag_y) {
    using T = elem_t<decltype(tag)>;
    using Ty = elem_t<decltype(tag_y)>;
    const T* xp = data_as<const T>(x);
    const T* txp = data_as<const T>(tx);
    Ty* yp = data_as<Ty>(y);
    Ty* typ = data_as<Ty>(ty);
    // x's pack width for every buffer, as the forward's v1 kernel: y's packs hold as many elements, of Ty.
    const bool vec = vectorizable<T>(s.cols, {xp, txp, yp, typ, p.scale.data, p.bias.data, p.tscale.data,
                                              p.tbias.data});
    return with_vec<T>(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      return launch_rows(norm_jvp_kernel<T, V, kRms, Ty>, norm_jvp_limits(s.cols / V), stream, s, V,
                         2 * s.cols * int64_t{sizeof(T)}, what, xp, txp, p, yp, typ, s.rows, s.cols, epsilon);
    });
  });
}

ffi::Error LayerNormJvp(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer bias,
                        ffi::AnyBuffer tx, ffi::AnyBuffer tscale, ffi::AnyBuffer tbias, ffi::Result<ffi::AnyBuffer> y,
                        ffi::Result<ffi::AnyBuffer> ty, float epsilon) {
  RowShape s;
  JvpParams p;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, tx, "tx"), check_size(x, *y, "y"), check_same(*y, *ty, "ty"),
                              param_view(scale, s, "scale", &p.scale), param_view(bias, s, "bias", &p.bias),
                              param_view(tscale, s, "tscale", &p.tscale), param_view(tbias, s, "tbias", &p.tbias)});
      err.failure()) {
    return err;
  }
  return norm_jvp<false>(stream, "layer_norm_jvp", x, tx, p, *y, *ty, epsilon);
}

ffi::Error RmsNormJvp(cudaStream_t stream, ffi::AnyBuffer x, ffi::AnyBuffer scale, ffi::AnyBuffer tx,
                      ffi::AnyBuffer tscale, ffi::Result<ffi::AnyBuffer> y, ffi::Result<ffi::AnyBuffer> ty,
                      float epsilon) {
  RowShape s;
  JvpParams p;
  if (auto err = row_shape(x, "x", &s); err.failure()) return err;
  if (auto err = first_error({check_same(x, tx, "tx"), check_size(x, *y, "y"), check_same(*y, *ty, "ty"),
                              param_view(scale, s, "scale", &p.scale), param_view(tscale, s, "tscale", &p.tscale)});
      err.failure()) {
    return err;
  }
  return norm_jvp<true>(stream, "rms_norm_jvp", x, tx, p, *y, *ty, epsilon);
}

}  // namespace
}  // namespace jm::cuda

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLayerNormJvpCuda, jm::cuda::LayerNormJvp,
                              jm::bind::layer_norm_jvp(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(JmRmsNormJvpCuda, jm::cuda::RmsNormJvp,
                              jm::bind::rms_norm_jvp(jm::cuda::cuda_binding()),
                              {ffi::Traits::kCmdBufferCompatible});
