// CUDA 2-D pooling (max, average, adaptive average) and their backwards, as own kernels
// rather than cuDNN's: cuDNN's max pooling yields no indices, and these follow
// cpu/pool.cpp exactly (windows, divisors, NaN and tie rules). One thread per output
// element forward. The average backwards gather: one thread per input element sums the
// shares of the windows that cover it, in the order the CPU adds them, so they need no
// atomics and match the CPU bit for bit. Max backward has only the indices, no window
// geometry, so it scatters with atomicAdd: where windows overlap (stride < kernel) the
// adds to one element land in any order, which changes only the rounding.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"
#include "tensor/kernel_layout.h"

#include <cmath>

namespace dtrain::detail {
namespace {

using gpu::blocks_for;
using gpu::kThreads;

// The input rows [h0, h1) and columns [w0, w1) under one output, and the divisor of an
// average over it.
struct Window {
  std::int64_t h0, h1, w0, w1;
  std::int64_t divisor;
};

// The output rows [first, last] whose windows may cover one input row (or column), a
// superset: callers test the window itself.
struct Candidates {
  std::int64_t first, last;
};

// A pooling window (cpu/pool.cpp pool_window): with count_include_pad the padding counts
// in the divisor, but not the part of the window past the padding.
struct FixedWindows {
  Planes g;
  Pool2dParams p;

  __device__ Window operator()(std::int64_t y, std::int64_t x) const {
    std::int64_t h0 = y * p.stride_h - p.pad_h, w0 = x * p.stride_w - p.pad_w;
    std::int64_t h1 = ::min(h0 + p.kernel_h, g.h + p.pad_h), w1 = ::min(w0 + p.kernel_w, g.w + p.pad_w);
    const std::int64_t padded = (h1 - h0) * (w1 - w0);
    h0 = ::max(h0, std::int64_t{0}), w0 = ::max(w0, std::int64_t{0});
    h1 = ::min(h1, g.h), w1 = ::min(w1, g.w);
    return {h0, h1, w0, w1, p.count_include_pad ? padded : (h1 - h0) * (w1 - w0)};
  }
  // Window y starts at y * stride - pad and spans kernel rows: it covers row i when
  // i + pad - kernel < y * stride <= i + pad.
  static __device__ Candidates covering(std::int64_t i, std::int64_t stride, std::int64_t pad, std::int64_t kernel,
                                        std::int64_t out) {
    const std::int64_t low = i + pad - kernel + 1;  // smallest y * stride
    return {low <= 0 ? 0 : (low + stride - 1) / stride, ::min((i + pad) / stride, out - 1)};
  }
  __device__ Candidates rows_covering(std::int64_t i) const {
    return covering(i, p.stride_h, p.pad_h, p.kernel_h, g.oh);
  }
  __device__ Candidates cols_covering(std::int64_t j) const {
    return covering(j, p.stride_w, p.pad_w, p.kernel_w, g.ow);
  }
};

// PyTorch's adaptive windows: [floor(y * in / out), ceil((y + 1) * in / out)).
struct AdaptiveWindows {
  Planes g;

  __device__ Window operator()(std::int64_t y, std::int64_t x) const {
    Window win{y * g.h / g.oh, ((y + 1) * g.h + g.oh - 1) / g.oh, x * g.w / g.ow, ((x + 1) * g.w + g.ow - 1) / g.ow, 0};
    win.divisor = (win.h1 - win.h0) * (win.w1 - win.w0);
    return win;
  }
  // Window y covers i when floor(i * out / in) <= y < ceil((i + 1) * out / in).
  static __device__ Candidates covering(std::int64_t i, std::int64_t in, std::int64_t out) {
    return {i * out / in, ::min(((i + 1) * out + in - 1) / in - 1, out - 1)};
  }
  __device__ Candidates rows_covering(std::int64_t i) const { return covering(i, g.h, g.oh); }
  __device__ Candidates cols_covering(std::int64_t j) const { return covering(j, g.w, g.ow); }
};

// The maximum of one window and its flat index in the plane: the first maximum in
// row-major order, or the first NaN if there is one (as in PyTorch). Only real input
// competes, so padding never wins.
template <class T>
__device__ void window_max(const T* in, std::int64_t w, const Window& win, T& best, std::int64_t& arg) {
  best = static_cast<T>(-INFINITY);
  arg = win.h0 * w + win.w0;
  for (std::int64_t h = win.h0; h < win.h1; ++h) {
    for (std::int64_t c = win.w0; c < win.w1; ++c) {
      const T v = in[h * w + c];
      if (v != v) {
        best = v, arg = h * w + c;
        return;
      }
      if (v > best) best = v, arg = h * w + c;
    }
  }
}

template <class T>
__global__ void max_pool_kernel(const T* x, FixedWindows windows, T* out, std::int64_t* idx) {
  const Planes& g = windows.g;
  const std::int64_t plane_out = g.oh * g.ow, total = g.count * plane_out;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const std::int64_t plane = i / plane_out, y = i % plane_out / g.ow, xo = i % g.ow;
    window_max(x + plane * g.h * g.w, g.w, windows(y, xo), out[i], idx[i]);
  }
}

// Indices out of the plane are skipped: a kernel cannot throw, and checking on the host
// would wait for the device. max_pool2d only makes in-range ones.
template <class T>
__global__ void max_pool_backward_kernel(const T* go, const std::int64_t* idx, Planes g, T* gx) {
  const std::int64_t plane_out = g.oh * g.ow, plane_in = g.h * g.w, total = g.count * plane_out;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const std::int64_t target = idx[i];
    if (target >= 0 && target < plane_in) atomicAdd(gx + i / plane_out * plane_in + target, go[i]);
  }
}

template <class T, class Windows>
__global__ void average_kernel(const T* x, Windows windows, T* out) {
  const Planes& g = windows.g;
  const std::int64_t plane_out = g.oh * g.ow, total = g.count * plane_out;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const T* in = x + i / plane_out * g.h * g.w;
    const Window win = windows(i % plane_out / g.ow, i % g.ow);
    T sum = 0;
    for (std::int64_t h = win.h0; h < win.h1; ++h)
      for (std::int64_t c = win.w0; c < win.w1; ++c) sum += in[h * g.w + c];
    out[i] = sum / static_cast<T>(win.divisor);
  }
}

// grad_x[i] = the sum, over the windows covering input i in output order, of the window's
// gradient over its divisor: what the CPU's scatter adds to a zero-filled grad_x.
template <class T, class Windows>
__global__ void average_backward_kernel(const T* go, Windows windows, T* gx) {
  const Planes& g = windows.g;
  const std::int64_t plane_in = g.h * g.w, total = g.count * plane_in;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const std::int64_t row = i % plane_in / g.w, col = i % g.w;
    const T* src = go + i / plane_in * g.oh * g.ow;
    const Candidates ys = windows.rows_covering(row), xs = windows.cols_covering(col);
    T sum = 0;
    for (std::int64_t y = ys.first; y <= ys.last; ++y) {
      for (std::int64_t x = xs.first; x <= xs.last; ++x) {
        const Window win = windows(y, x);
        if (row >= win.h0 && row < win.h1 && col >= win.w0 && col < win.w1) {
          sum += src[y * g.ow + x] / static_cast<T>(win.divisor);
        }
      }
    }
    gx[i] = sum;
  }
}

}  // namespace

void CudaBackend::max_pool2d(const Tensor& x_in, const Pool2dParams& p, Tensor& out, Tensor& indices) {
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(device_);
  const Tensor x = x_in.contiguous();
  const FixedWindows windows{planes_of(x, out), p};
  dispatch_floating(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_kernel<<<blocks_for(out.numel()), kThreads, 0, stream_>>>(x.data<T>(), windows, out.data<T>(),
                                                                       indices.data<std::int64_t>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::max_pool2d_backward(const Tensor& grad_out_in, const Tensor& indices_in, Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  fill(grad_x, 0);  // comes uninitialized; the kernel adds into it
  if (grad_out_in.numel() == 0) return;
  cuda::DeviceGuard guard(device_);
  const Tensor grad_out = grad_out_in.contiguous(), indices = indices_in.contiguous();
  const Planes g = planes_of(grad_x, grad_out);
  dispatch_floating(grad_out.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_backward_kernel<<<blocks_for(grad_out.numel()), kThreads, 0, stream_>>>(
        grad_out.data<T>(), indices.data<std::int64_t>(), g, grad_x.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::avg_pool2d(const Tensor& x_in, const Pool2dParams& p, Tensor& out) {
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(device_);
  const Tensor x = x_in.contiguous();
  const FixedWindows windows{planes_of(x, out), p};
  dispatch_floating(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    average_kernel<<<blocks_for(out.numel()), kThreads, 0, stream_>>>(x.data<T>(), windows, out.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::avg_pool2d_backward(const Tensor& grad_out_in, const Pool2dParams& p, Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  cuda::DeviceGuard guard(device_);
  const Tensor grad_out = grad_out_in.contiguous();
  const FixedWindows windows{planes_of(grad_x, grad_out), p};
  dispatch_floating(grad_out.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    average_backward_kernel<<<blocks_for(grad_x.numel()), kThreads, 0, stream_>>>(grad_out.data<T>(), windows,
                                                                                  grad_x.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::adaptive_avg_pool2d(const Tensor& x_in, Tensor& out) {
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(device_);
  const Tensor x = x_in.contiguous();
  const AdaptiveWindows windows{planes_of(x, out)};
  dispatch_floating(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    average_kernel<<<blocks_for(out.numel()), kThreads, 0, stream_>>>(x.data<T>(), windows, out.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& grad_out_in, Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  cuda::DeviceGuard guard(device_);
  const Tensor grad_out = grad_out_in.contiguous();
  const AdaptiveWindows windows{planes_of(grad_x, grad_out)};
  dispatch_floating(grad_out.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    average_backward_kernel<<<blocks_for(grad_x.numel()), kThreads, 0, stream_>>>(grad_out.data<T>(), windows,
                                                                                  grad_x.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dtrain::detail
