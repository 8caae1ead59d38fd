// CPU comparisons (to u8 masks) and where.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"
#include "tensor/functors.h"

namespace dtrain::detail {

using cpu::cpu_kernel;

void CpuBackend::compare(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_compare(op, [&](auto functor) {
    dispatch_dtype(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu_kernel<std::uint8_t, T, T>(out, {&a, &b}, functor);
    });
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cpu_kernel<T, std::uint8_t, T, T>(out, {&cond, &a, &b}, [](std::uint8_t c, T u, T v) { return c ? u : v; });
  });
}

}  // namespace dtrain::detail
