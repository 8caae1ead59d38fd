// CPU random fills. Element i of dst draws from Philox counter offset + i under the seed,
// so any split of [0, numel) over threads gives the same values. dst is contiguous (the
// public ops stage strided tensors through a contiguous buffer).
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/philox.h"

#include <cmath>
#include <numbers>
#include <type_traits>

namespace dtrain::detail {
namespace {

// One Philox block (~20 multiplies) per element: enough work that 16K elements per
// chunk amortize the wake-up of a pool thread.
constexpr std::int64_t kGrain = 1 << 14;

template <class T, class Draw>
void fill_counters(Tensor& dst, std::uint64_t seed, std::uint64_t offset, Draw draw) {
  T* out = dst.data<T>();
  parallel_for(0, dst.numel(), kGrain, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      out[i] = draw(philox4x32_10(offset + static_cast<std::uint64_t>(i), seed));
    }
  });
}

// Uniform in [0, 1) at T's precision: 24 bits for float, 53 for double.
template <class T>
T unit_uniform(std::uint32_t w0, std::uint32_t w1) {
  if constexpr (std::is_same_v<T, float>)
    return uniform_float(w0);
  else
    return uniform_double(w0, w1);
}

}  // namespace

void CpuBackend::uniform(Tensor& dst, double low, double high, std::uint64_t seed, std::uint64_t offset) {
  dispatch_floating(dst.dtype(), "uniform_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T lo = static_cast<T>(low), span = static_cast<T>(high - low), hi = static_cast<T>(high);
    fill_counters<T>(dst, seed, offset, [=](PhiloxBlock r) {
      T v = lo + span * unit_uniform<T>(r.v[0], r.v[1]);
      // low + span * u can round up to high; keep the interval half-open.
      return v < hi || lo == hi ? v : std::nextafter(hi, lo);
    });
  });
}

// Box-Muller on two independent uniforms from one block; the cosine branch only, so that
// each element owns its counter. The smallest u1 bounds the tails: 5.8 sigma for f32
// (24-bit u1), 8.6 for f64.
void CpuBackend::normal(Tensor& dst, double mean, double stddev, std::uint64_t seed, std::uint64_t offset) {
  dispatch_floating(dst.dtype(), "normal_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T mu = static_cast<T>(mean), sigma = static_cast<T>(stddev);
    const T two_pi = 2 * std::numbers::pi_v<T>;
    fill_counters<T>(dst, seed, offset, [=](PhiloxBlock r) {
      T u1 = 1 - unit_uniform<T>(r.v[0], r.v[1]);  // (0, 1]: log(u1) is finite
      T u2 = unit_uniform<T>(r.v[2], r.v[3]);
      return mu + sigma * std::sqrt(-2 * std::log(u1)) * std::cos(two_pi * u2);
    });
  });
}

void CpuBackend::bernoulli(Tensor& dst, double p, std::uint64_t seed, std::uint64_t offset) {
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_counters<T>(dst, seed, offset,
                     [=](PhiloxBlock r) { return static_cast<T>(uniform_double(r.v[0], r.v[1]) < p); });
  });
}

}  // namespace dtrain::detail
