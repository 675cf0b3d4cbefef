// Softmax "auto" forward experiment (v14, A/B only): long rows in two passes with L2 as the row buffer.
// Pass 1 reads the row from HBM with an L2 evict-last hint (kKeep; else default caching) and merges
// (max, sum) per batch of B packs; one block reduction; pass 2 re-reads the row, expected from L2, with
// evict-first hints and writes y. HBM traffic stays one read and one write per element as long as the
// rows in flight (grid x row bytes) fit L2 (60 MB on the H200), and no shared memory, cluster or DSMEM
// limits the CTAs: the host sizes the grid (CTAs per SM) from the row's bytes.
#pragma once

#include "softmax_rows.cuh"

namespace jm::cuda::smx {

// A 16-byte load under an L2 evict-last policy (createpolicy; the line outlives evict-normal and
// evict-first lines, y's streaming stores among them).
template <int V, typename T>
__device__ __forceinline__ Pack<T, V> load_keep(const T* base, int64_t pack, uint64_t policy) {
  static_assert(sizeof(Pack<T, V>) == 16);
  uint4 u;
  asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
      : "l"(reinterpret_cast<const Pack<T, V>*>(base) + pack), "l"(policy));
  Pack<T, V> out;
  memcpy(&out, &u, sizeof(u));
  return out;
}

__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// One row per CTA of NT threads, or per cluster of k (kCluster: CTA r takes the r-th of k contiguous
// slices of the row's body; the row's (max, sum) merges over the cluster by its barrier, or by messages
// where kMail), persistent grid. NT is a compile-time stride: a batch's addresses are one base plus
// immediates, so the 64-register bound holds B = 8 packs in pass 1. The same -inf / NaN rules as the
// register rows (a NaN makes the row NaN, an all -inf row is NaN, other -inf entries give 0).
template <typename T, int NT, int B, bool kKeep, bool kCluster = false, bool kMail = false>
__global__ void __launch_bounds__(NT, kMaxBlock / NT)
    softmax_fwd_l2_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int cols) {
  static_assert(kCluster || !kMail, "messages merge over a cluster");
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const int tid = static_cast<int>(threadIdx.x);
  uint64_t policy = 0;
  if constexpr (kKeep) policy = l2_evict_last_policy();
  __shared__ ClusterMail<MaxSum> mail;
  if constexpr (kMail) {
    mail_init(mail);
    __syncthreads();
    cluster_sync();  // every CTA's barriers are initialized before any send
  }
  const int k = kCluster ? cluster_blocks() : 1;
  const int rank = kCluster ? cluster_rank() : 0;
  int parity = 0;
  int n = 0;  // this CTA's row count (mail_merge's inbox and phase)
  for (int64_t row = blockIdx.x / k; row < rows; row += gridDim.x / k, parity ^= 1, ++n) {
    const T* xr = x + row * int64_t{cols};
    T* yr = y + row * int64_t{cols};
    const RowSpan<T, V, int> sp(xr, cols, true);
    const T* xb = xr + sp.head;
    T* yb = yr + sp.head;
    const int chunk = (sp.body + k - 1) / k;
    const int lo = min(rank * chunk, sp.body);
    const int hi = min(lo + chunk, sp.body);
    const bool edges = rank == 0;  // the head and tail: CTA 0's

    MaxSum acc = MergeOp::identity();
    for (int i0 = lo + tid; i0 < hi; i0 += B * NT) {
      P p[B];
#pragma unroll
      for (int b = 0; b < B; ++b) {
        if (i0 + b * NT < hi) p[b] = kKeep ? load_keep<V>(xb, i0 + b * NT, policy) : load_raw<V>(xb, i0 + b * NT);
      }
      float bm = -INFINITY;
#pragma unroll
      for (int b = 0; b < B; ++b) {
        if (i0 + b * NT < hi) bm = pack_max_nan(p[b], bm);
      }
      const float ref = safe_max(bm);
      float s = 0.0f;
#pragma unroll
      for (int b = 0; b < B; ++b) {
        if (i0 + b * NT < hi) {
          float v[V];
          unpack_fresh(p[b], v);
#pragma unroll
          for (int j = 0; j < V; ++j) s += ex2_ftz((v[j] - ref) * kLog2e);
        }
      }
      acc = MergeOp()(acc, MaxSum{bm, s});
    }
    for (int e = tid; edges && e < sp.edges(); e += NT) {
      const float v = to_float(xr[sp.edge_col(e, cols)]);
      acc = MergeOp()(acc, MaxSum{v, ex2_ftz((v - safe_max(v)) * kLog2e)});
    }
    MaxSum ms = block_reduce_rows<MergeOp>(acc, parity);
    if constexpr (kMail) {
      ms = mail_merge<MergeOp>(mail, ms, n);
    } else if constexpr (kCluster) {
      ms = cluster_reduce<MergeOp>(ms, parity);
    }
    const float inv = 1.0f / ms.s;

    // Pass 2 reads L2 (shorter latency): half the batch keeps the 64-register bound without spills.
    constexpr int B2 = B > 4 ? B / 2 : B;
    for (int i0 = lo + tid; i0 < hi; i0 += B2 * NT) {
      P p[B2];
#pragma unroll
      for (int b = 0; b < B2; ++b) {
        if (i0 + b * NT < hi) p[b] = load_stream<V>(xb, i0 + b * NT);
      }
#pragma unroll
      for (int b = 0; b < B2; ++b) {
        if (i0 + b * NT < hi) {
          float v[V];
          unpack_fresh(p[b], v);
          P out;
#pragma unroll
          for (int j = 0; j < V; ++j) out.v[j] = from_float<T>(ex2_ftz((v[j] - ms.m) * kLog2e) * inv);
          store_stream<V>(yb, i0 + b * NT, out);
        }
      }
    }
    for (int e = tid; edges && e < sp.edges(); e += NT) {
      const int c = sp.edge_col(e, cols);
      yr[c] = from_float<T>(ex2_ftz((to_float(xr[c]) - ms.m) * kLog2e) * inv);
    }
  }
  if constexpr (kCluster) cluster_sync();  // keep this CTA's shared memory alive for the others' reads
}

}  // namespace jm::cuda::smx
