// CPU unary element-wise ops. The math is in functors.h, the iteration in strided_loop.h;
// this file only chooses element types.
#include "tensor/cpu/elementwise_common.h"

namespace dtrain::detail {

using cpu::cpu_kernel;

void CpuBackend::unary(UnaryOp op, const Tensor& x, Tensor& out) {
  visit_unary(op, [&](auto functor) {
    if (out.dtype() == DType::f32 && cpu::unary_blocked(functor, x, out)) return;
    using Functor = decltype(functor);
    cpu::dispatch_for<Functor>(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      cpu_kernel<T, T>(out, {&x}, functor);
    });
  });
}

}  // namespace dtrain::detail
