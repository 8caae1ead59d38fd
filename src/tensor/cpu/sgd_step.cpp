// SGD with momentum in one pass: each element of the parameter, its gradient and its
// momentum buffer is read once and the two updated values written once, where the update()
// passes it replaces read and write the buffer three times (five with weight decay or
// Nesterov). The arithmetic is those passes' own, in the same order and precision: the same
// result, bit for bit where the compiler does not contract a multiply and an add into one
// FMA (the portable x86-64 build; -march=native may, differently in the two).
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/strided_loop.h"

namespace dtrain::detail {
namespace {

// The options that change the arithmetic are template arguments, and the three arrays
// never overlap (the op copies a gradient that shares their memory), so the loop vectorizes.
template <class T, bool Decays, bool Nesterov>
void fused_step(T* __restrict param, T* __restrict buf, const T* __restrict grad, std::int64_t n,
                const SgdMomentumStep& s) {
  // As update() rounds its scalar operands: each coefficient to T, once.
  const T decay = static_cast<T>(s.weight_decay), momentum = static_cast<T>(s.momentum);
  const T keep = static_cast<T>(1 - s.dampening), minus_lr = static_cast<T>(-s.lr);
  parallel_for(0, n, cpu::kGrain, [=](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const T d = Decays ? grad[i] + decay * param[i] : grad[i];
      T m = buf[i] * momentum;
      m = m + keep * d;
      buf[i] = m;
      param[i] = param[i] + minus_lr * (Nesterov ? d + momentum * m : m);
    }
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
