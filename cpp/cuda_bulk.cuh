// Bulk copies into shared memory and messages between the CTAs of a cluster (sm_90: cp.async.bulk, mbarrier,
// st.async; on older targets they trap), and bulk prefetches into L2.
#pragma once

#include "cuda_base.cuh"

namespace jm::cuda {

// One thread issues a 1-D bulk copy global -> its CTA's shared memory and announces its byte count on
// an mbarrier (arrive + expect_tx); the copy engine completes the transaction; any thread waits for the
// barrier's phase. Addresses and sizes must be multiples of 16 bytes; one phase takes < 2^20 bytes.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define JM_BULK_COPY 1
#else
#define JM_BULK_COPY 0
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Initializes an mbarrier for one arrival per phase, visible to the async proxy and the cluster
// (call from one thread, then a block barrier). Both fences: fence.mbarrier_init (CUTLASS's
// fence_barrier_init) releases the init at cluster scope; fence.proxy.async.shared::cta is the CUDA
// programming guide's "make the initialized barrier visible in the async proxy" (the bulk copies'
// complete_tx is an async-proxy access of the barrier). Once per kernel: their cost does not matter.
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
#if JM_BULK_COPY
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// Orders this thread's earlier generic-proxy accesses of shared memory (after a block barrier: the
// block's) before later bulk copies into it.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if JM_BULK_COPY
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#else
  __trap();
#endif
}

// The one arrival of bar's current phase, expecting `bytes` of bulk copies (0: the phase completes now).
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
#if JM_BULK_COPY
  asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n\t}"
               ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Bulk copy of `bytes` from global `src` to shared `dst`, completing on `bar`; evict-first in L2 (the
// data is read once).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if JM_BULK_COPY
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
      ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

// An asynchronous prefetch of the 16-byte words inside [p, p + bytes) from HBM into L2 (sm_90:
// cp.async.bulk.prefetch.L2, in pieces of at most 64 KB; nothing on older targets). A hint that holds no registers or
// shared memory and that nothing waits for: the loads that later read those bytes hit L2. kKeep: the lines arrive with
// L2's evict_last priority (the softmax forward's since v50, RESULTS.md "v50"): kept ahead of the streaming lines until
// a read with another policy (bulk_load's evict_first) takes them.
template <bool kKeep = false>
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes) {
#if JM_BULK_COPY
  if (bytes <= 0) return;
  constexpr uint64_t kPiece = 64 * 1024;
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  const uint64_t end = (a + static_cast<uint64_t>(bytes)) & ~uint64_t{15};
  uint64_t policy = 0;
  if constexpr (kKeep) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  for (uint64_t s = (a + 15) & ~uint64_t{15}; s < end; s += kPiece) {
    const uint32_t n = static_cast<uint32_t>(end - s < kPiece ? end - s : kPiece);
    if constexpr (kKeep) {
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(s), "r"(n), "l"(policy)
                   : "memory");
    } else {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s), "r"(n) : "memory");
    }
  }
#endif
}

// This CTA's shared-memory address `local` (smem_addr) as the address of the same variable in cluster
// CTA `rank`'s shared memory.
__device__ __forceinline__ uint32_t cluster_map(uint32_t local, int rank) {
#if JM_BULK_COPY
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
#else
  __trap();
  return 0;
#endif
}

// Writes the two floats (a, b) (or the one float a) to `remote` (cluster_map: another CTA's shared
// memory, or this one's), completing 8 (4) bytes of transactions on that CTA's mbarrier `remote_bar`
// (cluster_map too): a one-way message, no round trip and no barrier with the receiver.
__device__ __forceinline__ void push_pair(uint32_t remote, float a, float b, uint32_t remote_bar) {
#if JM_BULK_COPY
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];"
               ::"r"(remote), "f"(a), "f"(b), "r"(remote_bar)
               : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void push_one(uint32_t remote, float a, uint32_t remote_bar) {
#if JM_BULK_COPY
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
               ::"r"(remote), "r"(__float_as_uint(a)), "r"(remote_bar)
               : "memory");
#else
  __trap();
#endif
}

// Blocks until bar has completed the phase of parity `parity` (0 for its 1st, 3rd, ... phase). A wait
// of over 2^35 cycles (~17 s at 1.98 GHz; generous for sanitizers and time slicing) traps: a protocol
// error becomes a launch failure, not a hung GPU.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if JM_BULK_COPY
  uint32_t done = 0;
  const long long start = clock64();
  do {
    if (clock64() - start > (1LL << 35)) __trap();
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
#else
  __trap();
#endif
}

}  // namespace jm::cuda
