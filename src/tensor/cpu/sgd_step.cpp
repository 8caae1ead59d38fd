// SGD with momentum in one pass: each element of the parameter, its gradient and its
// momentum buffer is read once and the two updated values written once, where the update()
// passes it replaces read and write the buffer three times (five with weight decay or
// Nesterov). The arithmetic is those passes' own, in the same order and precision: the same
// result, bit for bit (the build never contracts a multiply and an add into one FMA). The
// loop is compiled per instruction set (isa_clones.h): an MLP's parameters stay in cache,
// where the baseline's four lanes, not memory, set its pace.
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/isa_clones.h"
#include "tensor/cpu/strided_loop.h"

namespace dtrain::detail {
namespace {

// The coefficients as update() rounds its scalar operands: each to T, once.
template <class T>
struct Coefficients {
  T decay, momentum, keep, minus_lr;
};

// Elements [0, n). The options that change the arithmetic are template arguments, and the
// three arrays never overlap (the op copies a gradient that shares their memory), so the
// loop vectorizes.
template <class T, bool Decays, bool Nesterov>
DTRAIN_ISA_CLONES void step_range(T* __restrict param, T* __restrict buf, const T* __restrict grad, std::int64_t n,
                                  Coefficients<T> c) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T d = Decays ? grad[i] + c.decay * param[i] : grad[i];
    T m = buf[i] * c.momentum;
    m = m + c.keep * d;
    buf[i] = m;
    param[i] = param[i] + c.minus_lr * (Nesterov ? d + c.momentum * m : m);
  }
}

template <class T, bool Decays, bool Nesterov>
void fused_step(T* param, T* buf, const T* grad, std::int64_t n, const SgdMomentumStep& s) {
  const Coefficients<T> c{static_cast<T>(s.weight_decay), static_cast<T>(s.momentum), static_cast<T>(1 - s.dampening),
                          static_cast<T>(-s.lr)};
  parallel_for(0, n, cpu::kGrain, [=](std::int64_t b, std::int64_t e) {
    step_range<T, Decays, Nesterov>(param + b, buf + b, grad + b, e - b, c);
  });
}

template <class T>
void fused_step(T* param, T* buf, const T* grad, std::int64_t n, const SgdMomentumStep& s) {
  const bool decays = s.weight_decay != 0;
  if (decays && s.nesterov) fused_step<T, true, true>(param, buf, grad, n, s);
  else if (decays) fused_step<T, true, false>(param, buf, grad, n, s);
  else if (s.nesterov) fused_step<T, false, true>(param, buf, grad, n, s);
  else fused_step<T, false, false>(param, buf, grad, n, s);
}

}  // namespace

void CpuBackend::sgd_momentum_step(Tensor& param, Tensor& buf, const Tensor& grad, const SgdMomentumStep& step) {
  if (!grad.is_contiguous()) return Backend::sgd_momentum_step(param, buf, grad, step);  // a broadcast gradient
  dispatch_floating(param.dtype(), "sgd_momentum_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fused_step<T>(param.data<T>(), buf.data<T>(), grad.data<T>(), param.numel(), step);
  });
}

}  // namespace dtrain::detail
