#include "dtrain/optim/sgd.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"

#include <cmath>

namespace dtrain::optim {

SGD::SGD(std::vector<Variable> params, SgdOptions options)
    : Optimizer(std::move(params), options.lr),
      momentum_(options.momentum),
      dampening_(options.dampening),
      weight_decay_(options.weight_decay),
      nesterov_(options.nesterov),
      exclude_1d_from_weight_decay_(options.exclude_1d_from_weight_decay),
      momentum_buffer_(add_buffer("momentum_buffer")) {
  DTRAIN_CHECK(momentum_ >= 0 && momentum_ < 1, "SGD: momentum must be in [0, 1), got {}", momentum_);
  DTRAIN_CHECK(dampening_ >= 0 && dampening_ <= 1, "SGD: dampening must be in [0, 1], got {}", dampening_);
  DTRAIN_CHECK(weight_decay_ >= 0 && std::isfinite(weight_decay_),
               "SGD: weight_decay must be a finite number >= 0, got {}", weight_decay_);
  DTRAIN_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0),
               "SGD: nesterov needs momentum > 0 and dampening 0, got momentum {} and dampening {}", momentum_,
               dampening_);
}

void SGD::step() {
  for_each_update([&](std::size_t i, Tensor& p, const Tensor& grad) {
    const bool decays = weight_decay_ != 0 && !(exclude_1d_from_weight_decay_ && p.dim() < 2);
    if (momentum_ != 0) {
      Tensor& buf = buffer(momentum_buffer_, i);
      if (buf.defined()) {
        // Every later step: one fused pass over the parameter, its gradient and buffer.
        sgd_momentum_step_(p, buf, grad, {.lr = lr(), .momentum = momentum_, .dampening = dampening_,
                                          .weight_decay = decays ? weight_decay_ : 0.0, .nesterov = nesterov_});
        return;
      }
    }
    // d is the update direction; it aliases the gradient until something must change it,
    // so plain SGD allocates nothing.
    Tensor d = grad;
    if (decays) {
      d = grad.clone();
      add_(d, p, weight_decay_);
    }
    if (momentum_ != 0) {
      // The first step: PyTorch starts the buffer at the direction, undamped.
      Tensor& buf = buffer(momentum_buffer_, i);
      buf = d.clone();
      if (nesterov_) {
        if (d.same_storage(grad)) d = grad.clone();
        add_(d, buf, momentum_);
      } else {
        d = buf;
      }
    }
    add_(p, d, -lr());
  });
}

std::unique_ptr<Optimizer> SGD::rebind(std::vector<Variable> params) const {
  return std::make_unique<SGD>(std::move(params),
                               SgdOptions{.lr = lr(),
                                          .momentum = momentum_,
                                          .dampening = dampening_,
                                          .weight_decay = weight_decay_,
                                          .nesterov = nesterov_,
                                          .exclude_1d_from_weight_decay = exclude_1d_from_weight_decay_});
}

}  // namespace dtrain::optim
