// CPU binary element-wise ops. The math is in functors.h, the iteration in strided_loop.h;
// this file only chooses element types.
#include "tensor/cpu/elementwise_common.h"

namespace dtrain::detail {

using cpu::cpu_kernel;

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  visit_binary(op, [&](auto functor) {
    if (out.dtype() == DType::f32 && cpu::binary_blocked(functor, a, b, out)) return;
    using Functor = decltype(functor);
    cpu::dispatch_for<Functor>(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu_kernel<T, T, T>(out, {&a, &b}, functor);
    });
  });
}

}  // namespace dtrain::detail
