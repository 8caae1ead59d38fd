#include "dtrain/optim/adam.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"
#include "optim/adam_moments.h"

#include <cmath>

namespace dtrain::optim {

Adam::Adam(std::vector<Variable> params, AdamOptions options) : Adam(std::move(params), options, false) {}

AdamW::AdamW(std::vector<Variable> params, AdamOptions options) : Adam(std::move(params), options, true) {}

Adam::Adam(std::vector<Variable> params, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(params), options.lr),
      beta1_(options.beta1),
      beta2_(options.beta2),
      eps_(options.eps),
      weight_decay_(options.weight_decay.value_or(decoupled_weight_decay ? 1e-2 : 0)),
      decoupled_(decoupled_weight_decay),
      exclude_1d_from_weight_decay_(options.exclude_1d_from_weight_decay),
      exp_avg_(add_buffer("exp_avg")),
      exp_avg_sq_(add_buffer("exp_avg_sq")) {
  const char* name = decoupled_ ? "AdamW" : "Adam";
  DTRAIN_CHECK(beta1_ >= 0 && beta1_ < 1, "{}: beta1 must be in [0, 1), got {}", name, beta1_);
  DTRAIN_CHECK(beta2_ >= 0 && beta2_ < 1, "{}: beta2 must be in [0, 1), got {}", name, beta2_);
  DTRAIN_CHECK(eps_ > 0 && std::isfinite(eps_), "{}: eps must be a finite number > 0, got {}", name, eps_);
  DTRAIN_CHECK(weight_decay_ >= 0 && std::isfinite(weight_decay_),
               "{}: weight_decay must be a finite number >= 0, got {}", name, weight_decay_);
}

void Adam::step() {
  for_each_update([&](std::size_t i, Tensor& p, const Tensor& grad) {
    const bool decays = weight_decay_ != 0 && !(exclude_1d_from_weight_decay_ && p.dim() < 2);
    Tensor& m = buffer(exp_avg_, i);
    Tensor& v = buffer(exp_avg_sq_, i);
    start_moments(m, v, p);
    const AdamCorrection c = adam_correction(beta1_, beta2_, updates(i));
    adam_step_(p, m, v, grad,
               {.decay_factor = decays && decoupled_ ? 1 - lr() * weight_decay_ : 1,
                .l2 = decays && !decoupled_ ? weight_decay_ : 0,
                .beta1 = beta1_,
                .beta2 = beta2_,
                .eps = eps_ * c.eps_scale,
                .step_size = lr() * c.step_scale});
  });
}

std::unique_ptr<Optimizer> Adam::rebind(std::vector<Variable> params) const {
  const AdamOptions options{.lr = lr(),
                            .beta1 = beta1_,
                            .beta2 = beta2_,
                            .eps = eps_,
                            .weight_decay = weight_decay_,
                            .exclude_1d_from_weight_decay = exclude_1d_from_weight_decay_};
  if (decoupled_) return std::make_unique<AdamW>(std::move(params), options);
  return std::make_unique<Adam>(std::move(params), options);
}

}  // namespace dtrain::optim
