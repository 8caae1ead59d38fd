// Rotary position embedding on CUDA, with the math of cpu/rope.cpp: x (B, T, H, D)
// contiguous; one thread per rotated pair (i, i + D/2), in a grid-stride loop.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"

namespace dtrain::detail {
namespace {

template <class T>
__global__ void rope_kernel(const T* x, const T* cos, const T* sin, std::int64_t pairs, std::int64_t steps,
                            std::int64_t heads, std::int64_t half, bool inverse, T* out) {
  for (std::int64_t p = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = p % half, head = p / half;  // head: the (b, t, h) index
    const std::int64_t t = (head / heads) % steps;
    const std::int64_t at = head * 2 * half + i;
    const T c = cos[t * half + i], s = inverse ? -sin[t * half + i] : sin[t * half + i];
    const T lo = x[at], hi = x[at + half];
    out[at] = lo * c - hi * s;
    out[at + half] = hi * c + lo * s;
  }
}

}  // namespace

void CudaBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse, Tensor& out) {
  const std::int64_t half = x.size(3) / 2, pairs = x.numel() / 2;
  if (pairs == 0) return;
  cuda::DeviceGuard guard(device_);
  dispatch_floating(x.dtype(), inverse ? "rope_backward" : "rope_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<gpu::blocks_for(pairs), gpu::kThreads, 0, stream_>>>(
        x.data<T>(), cos.data<T>(), sin.data<T>(), pairs, x.size(1), x.size(2), half, inverse, out.data<T>());
  });
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dtrain::detail
