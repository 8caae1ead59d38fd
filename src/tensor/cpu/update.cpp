// CPU in-place optimizer updates (self += v * a, self *= v, ...).
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"

namespace dtrain::detail {

using cpu::cpu_kernel;

void CpuBackend::update(UpdateOp op, Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch_floating(self.dtype(), "update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = static_cast<T>(value);
    switch (op) {
      case UpdateOp::AddScaled: cpu_kernel<T, T, T>(self, {&self, &a}, [v](T s, T x) { return s + v * x; }); return;
      case UpdateOp::MulScalar: cpu_kernel<T, T>(self, {&self}, [v](T s) { return s * v; }); return;
      case UpdateOp::Mul: cpu_kernel<T, T, T>(self, {&self, &a}, [](T s, T x) { return s * x; }); return;
      case UpdateOp::AddCMul:
        cpu_kernel<T, T, T, T>(self, {&self, &a, &b}, [v](T s, T x, T y) { return s + v * x * y; });
        return;
      case UpdateOp::AddCDiv:
        cpu_kernel<T, T, T, T>(self, {&self, &a, &b}, [v](T s, T x, T y) { return s + v * x / y; });
        return;
    }
    DTRAIN_FAIL("update: unknown UpdateOp {}", static_cast<int>(op));
  });
}

}  // namespace dtrain::detail
