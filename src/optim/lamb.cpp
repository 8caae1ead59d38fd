#include "dtrain/optim/lamb.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"
#include "optim/adam_moments.h"

#include <cmath>

namespace dtrain::optim {
namespace {

// ||t||_2, accumulated in f64; reading it to the host syncs with the device.
double l2_norm(const Tensor& t) { return std::sqrt(sum(square(t.to(DType::f64))).item()); }

}  // namespace

LAMB::LAMB(std::vector<Variable> params, LambOptions options)
    : Optimizer(std::move(params), options.lr),
      beta1_(options.beta1),
      beta2_(options.beta2),
      eps_(options.eps),
      weight_decay_(options.weight_decay),
      exclude_1d_(options.exclude_1d),
      exp_avg_(add_buffer("exp_avg")),
      exp_avg_sq_(add_buffer("exp_avg_sq")) {
  DTRAIN_CHECK(beta1_ >= 0 && beta1_ < 1, "LAMB: beta1 must be in [0, 1), got {}", beta1_);
  DTRAIN_CHECK(beta2_ >= 0 && beta2_ < 1, "LAMB: beta2 must be in [0, 1), got {}", beta2_);
  DTRAIN_CHECK(eps_ > 0 && std::isfinite(eps_), "LAMB: eps must be a finite number > 0, got {}", eps_);
  DTRAIN_CHECK(weight_decay_ >= 0 && std::isfinite(weight_decay_),
               "LAMB: weight_decay must be a finite number >= 0, got {}", weight_decay_);
}

void LAMB::step() {
  for_each_update([&](std::size_t i, Tensor& p, const Tensor& grad) {
    Tensor& m = buffer(exp_avg_, i);
    const AdamDirection d = adam_direction(m, buffer(exp_avg_sq_, i), p, grad, beta1_, beta2_, eps_, updates(i));
    Tensor u = div(m, d.denom);  // r = m_hat / (sqrt(v_hat) + eps)
    mul_(u, d.scale);

    double trust = 1;
    if (!(exclude_1d_ && p.dim() < 2)) {
      if (weight_decay_ != 0) add_(u, p, weight_decay_);
      const double p_norm = l2_norm(p);
      const double u_norm = l2_norm(u);
      if (p_norm > 0 && u_norm > 0) trust = p_norm / u_norm;
    }
    add_(p, u, -lr() * trust);
  });
}

std::unique_ptr<Optimizer> LAMB::rebind(std::vector<Variable> /*params*/) const {
  DTRAIN_FAIL(
      "LAMB: cannot be rebound to other parameters (a parameter server's shards): its trust ratio is a norm over "
      "each whole parameter tensor, and a shard may be a slice of one or span several; use a strategy that keeps "
      "whole tensors on each rank (e.g. data parallel)");
}

}  // namespace dtrain::optim
