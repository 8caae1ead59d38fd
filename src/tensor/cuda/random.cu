// CUDA random fills, drawing exactly what cpu/random.cpp draws: element i of the
// contiguous dst uses Philox counter offset + i under the seed (philox.h, shared with the
// host), turned into a value by the same steps. The same generator state therefore gives
// the same tensor on either device: bit for bit for uniform and bernoulli, and within a
// few ulp for normal, whose log and cos come from the device's math library.
//
// nvcc fuses a multiply followed by an add into one fma, which rounds once where the CPU
// rounds twice; the draws spell those steps with explicitly rounded intrinsics instead.
#include "dtrain/core/cuda/device_guard.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/kernel_utils.cuh"
#include "tensor/philox.h"

#include <cmath>
#include <numbers>
#include <type_traits>

namespace dtrain::detail {
namespace {

__device__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

// Uniform in [0, 1) at T's precision: 24 bits for float, 53 for double (as on the CPU).
template <class T>
__device__ T unit_uniform(std::uint32_t w0, std::uint32_t w1) {
  if constexpr (std::is_same_v<T, float>)
    return uniform_float(w0);
  else
    return uniform_double(w0, w1);
}

template <class T, class Draw>
__global__ void philox_fill(T* out, std::int64_t n, std::uint64_t seed, std::uint64_t offset, Draw draw) {
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = draw(philox4x32_10(offset + static_cast<std::uint64_t>(i), seed));
}

// low + span * u; a value that rounds up to high becomes the largest T below it
// (`below_high`, computed on the host), keeping the interval half-open.
template <class T>
struct UniformDraw {
  T low, span, high, below_high;
  __device__ T operator()(PhiloxBlock r) const {
    const T v = add_rn(low, mul_rn(span, unit_uniform<T>(r.v[0], r.v[1])));
    return v < high || low == high ? v : below_high;
  }
};

// Box-Muller, cosine branch, as CpuBackend::normal.
template <class T>
struct NormalDraw {
  T mean, stddev, two_pi;
  __device__ T operator()(PhiloxBlock r) const {
    const T u1 = T(1) - unit_uniform<T>(r.v[0], r.v[1]);  // (0, 1]: log(u1) is finite
    const T u2 = unit_uniform<T>(r.v[2], r.v[3]);
    const T radius = std::sqrt(mul_rn(T(-2), std::log(u1)));
    return add_rn(mean, mul_rn(mul_rn(stddev, radius), std::cos(mul_rn(two_pi, u2))));
  }
};

template <class T>
struct BernoulliDraw {
  double p;
  __device__ T operator()(PhiloxBlock r) const { return static_cast<T>(uniform_double(r.v[0], r.v[1]) < p); }
};

// dst is contiguous (the public ops stage strided tensors through a contiguous buffer).
template <class T, class Draw>
void fill_philox(cudaStream_t stream, Tensor& dst, std::uint64_t seed, std::uint64_t offset, Draw draw) {
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  philox_fill<T, Draw><<<gpu::blocks_for(n), gpu::kThreads, 0, stream>>>(dst.data<T>(), n, seed, offset, draw);
  DTRAIN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void CudaBackend::uniform(Tensor& dst, double low, double high, std::uint64_t seed, std::uint64_t offset) {
  cuda::DeviceGuard guard(device_);
  dispatch_floating(dst.dtype(), "uniform_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T lo = static_cast<T>(low), hi = static_cast<T>(high);
    const UniformDraw<T> draw{lo, static_cast<T>(high - low), hi, std::nextafter(hi, lo)};
    fill_philox<T>(stream_, dst, seed, offset, draw);
  });
}

void CudaBackend::normal(Tensor& dst, double mean, double stddev, std::uint64_t seed, std::uint64_t offset) {
  cuda::DeviceGuard guard(device_);
  dispatch_floating(dst.dtype(), "normal_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_philox<T>(stream_, dst, seed, offset,
            NormalDraw<T>{static_cast<T>(mean), static_cast<T>(stddev), 2 * std::numbers::pi_v<T>});
  });
}

void CudaBackend::bernoulli(Tensor& dst, double p, std::uint64_t seed, std::uint64_t offset) {
  cuda::DeviceGuard guard(device_);
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_philox<T>(stream_, dst, seed, offset, BernoulliDraw<T>{p});
  });
}

}  // namespace dtrain::detail
