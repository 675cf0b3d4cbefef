// Softmax "auto" fallback kernels for rows that no register class holds (longer than a cluster's
// capacity, or a device without clusters), and for buffers whose addresses differ modulo 16 (V = 1:
// scalar accesses). One block per row, persistent grid, 64-bit column indices: any row length works.
// Two passes over the row: the forward reads x twice (online max/sum, then normalize), the backward
// reads y and dy twice (dot, then dx). The first pass uses default caching so that part of the row
// may still be in L2 for the second, which reads with evict-first hints.
#pragma once

#include "softmax_rows.cuh"

namespace jm::cuda::smx {

// Packs per thread loaded before any is used: 64 bytes (forward), 32 bytes each of y and dy (backward)
// per thread, so that 16-bit packs converted to float still fit 64 registers.
constexpr int kStreamBatch = 4;  // the host's block sizing assumes this many f32 packs
template <typename T>
constexpr int kStreamFwdBatch = sizeof(T) == 4 ? 4 : 2;
template <typename T>
constexpr int kStreamBwdBatch = sizeof(T) == 4 ? 2 : 1;

// The (m, s) partial of V values (m their max, NaN-propagating).
template <int V>
__device__ __forceinline__ MaxSum pack_partial(const float (&v)[V]) {
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < V; ++j) m = MaxOp()(m, v[j]);
  const float mm = safe_max(m);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j) s += exp_e(v[j] - mm);
  return {m, s};
}

// y's and dy's packs at one index (the backward's batches for walk_batches, cuda_common.cuh).
template <typename T, int V>
struct PackPair {
  Pack<T, V> y, dy;
};

template <typename T, int V>
__global__ void __launch_bounds__(kMaxBlock, 1)
    softmax_fwd_stream_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {
  using P = Pack<T, V>;
  const int64_t tid = threadIdx.x;
  const int64_t nt = blockDim.x;
  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    const RowSpan<T, V, int64_t> sp(xr, cols, true);
    const T* xb = xr + sp.head;
    T* yb = yr + sp.head;

    MaxSum acc = MergeOp::identity();
    walk_batches<kStreamFwdBatch<T>>(
        sp.body, tid, nt, [&](int64_t i) { return load_raw<V>(xb, i); },
        [&](const P& p, int64_t) {
          float v[V];
          unpack(p, v);
          acc = MergeOp()(acc, pack_partial(v));
        });
    for (int64_t e = tid; e < sp.edges(); e += nt) {
      const float v[1] = {to_float(xr[sp.edge_col(e, cols)])};
      acc = MergeOp()(acc, pack_partial(v));
    }
    const MaxSum row_ms = block_reduce_rows<MergeOp>(acc, parity);
    const float inv = 1.0f / row_ms.s;

    walk_batches<kStreamFwdBatch<T>>(
        sp.body, tid, nt, [&](int64_t i) { return load_stream<V>(xb, i); },
        [&](const P& p, int64_t i) {
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(exp_e(to_float(p.v[j]) - row_ms.m) * inv);
          store_stream<V>(yb, i, out);
        });
    for (int64_t e = tid; e < sp.edges(); e += nt) {
      const int64_t c = sp.edge_col(e, cols);
      yr[c] = from_float<T>(exp_e(to_float(xr[c]) - row_ms.m) * inv);
    }
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(kMaxBlock, 1)
    softmax_bwd_stream_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                       int64_t cols) {
  using P = Pack<T, V>;
  const int64_t tid = threadIdx.x;
  const int64_t nt = blockDim.x;
  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const int64_t offset = row * cols;
    const RowSpan<T, V, int64_t> sp(y + offset, cols, true);
    const T* yr = y + offset;
    const T* dyr = dy + offset;
    T* dxr = dx + offset;

    float dot = 0.0f;
    walk_batches<kStreamBwdBatch<T>>(
        sp.body, tid, nt,
        [&](int64_t i) { return PackPair<T, V>{load_raw<V>(yr + sp.head, i), load_raw<V>(dyr + sp.head, i)}; },
        [&](const PackPair<T, V>& p, int64_t) {
#pragma unroll
          for (int j = 0; j < V; ++j) dot += to_float(p.y.v[j]) * to_float(p.dy.v[j]);
        });
    for (int64_t e = tid; e < sp.edges(); e += nt) {
      const int64_t c = sp.edge_col(e, cols);
      dot += to_float(yr[c]) * to_float(dyr[c]);
    }
    dot = block_reduce_rows<AddOp>(dot, parity);

    walk_batches<kStreamBwdBatch<T>>(
        sp.body, tid, nt,
        [&](int64_t i) { return PackPair<T, V>{load_stream<V>(yr + sp.head, i), load_stream<V>(dyr + sp.head, i)}; },
        [&](const PackPair<T, V>& p, int64_t i) {
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(to_float(p.y.v[j]) * (to_float(p.dy.v[j]) - dot));
          store_stream<V>(dxr + sp.head, i, out);
        });
    for (int64_t e = tid; e < sp.edges(); e += nt) {
      const int64_t c = sp.edge_col(e, cols);
      dxr[c] = from_float<T>(to_float(yr[c]) * (to_float(dyr[c]) - dot));
    }
  }
}

}  // namespace jm::cuda::smx
