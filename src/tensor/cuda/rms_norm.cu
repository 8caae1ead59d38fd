// RMS normalization over the last dim on CUDA, with the math of cpu/rms_norm.cpp and the
// layout of row_norm.cuh (a block per row; the weight's gradient summed in chunks of rows).
// Sums run in the input's dtype, as on the CPU.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/row_norm.cuh"

#include <algorithm>

namespace dtrain::detail {
namespace {

using gpu::block_sum;
using gpu::data_or_null;

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

}  // namespace

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, Tensor& y, Tensor& rstd) {
  const std::int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  cuda::DeviceGuard guard(device_);
  dispatch_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T><<<gpu::row_blocks(rows), gpu::row_threads(d), 0, stream_>>>(
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
    backward_kernel<T><<<gpu::row_blocks(rows), gpu::row_threads(d), 0, stream_>>>(
        grad_y.data<T>(), x.data<T>(), rstd.data<T>(), data_or_null<T>(weight), rows, d, grad_x.data<T>());
    DTRAIN_CUDA_CHECK(cudaGetLastError());
    if (!grad_weight.defined()) return;
    const std::int64_t chunks = std::min(rows, gpu::kWeightChunks);
    gpu::Scratch partial(*this, static_cast<std::size_t>(chunks * d) * sizeof(T));
    const unsigned column_blocks = gpu::column_blocks(d);
    weight_partial_kernel<T><<<dim3(column_blocks, static_cast<unsigned>(chunks)), gpu::kThreads, 0, stream_>>>(
        grad_y.data<T>(), x.data<T>(), rstd.data<T>(), rows, d, chunks, partial.as<T>());
    DTRAIN_CUDA_CHECK(cudaGetLastError());
    gpu::sum_chunks_kernel<T>
        <<<column_blocks, gpu::kThreads, 0, stream_>>>(partial.as<T>(), d, chunks, grad_weight.data<T>());
    DTRAIN_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace dtrain::detail
