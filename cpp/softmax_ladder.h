// The seed's softmax forward ladder (cpp/softmax_ladder.cu): seven kernels, v1..v7, which are the
// `algorithm` indices 1..7 of jm.SOFTMAX_ALGORITHMS (index 0, "auto", is the kernel of softmax_fwd.cu).
#pragma once

#include <cstdint>

#include "cuda_common.cuh"

namespace jm::cuda {

inline constexpr int64_t kSoftmaxLadderFirst = 1;
inline constexpr int64_t kSoftmaxLadderLast = 7;

// Launches version `algorithm` (1..7) of the ladder on x -> y (rows of s.cols elements of `dtype`).
// No allocation, no synchronization (CUDA-graph compatible); InvalidArgument for another index or an
// unsupported dtype, Internal for a failed launch.
ffi::Error launch_softmax_ladder(int64_t algorithm, cudaStream_t stream, ffi::DataType dtype,
                                 const void* x, void* y, RowShape s);

}  // namespace jm::cuda
