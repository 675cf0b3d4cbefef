// CUDA helpers shared by the jax_memops kernels (softmax, the norms, GELU, the chain), one header per theme;
// a kernel file includes this one, or only the pieces it needs (each includes what it uses):
//   cuda_base.cuh         the XLA FFI headers, element types, error checks, device properties, launches, grids
//   cuda_pack.cuh         16-byte packs: loads and stores, batched loads, unaligned rows' head / tail, parameter loads
//   cuda_reduce.cuh       warp, block and row reductions (sum, NaN-propagating max), ex2
//   cuda_bulk.cuh         bulk copies into shared memory, mbarriers, cluster messages, L2 prefetches (sm_90)
//   cuda_row_launch.cuh   the general row kernels' geometry and launch (the norms' fallback)
//   cuda_elementwise.cuh  elementwise kernels: grid, (row, column) cursor, parameter modes
//   cuda_column_sums.cuh  deterministic column sums (parameter gradients without per-block partials)
#pragma once

#include "cuda_base.cuh"
#include "cuda_pack.cuh"
#include "cuda_reduce.cuh"
#include "cuda_bulk.cuh"
#include "cuda_row_launch.cuh"
#include "cuda_elementwise.cuh"
#include "cuda_column_sums.cuh"
