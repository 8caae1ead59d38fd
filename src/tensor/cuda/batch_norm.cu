// Training-mode batch normalization on CUDA, as own kernels following cpu/batch_norm.cpp
// rather than cuDNN's: the contract wants the biased batch variance (cuDNN returns the
// inverse standard deviation) and sums in double. One block per channel: x is (N, C, S)
// contiguous, so channel c is N planes of S values. Forward reads x twice (mean, then the
// centred sum of squares, which stays accurate where E[x^2] - E[x]^2 would cancel) and
// writes y once; backward reads grad_y and x twice and writes grad_x once.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"

#include <algorithm>

namespace dtrain::detail {
namespace {

// Threads per channel: a power of two, for the tree reduction.
constexpr int kChannelThreads = 512;

struct Layout {
  std::int64_t n, c, s;  // images, channels, values per plane
};

Layout layout_of(const Tensor& x) {
  return {x.size(0), x.size(1), x.numel() / std::max<std::int64_t>(x.size(0) * x.size(1), 1)};
}

// The offset of value i (of n * s) of channel c.
__device__ std::int64_t at(const Layout& l, std::int64_t c, std::int64_t i) { return (i / l.s * l.c + c) * l.s + i % l.s; }

struct Sums {
  double a, b;
};

// The block-wide totals of every thread's (a, b); every thread gets them.
__device__ Sums block_sum(Sums v) {
  __shared__ Sums lanes[kChannelThreads];
  lanes[threadIdx.x] = v;
  __syncthreads();
  for (int half = kChannelThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      lanes[threadIdx.x].a += lanes[threadIdx.x + half].a;
      lanes[threadIdx.x].b += lanes[threadIdx.x + half].b;
    }
    __syncthreads();
  }
  const Sums total = lanes[0];
  __syncthreads();  // before a second call overwrites lanes
  return total;
}

template <class T>
__global__ void forward_kernel(const T* x, const T* gamma, const T* beta, double eps, Layout l, T* y, T* mean_out,
                               T* var_out) {
  const std::int64_t c = blockIdx.x, count = l.n * l.s;
  double sum = 0;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += static_cast<double>(x[at(l, c, i)]);
  const double mean = block_sum({sum, 0}).a / static_cast<double>(count);
  double squares = 0;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double d = static_cast<double>(x[at(l, c, i)]) - mean;
    squares += d * d;
  }
  const double var = block_sum({squares, 0}).a / static_cast<double>(count);
  const double scale = (gamma ? static_cast<double>(gamma[c]) : 1.0) / ::sqrt(var + eps);
  const double shift = (beta ? static_cast<double>(beta[c]) : 0.0) - mean * scale;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const std::int64_t o = at(l, c, i);
    y[o] = x[o] * static_cast<T>(scale) + static_cast<T>(shift);
  }
  if (threadIdx.x == 0) {
    mean_out[c] = static_cast<T>(mean);
    var_out[c] = static_cast<T>(var);
  }
}

// With xhat = (x - mean) * invstd, k = gamma * invstd and m = N * S values per channel:
//   grad_beta = sum(g), grad_gamma = sum(g * xhat),
//   grad_x = k * (g - grad_beta / m - xhat * grad_gamma / m),
// which is a * g + b * x + d per channel.
template <class T>
__global__ void backward_kernel(const T* g, const T* x, const T* mean_in, const T* var_in, const T* gamma, double eps,
                                Layout l, T* gx, T* ggamma, T* gbeta) {
  const std::int64_t c = blockIdx.x, count = l.n * l.s;
  const double mean = static_cast<double>(mean_in[c]);
  const double invstd = 1 / ::sqrt(static_cast<double>(var_in[c]) + eps);
  Sums local{0, 0};  // sum(g), sum(g * (x - mean))
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const std::int64_t o = at(l, c, i);
    local.a += static_cast<double>(g[o]);
    local.b += static_cast<double>(g[o]) * (static_cast<double>(x[o]) - mean);
  }
  const Sums total = block_sum(local);
  const double k = (gamma ? static_cast<double>(gamma[c]) : 1.0) * invstd;
  const double a = k, b = -k * invstd * invstd * total.b / static_cast<double>(count);
  const double d = -k * total.a / static_cast<double>(count) - b * mean;
  for (std::int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const std::int64_t o = at(l, c, i);
    gx[o] = g[o] * static_cast<T>(a) + x[o] * static_cast<T>(b) + static_cast<T>(d);
  }
  if (threadIdx.x == 0) {
    ggamma[c] = static_cast<T>(total.b * invstd);
    gbeta[c] = static_cast<T>(total.a);
  }
}

template <class T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

// With relu, the ReLU runs as the element-wise kernel after the normalization, and its
// gradient mask before the backward: on a GPU these passes are a small share of a step
// next to cuDNN's convolutions, and the CPU kernels fuse them (cpu/batch_norm.cpp).
void CudaBackend::batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, bool relu, Tensor& y,
                             Tensor& mean, Tensor& var) {
  const Layout l = layout_of(x);
  if (l.c == 0) return;
  cuda::DeviceGuard guard(device_);
  dispatch_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    forward_kernel<<<static_cast<unsigned>(l.c), kChannelThreads, 0, stream_>>>(
        x.data<T>(), data_or_null<T>(gamma), data_or_null<T>(beta), eps, l, y.data<T>(), mean.data<T>(),
        var.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
  if (relu) unary(UnaryOp::Relu, y, y);
}

void CudaBackend::batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& relu_y, const Tensor& mean,
                                      const Tensor& var, const Tensor& gamma, double eps, Tensor& grad_x,
                                      Tensor& grad_gamma, Tensor& grad_beta) {
  const Layout l = layout_of(x);
  if (l.c == 0) return;
  cuda::DeviceGuard guard(device_);
  Tensor g = grad_y;
  if (relu_y.defined()) {
    g = Tensor::empty(grad_y.shape(), {grad_y.dtype(), grad_y.device()});
    binary(BinaryOp::ReluGrad, grad_y, relu_y, g);
  }
  dispatch_floating(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<<<static_cast<unsigned>(l.c), kChannelThreads, 0, stream_>>>(
        g.data<T>(), x.data<T>(), mean.data<T>(), var.data<T>(), data_or_null<T>(gamma), eps, l,
        grad_x.data<T>(), grad_gamma.data<T>(), grad_beta.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dtrain::detail
