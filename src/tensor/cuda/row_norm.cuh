// What the CUDA row normalizations (rms_norm.cu, layer_norm.cu) share: x is (rows, D)
// contiguous; one block per row (grid-stride over the rows), its threads striding along the
// row and combining their partial sums by warp shuffles and a shared array of one value per
// warp. A parameter's gradient, a sum over rows, is summed per column over interleaved chunks
// of rows into scratch memory, then the chunks are added (sum_chunks_kernel): no atomics, the
// same result on every run.
#pragma once

#include "tensor/cuda/kernel_utils.cuh"

#include <algorithm>
#include <cstdint>

namespace dtrain::detail::gpu {

inline constexpr int kMaxRowThreads = 256;  // a multiple of the warp size
inline constexpr std::int64_t kWeightChunks = 128;

// Threads per row: the warps that cover D, up to kMaxRowThreads.
inline int row_threads(std::int64_t d) { return std::max(32, pow2_at_least(d, kMaxRowThreads)); }
inline unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>(std::min(rows, kMaxBlocks)); }
// Column blocks of kThreads over D, for the chunked parameter-gradient kernels.
inline unsigned column_blocks(std::int64_t d) { return static_cast<unsigned>((d + kThreads - 1) / kThreads); }

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// The block-wide total of every thread's v; every thread gets it. blockDim.x is a multiple
// of 32 and every thread of the block calls this.
template <class T>
__device__ T block_sum(T v) {
  __shared__ T warps[kMaxRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += warps[w];
  __syncthreads();  // before a second call overwrites warps
  return total;
}

// out[j] = the sum over the chunks of partial[chunk, j], in chunk order.
template <class T>
__global__ void sum_chunks_kernel(const T* partial, std::int64_t d, std::int64_t chunks, T* out) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  T sum = 0;
  for (std::int64_t c = 0; c < chunks; ++c) sum += partial[c * d + j];
  out[j] = sum;
}

}  // namespace dtrain::detail::gpu
