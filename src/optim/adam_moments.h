// Adam's moment estimates and its bias-corrected step direction, shared by Adam/AdamW and
// LAMB (whose update is Adam's direction rescaled by a trust ratio).
#pragma once

#include "dtrain/tensor/ops.h"

#include <cmath>
#include <cstdint>

namespace dtrain::optim {

// m_hat / (sqrt(v_hat) + eps) == scale * m / denom.
struct AdamDirection {
  Tensor denom;
  double scale = 1;
};

// The moments as zeros like p, on a parameter's first update.
inline void start_moments(Tensor& m, Tensor& v, const Tensor& p) {
  if (m.defined()) return;
  m = Tensor::zeros(p.shape(), p.options());
  v = Tensor::zeros(p.shape(), p.options());
}

// Adam's bias corrections at update t (from 1): with c = sqrt(1 - beta2^t),
// m_hat / (sqrt(v_hat) + eps) equals (c / (1 - beta1^t)) * m / (sqrt(v) + eps * c), PyTorch's
// value with one pass less over the denominator.
struct AdamCorrection {
  double step_scale = 1;  // c / (1 - beta1^t)
  double eps_scale = 1;   // c
};
inline AdamCorrection adam_correction(double beta1, double beta2, std::int64_t t) {
  const auto steps = static_cast<double>(t);
  const double c = std::sqrt(1 - std::pow(beta2, steps));
  return {c / (1 - std::pow(beta1, steps)), c};
}

// At update t, with gradient g: m = beta1 * m + (1 - beta1) * g and
// v = beta2 * v + (1 - beta2) * g^2 in place (start_moments on the first update), then the
// direction (LAMB rescales it; Adam and AdamW run the whole step as adam_step_).
inline AdamDirection adam_direction(Tensor& m, Tensor& v, const Tensor& p, const Tensor& g, double beta1, double beta2,
                                    double eps, std::int64_t t) {
  start_moments(m, v, p);
  mul_(m, beta1);
  add_(m, g, 1 - beta1);
  mul_(v, beta2);
  addcmul_(v, g, g, 1 - beta2);
  const AdamCorrection c = adam_correction(beta1, beta2, t);
  Tensor denom = sqrt(v);
  add_(denom, Tensor::scalar(eps * c.eps_scale, denom.options()));
  return {denom, c.step_scale};
}

}  // namespace dtrain::optim
