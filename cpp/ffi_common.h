// Shapes, parameter views and the one dtype dispatch shared by the CPU and CUDA handlers.
//
// Conventions of every jax_memops custom call (the Python primitives guarantee them, the handlers check):
//   * a "row" tensor has shape (..., C): rows = product of the leading dims, cols = C (rank >= 1).
//   * a "param" (scale, bias) is f32 with 0 elements (absent) or G*C elements (G >= 1, G divides rows):
//     rows are split into G contiguous groups, row r uses param[(r / (rows / G)) * C ...]. G > 1 only
//     appears under vmap of batched parameters.
//   * a "param gradient" output is f32 with 0 elements (not wanted) or G*C elements: the sum over each
//     of G contiguous row groups (G > 1 under vmap). Written deterministically, zeros when rows == 0.
//   * "row statistics" (mean, rstd) are f32 with one value per row. LayerNorm's saved mean is taken
//     relative to the row's first element: xhat = (x - x[row, 0] - mean) * rstd. x - x[row, 0] is exact
//     for nearby values, so a large mean with a tiny variance keeps its accuracy in the backward too.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "xla/ffi/api/ffi.h"

namespace jm {

namespace ffi = xla::ffi;

struct RowShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t size() const { return rows * cols; }
};

inline ffi::Error row_shape(const ffi::AnyBuffer& x, const char* name, RowShape* out) {
  auto dims = x.dimensions();
  if (dims.size() < 1) {
    return ffi::Error::InvalidArgument(std::string(name) + " must have rank >= 1");
  }
  out->cols = dims.back();
  out->rows = 1;
  for (size_t i = 0; i + 1 < dims.size(); ++i) out->rows *= dims[i];
  return ffi::Error::Success();
}

// A read-only per-column parameter split into row groups; data == nullptr means "absent".
struct ParamView {
  const float* data = nullptr;
  int64_t rows_per_group = 1;
};

// A per-column gradient output split into row groups; data == nullptr means "not wanted".
struct GradView {
  float* data = nullptr;
  int64_t groups = 0;
  int64_t rows_per_group = 1;
};

namespace detail {
// Number of row groups a G*C-element f32 buffer describes; checks that G divides the rows.
inline ffi::Error groups_of(const ffi::AnyBuffer& p, RowShape s, const char* name, int64_t* groups) {
  if (p.element_type() != ffi::DataType::F32) {
    return ffi::Error::InvalidArgument(std::string(name) + " must be float32");
  }
  int64_t n = static_cast<int64_t>(p.element_count());
  if (s.cols == 0 || n % s.cols != 0 || s.rows % (n / s.cols) != 0) {
    return ffi::Error::InvalidArgument(std::string(name) +
                                       " must hold G*C elements with G dividing the rows");
  }
  *groups = n / s.cols;
  return ffi::Error::Success();
}
}  // namespace detail

inline ffi::Error param_view(const ffi::AnyBuffer& p, RowShape s, const char* name, ParamView* out) {
  *out = ParamView{};
  if (p.element_count() == 0) return ffi::Error::Success();
  int64_t groups = 0;
  if (auto err = detail::groups_of(p, s, name, &groups); err.failure()) return err;
  out->data = static_cast<const float*>(p.untyped_data());
  out->rows_per_group = s.rows / groups > 0 ? s.rows / groups : 1;
  return ffi::Error::Success();
}

inline ffi::Error grad_view(const ffi::AnyBuffer& p, RowShape s, const char* name, GradView* out) {
  *out = GradView{};
  if (p.element_count() == 0) return ffi::Error::Success();
  if (auto err = detail::groups_of(p, s, name, &out->groups); err.failure()) return err;
  out->data = static_cast<float*>(p.untyped_data());
  out->rows_per_group = s.rows / out->groups;
  return ffi::Error::Success();
}

// The workspace of a backward kernel's parameter-gradient partials: an f32 result of shape (S, G*P, C),
// S = the number of wanted gradients (slab 0 for the first wanted of (dscale, dbias), slab 1 for the
// second), G their common row groups, P partial rows per group (jax_memops._primitive.partial_rows).
// Partial row g*P + j of a slab holds the column sums over the j-th of P contiguous, balanced runs of
// group g's rows (see partial_range). data == nullptr: no usable workspace (no gradient wanted, the
// gradients' groupings differ, or a shape this library did not make): the kernels then take a path
// that needs none.
struct PartialsView {
  float* data = nullptr;
  int64_t groups = 0;     // G
  int64_t per_group = 0;  // P
  int64_t slab = 0;       // G*P*C: elements per slab
};

inline PartialsView partials_view(ffi::AnyBuffer& ws, RowShape s, const GradView& a, const GradView& b) {
  PartialsView out;
  const int64_t wanted = (a.data != nullptr) + (b.data != nullptr);
  if (wanted == 0 || (a.data != nullptr && b.data != nullptr && a.groups != b.groups)) return out;
  const int64_t groups = a.data != nullptr ? a.groups : b.groups;
  auto dims = ws.dimensions();
  if (ws.element_type() != ffi::DataType::F32 || dims.size() != 3 || dims[0] != wanted ||
      dims[2] != s.cols || groups <= 0 || dims[1] % groups != 0) {
    return out;
  }
  const int64_t per_group = dims[1] / groups;
  if (per_group < 1 || per_group > s.rows / groups) return out;  // every partial covers >= 1 row
  out.data = static_cast<float*>(ws.untyped_data());
  out.groups = groups;
  out.per_group = per_group;
  out.slab = dims[1] * s.cols;
  return out;
}

// Rows [*begin, *end) of partial j of a group of n rows split into p balanced runs (n >= p >= 1).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline void partial_range(int64_t n, int64_t p, int64_t j, int64_t* begin, int64_t* end) {
  *begin = j * n / p;  // j * n < 2^63 for any tensor that fits in memory
  *end = (j + 1) * n / p;
}

// Row statistics (mean, rstd): f32, one per row.
inline ffi::Error check_stats(const ffi::AnyBuffer& p, RowShape s, const char* name) {
  if (p.element_type() != ffi::DataType::F32 || static_cast<int64_t>(p.element_count()) != s.rows) {
    return ffi::Error::InvalidArgument(std::string(name) + " must be float32 with one value per row");
  }
  return ffi::Error::Success();
}

inline ffi::Error check_same(const ffi::AnyBuffer& a, const ffi::AnyBuffer& b, const char* what) {
  if (a.element_type() != b.element_type() || a.element_count() != b.element_count()) {
    return ffi::Error::InvalidArgument(std::string(what) + ": dtype and size must match the input");
  }
  return ffi::Error::Success();
}

// The norms' y (forward) and dy (backward) may have another float dtype than x (their `dtype` argument): the
// size alone must match; the dtype dispatch rejects what is not a float.
inline ffi::Error check_size(const ffi::AnyBuffer& a, const ffi::AnyBuffer& b, const char* what) {
  if (a.element_count() != b.element_count()) {
    return ffi::Error::InvalidArgument(std::string(what) + ": size must match the input");
  }
  return ffi::Error::Success();
}

// A buffer's data as the element type T that the dtype dispatch picked (const T for an input).
template <typename T>
T* data_as(const ffi::AnyBuffer& b) {
  return static_cast<T*>(b.untyped_data());
}

template <ffi::DataType D>
struct DTypeTag {
  static constexpr ffi::DataType value = D;
};

// The one dtype dispatch: calls f(DTypeTag<D>{}) for the supported float dtypes. Each side (CPU,
// CUDA) maps the tag to its own element type.
template <typename F>
ffi::Error dispatch_float(ffi::DataType dtype, F&& f) {
  switch (dtype) {
    case ffi::DataType::F32:
      return f(DTypeTag<ffi::DataType::F32>{});
    case ffi::DataType::BF16:
      return f(DTypeTag<ffi::DataType::BF16>{});
    case ffi::DataType::F16:
      return f(DTypeTag<ffi::DataType::F16>{});
    default:
      return ffi::Error::InvalidArgument("unsupported dtype: expected float32, bfloat16 or float16");
  }
}

// The dispatch over a pair of dtypes (x's and the norms' y or dy): f(tag_a, tag_b), every pair of the three.
template <typename F>
ffi::Error dispatch_float_pair(ffi::DataType a, ffi::DataType b, F&& f) {
  return dispatch_float(a, [&](auto ta) { return dispatch_float(b, [&](auto tb) { return f(ta, tb); }); });
}

}  // namespace jm
