// The sum of squares in f64 in one pass over f32 (or f64) memory: gradient clipping's norm.
// Summing an f64 copy instead wrote and read twice the gradients' size again (a GPT-2 124M's
// clipping made a 1 GB copy per step). Eight interleaved accumulators per thread part keep
// the adds independent, so the loop vectorizes without reassociating anything the source does
// not: the result depends on the part boundaries, which are fixed, not on the thread count.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/isa_clones.h"

#include <vector>

namespace dtrain::detail {
namespace {

constexpr std::int64_t kLanes = 8;
constexpr std::int64_t kPart = 1 << 16;  // elements per parallel part, fixed

template <class T>
DTRAIN_ISA_CLONES double sum_squares(const T* __restrict x, std::int64_t n) {
  double acc[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::int64_t j = 0; j < kLanes; ++j) {
      const double v = static_cast<double>(x[i + j]);
      acc[j] = acc[j] + v * v;
    }
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    acc[0] = acc[0] + v * v;
  }
  double total = 0;
  for (double a : acc) total += a;
  return total;
}

}  // namespace

Tensor CpuBackend::squared_norm(const Tensor& x) {
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64) return Backend::squared_norm(x);
  const Tensor c = x.contiguous();
  const std::int64_t n = c.numel(), parts = (n + kPart - 1) / kPart;
  std::vector<double> partial(static_cast<std::size_t>(parts), 0.0);
  dispatch_floating(c.dtype(), "squared_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = c.data<T>();
    parallel_for(0, parts, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t p = b; p < e; ++p)
        partial[static_cast<std::size_t>(p)] = sum_squares(data + p * kPart, std::min(kPart, n - p * kPart));
    });
  });
  double total = 0;
  for (double p : partial) total += p;
  return Tensor::scalar(total, TensorOptions{DType::f64, x.device()});
}

}  // namespace dtrain::detail
