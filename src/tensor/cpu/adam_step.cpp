// Adam and AdamW in one pass: each element of the parameter, its gradient and both moments
// is read once and the three updated values written once, where the update() passes it
// replaces read and write the moments twice each, the parameter twice or three times, and a
// square-root temporary twice: eight passes over a GPT's parameters per step instead of one
// (an AdamW step of GPT-2 124M went from most of a second to its memory traffic's time). The
// arithmetic is those passes' own, in the same order and precision: the same result, bit for
// bit (the build never contracts a multiply and an add into one FMA). The loop is compiled
// per instruction set (isa_clones.h).
#include "dtrain/core/parallel.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/isa_clones.h"
#include "tensor/cpu/strided_loop.h"

#include <cmath>

namespace dtrain::detail {
namespace {

// The coefficients as update() rounds its scalar operands: each to T, once.
template <class T>
struct Coefficients {
  T decay, l2, beta1, keep1, beta2, keep2, eps, minus_step;
};

// Elements [0, n). The options that change the arithmetic are template arguments; the four
// arrays never overlap (the op copies a gradient that shares their memory), so the loop
// vectorizes (sqrt is the instruction, not a libm call, once errno is not set: GCC emits
// the vector square root with a scalar fallback only for negative inputs, which a second
// moment never holds).
template <class T, bool Decays, bool L2>
DTRAIN_ISA_CLONES void step_range(T* __restrict param, T* __restrict m, T* __restrict v, const T* __restrict grad,
                                  std::int64_t n, Coefficients<T> c) {
  for (std::int64_t i = 0; i < n; ++i) {
    T p = param[i];
    if (Decays) p = p * c.decay;
    const T d = L2 ? grad[i] + c.l2 * p : grad[i];
    T mi = m[i] * c.beta1;
    mi = mi + c.keep1 * d;
    T vi = v[i] * c.beta2;
    vi = vi + c.keep2 * d * d;
    m[i] = mi;
    v[i] = vi;
    T denom = std::sqrt(vi);
    denom = denom + c.eps;
    param[i] = p + c.minus_step * mi / denom;
  }
}

template <class T, bool Decays, bool L2>
void fused_step(T* param, T* m, T* v, const T* grad, std::int64_t n, const AdamStep& s) {
  const Coefficients<T> c{static_cast<T>(s.decay_factor), static_cast<T>(s.l2),        static_cast<T>(s.beta1),
                          static_cast<T>(1 - s.beta1),    static_cast<T>(s.beta2),     static_cast<T>(1 - s.beta2),
                          static_cast<T>(s.eps),          static_cast<T>(-s.step_size)};
  parallel_for(0, n, cpu::kGrain, [=](std::int64_t b, std::int64_t e) {
    step_range<T, Decays, L2>(param + b, m + b, v + b, grad + b, e - b, c);
  });
}

template <class T>
void fused_step(T* param, T* m, T* v, const T* grad, std::int64_t n, const AdamStep& s) {
  const bool decays = s.decay_factor != 1, l2 = s.l2 != 0;
  if (decays && l2) fused_step<T, true, true>(param, m, v, grad, n, s);
  else if (decays) fused_step<T, true, false>(param, m, v, grad, n, s);
  else if (l2) fused_step<T, false, true>(param, m, v, grad, n, s);
  else fused_step<T, false, false>(param, m, v, grad, n, s);
}

}  // namespace

void CpuBackend::adam_step(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad,
                           const AdamStep& step) {
  if (!grad.is_contiguous()) return Backend::adam_step(param, exp_avg, exp_avg_sq, grad, step);  // broadcast
  dispatch_floating(param.dtype(), "adam_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fused_step<T>(param.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), grad.data<T>(), param.numel(), step);
  });
}

}  // namespace dtrain::detail
