// RMS normalization over the last dim on CUDA, with the math of cpu/rms_norm.cpp: x is
// (rows, D) contiguous; one block per row (grid-stride over the rows), its threads striding
// along the row and combining their partial sums by warp shuffles and a shared array of one
// value per warp. Sums run in the input's dtype, as on the CPU. The weight's gradient, a sum
// over rows, is summed per column over interleaved chunks of rows into scratch memory, then
// the chunks are added: no atomics, the same result on every run.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"

#include <algorithm>

namespace dtrain::detail {
namespace {

constexpr int kMaxRowThreads = 256;  // a multiple of the warp size
constexpr std::int64_t kWeightChunks = 128;

// Threads per row: the warps that cover D, up to kMaxRowThreads.
int row_threads(std::int64_t d) { return std::max(32, gpu::pow2_at_least(d, kMaxRowThreads)); }

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

template <class T>
__global__ void forward_kernel(const T* x, const T* w, T eps, std::int64_t rows, std::int64_t d, T* y, T* rstd) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * d;
    T* yr = y + row * d;
    T squares = 0;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) squares += xr[j] * xr[j];
    const T s = T(1) / ::sqrt(block_sum(squares) / static_cast<T>(d) + eps);
    if (threadIdx.x == 0) rstd[row] = s;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) yr[j] = w ? xr[j] * s * w[j] : xr[j] * s;
  }
}

// Per row, with h = g * w: dx = s * h - x * s^3 * sum(h * x) / D.
template <class T>
__global__ void backward_kernel(const T* g, const T* x, const T* rstd, const T* w, std::int64_t rows, std::int64_t d,
                                T* gx) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *gr = g + row * d, *xr = x + row * d;
    T* dr = gx + row * d;
    const T s = rstd[row];
    T dot = 0;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += (w ? gr[j] * w[j] : gr[j]) * xr[j];
    const T k = s * s * s * block_sum(dot) / static_cast<T>(d);
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) dr[j] = (w ? gr[j] * w[j] : gr[j]) * s - xr[j] * k;
  }
}

// partial[chunk, j] = the sum over rows chunk, chunk + chunks, ... of g * x * rstd at column j.
template <class T>
__global__ void weight_partial_kernel(const T* g, const T* x, const T* rstd, std::int64_t rows, std::int64_t d,
                                      std::int64_t chunks, T* partial) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (j >= d) return;
  T sum = 0;
  for (std::int64_t row = chunk; row < rows; row += chunks) sum += g[row * d + j] * x[row * d + j] * rstd[row];
  partial[chunk * d + j] = sum;
}

template <class T>
__global__ void sum_chunks_kernel(const T* partial, std::int64_t d, std::int64_t chunks, T* out) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  T sum = 0;
  for (std::int64_t c = 0; c < chunks; ++c) sum += partial[c * d + j];
  out[j] = sum;
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>(std::min(rows, gpu::kMaxBlocks)); }

}  // namespace

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  const std::int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  cuda::DeviceGuard guard(device_);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T><<<row_blocks(rows), row_threads(d), 0, stream_>>>(
        x.data<T>(), data_or_null<T>(weight), static_cast<T>(eps), rows, d, y.data<T>(), rstd.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                                    Tensor& grad_x, Tensor& grad_weight) {
  const std::int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  cuda::DeviceGuard guard(device_);
  dispatch_floating(x.dtype(), "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<T><<<row_blocks(rows), row_threads(d), 0, stream_>>>(
        grad_y.data<T>(), x.data<T>(), rstd.data<T>(), data_or_null<T>(weight), rows, d, grad_x.data<T>());
    DTRAIN_CUDA_CHECK(cudaGetLastError());
    if (!grad_weight.defined()) return;
    const std::int64_t chunks = std::min(rows, kWeightChunks);
    gpu::Scratch partial(*this, static_cast<std::size_t>(chunks * d) * sizeof(T));
    const unsigned column_blocks = static_cast<unsigned>((d + gpu::kThreads - 1) / gpu::kThreads);
    weight_partial_kernel<T><<<dim3(column_blocks, static_cast<unsigned>(chunks)), gpu::kThreads, 0, stream_>>>(
        grad_y.data<T>(), x.data<T>(), rstd.data<T>(), rows, d, chunks, partial.as<T>());
    DTRAIN_CUDA_CHECK(cudaGetLastError());
    sum_chunks_kernel<T>
        <<<column_blocks, gpu::kThreads, 0, stream_>>>(partial.as<T>(), d, chunks, grad_weight.data<T>());
    DTRAIN_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace dtrain::detail
