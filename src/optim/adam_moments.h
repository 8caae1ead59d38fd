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

// At update t (from 1), with gradient g: m = beta1 * m + (1 - beta1) * g and
// v = beta2 * v + (1 - beta2) * g^2 in place (zeros like p on the first update), then the
// direction. With c = sqrt(1 - beta2^t), m_hat / (sqrt(v_hat) + eps) equals
// (c / (1 - beta1^t)) * m / (sqrt(v) + eps * c): PyTorch's value with one pass less over
// the denominator.
inline AdamDirection adam_direction(Tensor& m, Tensor& v, const Tensor& p, const Tensor& g, double beta1,
                                    double beta2, double eps, std::int64_t t) {
  if (!m.defined()) {
    m = Tensor::zeros(p.shape(), p.options());
    v = Tensor::zeros(p.shape(), p.options());
  }
  mul_(m, beta1);
  add_(m, g, 1 - beta1);
  mul_(v, beta2);
  addcmul_(v, g, g, 1 - beta2);
  const auto steps = static_cast<double>(t);
  const double c = std::sqrt(1 - std::pow(beta2, steps));
  Tensor denom = sqrt(v);
  add_(denom, Tensor::scalar(eps * c, denom.options()));
  return {denom, c / (1 - std::pow(beta1, steps))};
}

}  // namespace dtrain::optim
