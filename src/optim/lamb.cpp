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

Tensor LAMB::direction(std::size_t i, const Tensor& p, const Tensor& grad, std::int64_t update) {
  Tensor& m = buffer(exp_avg_, i);
  const AdamDirection d = adam_direction(m, buffer(exp_avg_sq_, i), p, grad, beta1_, beta2_, eps_, update);
  Tensor u = div(m, d.denom);  // r = m_hat / (sqrt(v_hat) + eps)
  mul_(u, d.scale);
  if (!(exclude_1d_ && p.dim() < 2) && weight_decay_ != 0) add_(u, p, weight_decay_);
  return u;
}

void LAMB::step() {
  if (slices_) {
    sliced_step();
    return;
  }
  for_each_update([&](std::size_t i, Tensor& p, const Tensor& grad) {
    const Tensor u = direction(i, p, grad, updates(i));
    double trust = 1;
    if (!(exclude_1d_ && p.dim() < 2)) {
      const double p_norm = l2_norm(p);
      const double u_norm = l2_norm(u);
      if (p_norm > 0 && u_norm > 0) trust = p_norm / u_norm;
    }
    add_(p, u, -lr() * trust);
  });
}

// The directions first (each slice's moments advance once, as in step()), then the whole
// tensors' norms over the ranks, then the updates.
void LAMB::sliced_step() {
  std::vector<Tensor> directions(params().size());
  Tensor sums = Tensor::zeros({static_cast<std::int64_t>(slices_->tensors), 2}, {DType::f64});
  double* at = sums.data<double>();
  {
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < params().size(); ++i) {
      const Variable& v = params()[i];
      if (!v.has_grad()) continue;
      directions[i] = direction(i, v.data(), v.grad(), updates(i) + 1);  // the update about to be counted
      if (exclude_1d_ && v.dim() < 2) continue;
      const double pn = l2_norm(v.data()), un = l2_norm(directions[i]);
      at[2 * slices_->tensor_of[i]] += pn * pn;
      at[2 * slices_->tensor_of[i] + 1] += un * un;
    }
  }
  slices_->sum_over_ranks(sums);
  const double* whole = sums.data<double>();
  for_each_update([&](std::size_t i, Tensor& p, const Tensor&) {
    double trust = 1;
    if (!(exclude_1d_ && p.dim() < 2)) {
      const std::size_t t = slices_->tensor_of[i];
      const double p_norm = std::sqrt(whole[2 * t]), u_norm = std::sqrt(whole[2 * t + 1]);
      if (p_norm > 0 && u_norm > 0) trust = p_norm / u_norm;
    }
    add_(p, directions[i], -lr() * trust);
  });
}

std::unique_ptr<Optimizer> LAMB::rebind_slices(std::vector<Variable> params, SliceNorms norms) const {
  DTRAIN_CHECK(norms.tensor_of.size() == params.size() && norms.sum_over_ranks != nullptr,
               "LAMB: rebind_slices needs the whole tensor of each of the {} slices and a sum over the ranks",
               params.size());
  auto rebound = std::make_unique<LAMB>(std::move(params), LambOptions{.lr = lr(),
                                                                       .beta1 = beta1_,
                                                                       .beta2 = beta2_,
                                                                       .eps = eps_,
                                                                       .weight_decay = weight_decay_,
                                                                       .exclude_1d = exclude_1d_});
  rebound->slices_ = std::move(norms);
  return rebound;
}

std::unique_ptr<Optimizer> LAMB::rebind(std::vector<Variable> /*params*/) const {
  DTRAIN_FAIL(
      "LAMB: cannot be rebound to other parameters (a parameter server's shards): its trust ratio is a norm over "
      "each whole parameter tensor, and a shard may be a slice of one or span several; use a strategy that keeps "
      "whole tensors on each rank (e.g. data parallel)");
}

}  // namespace dtrain::optim
