// Layer normalization over the last dim on CUDA, with the math of cpu/layer_norm.cpp and the
// layout of row_norm.cuh (a block per row; the weight's and bias's gradients summed in chunks
// of rows). Sums run in the input's dtype, as on the CPU.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/row_norm.cuh"

#include <algorithm>
#include <optional>
#include <utility>

namespace dtrain::detail {
namespace {

using gpu::block_sum;
using gpu::data_or_null;

template <class T>
__global__ void forward_kernel(const T* x, const T* w, const T* b, T eps, std::int64_t rows, std::int64_t d, T* y,
                               T* mean_out, T* rstd_out) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * d;
    T* yr = y + row * d;
    T sum = 0;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += xr[j];
    const T mean = block_sum(sum) / static_cast<T>(d);
    T squares = 0;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) squares += (xr[j] - mean) * (xr[j] - mean);
    const T rstd = T(1) / ::sqrt(block_sum(squares) / static_cast<T>(d) + eps);
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      T v = (xr[j] - mean) * rstd;
      if (w) v *= w[j];
      if (b) v += b[j];
      yr[j] = v;
    }
  }
}

// Per row, with xhat = (x - mean) * rstd and h = g * w: dx = rstd * (h - mean(h) - xhat * mean(h * xhat)).
template <class T>
__global__ void backward_kernel(const T* g, const T* x, const T* mean, const T* rstd, const T* w, std::int64_t rows,
                                std::int64_t d, T* gx) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *gr = g + row * d, *xr = x + row * d;
    T* dr = gx + row * d;
    const T mu = mean[row], s = rstd[row];
    T sum_h = 0, sum_hx = 0;
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const T h = w ? gr[j] * w[j] : gr[j];
      sum_h += h;
      sum_hx += h * ((xr[j] - mu) * s);
    }
    const T mean_h = block_sum(sum_h) / static_cast<T>(d), mean_hx = block_sum(sum_hx) / static_cast<T>(d);
    for (std::int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const T h = w ? gr[j] * w[j] : gr[j];
      dr[j] = s * (h - mean_h - (xr[j] - mu) * s * mean_hx);
    }
  }
}

// partial_w[chunk, j] = the sum over rows chunk, chunk + chunks, ... of g * xhat at column j;
// partial_b the same of g. Either may be null.
template <class T>
__global__ void params_partial_kernel(const T* g, const T* x, const T* mean, const T* rstd, std::int64_t rows,
                                      std::int64_t d, std::int64_t chunks, T* partial_w, T* partial_b) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, chunk = blockIdx.y;
  if (j >= d) return;
  T sum_w = 0, sum_b = 0;
  for (std::int64_t row = chunk; row < rows; row += chunks) {
    const T gv = g[row * d + j];
    sum_w += gv * ((x[row * d + j] - mean[row]) * rstd[row]);
    sum_b += gv;
  }
  if (partial_w) partial_w[chunk * d + j] = sum_w;
  if (partial_b) partial_b[chunk * d + j] = sum_b;
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& y,
                             Tensor& mean, Tensor& rstd) {
  const std::int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  cuda::DeviceGuard guard(device_);
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<T><<<gpu::row_blocks(rows), gpu::row_threads(d), 0, stream_>>>(
        x.data<T>(), data_or_null<T>(weight), data_or_null<T>(bias), static_cast<T>(eps), rows, d, y.data<T>(),
        mean.data<T>(), rstd.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& weight, Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  const std::int64_t d = x.size(-1), rows = x.numel() / d;
  if (rows == 0) return;
  cuda::DeviceGuard guard(device_);
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<T><<<gpu::row_blocks(rows), gpu::row_threads(d), 0, stream_>>>(
        grad_y.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), data_or_null<T>(weight), rows, d,
        grad_x.data<T>());
    DTRAIN_CUDA_CHECK(cudaGetLastError());
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    const std::int64_t chunks = std::min(rows, gpu::kWeightChunks);
    const std::size_t part_bytes = static_cast<std::size_t>(chunks * d) * sizeof(T);
    std::optional<gpu::Scratch> partial_w, partial_b;
    if (grad_weight.defined()) partial_w.emplace(*this, part_bytes);
    if (grad_bias.defined()) partial_b.emplace(*this, part_bytes);
    T* pw = partial_w ? partial_w->as<T>() : nullptr;
    T* pb = partial_b ? partial_b->as<T>() : nullptr;
    const unsigned column_blocks = gpu::column_blocks(d);
    params_partial_kernel<T><<<dim3(column_blocks, static_cast<unsigned>(chunks)), gpu::kThreads, 0, stream_>>>(
        grad_y.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), rows, d, chunks, pw, pb);
    DTRAIN_CUDA_CHECK(cudaGetLastError());
    for (auto [part, out] : {std::pair{pw, &grad_weight}, std::pair{pb, &grad_bias}}) {
      if (!part) continue;
      gpu::sum_chunks_kernel<T><<<column_blocks, gpu::kThreads, 0, stream_>>>(part, d, chunks, out->template data<T>());
      DTRAIN_CUDA_CHECK(cudaGetLastError());
    }
  });
}

}  // namespace dtrain::detail
