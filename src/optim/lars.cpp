#include "dtrain/optim/lars.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"

#include <cmath>

namespace dtrain::optim {
namespace {

// ||t||_2, accumulated in f64; reading it to the host syncs with the device.
double l2_norm(const Tensor& t) { return std::sqrt(sum(square(t.to(DType::f64))).item()); }

}  // namespace

LARS::LARS(std::vector<Variable> params, LarsOptions options)
    : Optimizer(std::move(params), options.lr),
      momentum_(options.momentum),
      weight_decay_(options.weight_decay),
      eta_(options.eta),
      eps_(options.eps),
      nesterov_(options.nesterov),
      exclude_1d_(options.exclude_1d),
      momentum_buffer_(add_buffer("momentum_buffer")) {
  DTRAIN_CHECK(momentum_ >= 0 && momentum_ < 1, "LARS: momentum must be in [0, 1), got {}", momentum_);
  DTRAIN_CHECK(weight_decay_ >= 0 && std::isfinite(weight_decay_),
               "LARS: weight_decay must be a finite number >= 0, got {}", weight_decay_);
  DTRAIN_CHECK(eta_ > 0 && std::isfinite(eta_), "LARS: eta (the trust coefficient) must be a finite number > 0, got {}",
               eta_);
  DTRAIN_CHECK(eps_ >= 0 && std::isfinite(eps_), "LARS: eps must be a finite number >= 0, got {}", eps_);
  DTRAIN_CHECK(!nesterov_ || momentum_ > 0, "LARS: nesterov needs momentum > 0, got momentum {}", momentum_);
}

std::vector<std::pair<double, double>> LARS::slice_norms() {
  NoGradGuard no_grad;
  Tensor sums = Tensor::zeros({static_cast<std::int64_t>(slices_->tensors), 2}, {DType::f64});
  double* at = sums.data<double>();
  for (std::size_t i = 0; i < params().size(); ++i) {
    const Variable& v = params()[i];
    if (!v.has_grad() || (exclude_1d_ && v.dim() < 2)) continue;
    const double pn = l2_norm(v.data()), gn = l2_norm(v.grad());
    at[2 * slices_->tensor_of[i]] += pn * pn;
    at[2 * slices_->tensor_of[i] + 1] += gn * gn;
  }
  slices_->sum_over_ranks(sums);
  std::vector<std::pair<double, double>> out;
  const double* summed = sums.data<double>();
  for (std::size_t i = 0; i < params().size(); ++i) {
    const std::size_t t = slices_->tensor_of[i];
    out.emplace_back(std::sqrt(summed[2 * t]), std::sqrt(summed[2 * t + 1]));
  }
  return out;
}

void LARS::step() {
  const std::vector<std::pair<double, double>> whole =
      slices_ ? slice_norms() : std::vector<std::pair<double, double>>{};
  for_each_update([&](std::size_t i, Tensor& p, const Tensor& grad) {
    // The update is scale * d, with d the (decayed) gradient and scale = lr * trust.
    double scale = lr();
    Tensor d = grad;  // aliases the gradient until weight decay must change it
    if (!(exclude_1d_ && p.dim() < 2)) {
      const double p_norm = slices_ ? whole[i].first : l2_norm(p);
      const double g_norm = slices_ ? whole[i].second : l2_norm(grad);
      if (p_norm > 0 && g_norm > 0) scale *= eta_ * p_norm / (g_norm + weight_decay_ * p_norm + eps_);
      if (weight_decay_ != 0) {
        d = grad.clone();
        add_(d, p, weight_decay_);
      }
    }
    if (momentum_ == 0) {
      add_(p, d, -scale);
      return;
    }
    Tensor& v = buffer(momentum_buffer_, i);
    if (!v.defined()) {
      v = mul(d, scale);  // momentum * 0 + scale * d
    } else {
      mul_(v, momentum_);
      add_(v, d, scale);
    }
    if (nesterov_) add_(p, d, -scale);
    add_(p, v, nesterov_ ? -momentum_ : -1.0);
  });
}

LarsOptions LARS::options() const {
  return {.lr = lr(),
          .momentum = momentum_,
          .weight_decay = weight_decay_,
          .eta = eta_,
          .eps = eps_,
          .nesterov = nesterov_,
          .exclude_1d = exclude_1d_};
}

std::unique_ptr<Optimizer> LARS::rebind_slices(std::vector<Variable> params, SliceNorms norms) const {
  DTRAIN_CHECK(norms.tensor_of.size() == params.size() && norms.sum_over_ranks != nullptr,
               "LARS: rebind_slices needs the whole tensor of each of the {} slices and a sum over the ranks",
               params.size());
  auto rebound = std::make_unique<LARS>(std::move(params), options());
  rebound->slices_ = std::move(norms);
  return rebound;
}

std::unique_ptr<Optimizer> LARS::rebind(std::vector<Variable> /*params*/) const {
  DTRAIN_FAIL(
      "LARS: cannot be rebound to other parameters (a parameter server's shards): its trust ratio is a norm over "
      "each whole parameter tensor, and a shard may be a slice of one or span several; use a strategy that keeps "
      "whole tensors on each rank (e.g. data parallel)");
}

}  // namespace dtrain::optim
