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

}  // namespace jm
