#include "dtrain/optim/loss_scaler.h"

#include "dtrain/autograd/functions.h"
#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

namespace dtrain::optim {

namespace {

// A scalar that is NaN iff g holds an inf or NaN: x * 0 is 0 for every finite x (so the
// sum cannot overflow) and NaN for inf and NaN, and a sum with a NaN term is NaN.
Tensor nonfinite_probe(const Tensor& g) { return sum(mul(g, 0.0)).to(DType::f64); }

}  // namespace

LossScaler::LossScaler(LossScalerOptions options)
    : scale_(options.init_scale),
      growth_factor_(options.growth_factor),
      backoff_factor_(options.backoff_factor),
      growth_interval_(options.growth_interval),
      enabled_(options.enabled) {
  // Checked even when disabled, so that a bad configuration fails before it is enabled.
  DTRAIN_CHECK(std::isfinite(scale_) && scale_ > 0, "LossScaler: init_scale must be a finite number > 0, got {}",
               scale_);
  DTRAIN_CHECK(std::isfinite(growth_factor_) && growth_factor_ > 1,
               "LossScaler: growth_factor must be a finite number > 1, got {}", growth_factor_);
  DTRAIN_CHECK(backoff_factor_ > 0 && backoff_factor_ < 1, "LossScaler: backoff_factor must be in (0, 1), got {}",
               backoff_factor_);
  DTRAIN_CHECK(growth_interval_ >= 1, "LossScaler: growth_interval must be >= 1, got {}", growth_interval_);
}

Variable LossScaler::scale(const Variable& loss) const {
  DTRAIN_CHECK(loss.defined(), "LossScaler::scale: the loss is undefined");
  if (!enabled_) return loss;
  return mul(loss, scale_);
}

LossScaler::Pending* LossScaler::find(const Optimizer& optimizer) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const Pending& p) { return p.optimizer == &optimizer; });
  return it == pending_.end() ? nullptr : &*it;
}

void LossScaler::unscale(Optimizer& optimizer) {
  if (!enabled_) return;
  if (const Pending* done = find(optimizer)) {
    DTRAIN_FAIL("LossScaler::unscale: {} for this optimizer since the last update()",
                done->stepped ? "step() was already called" : "already called");
  }
  Pending pending{&optimizer};
  const double inv_scale = 1.0 / scale_;
  NoGradGuard no_grad;
  for (const Variable& p : optimizer.params()) {
    if (!p.has_grad()) continue;
    Tensor g = p.grad();
    // As in clip_grad_norm: a gradient set by hand may be a strided view sharing storage
    // with something else, which must not be written through.
    if (g.is_contiguous()) {
      mul_(g, inv_scale);
    } else {
      g = mul(g, inv_scale);
      Variable handle = p;
      handle.set_grad(g);
    }
    // Probed after unscaling: with a scale below 1 a finite gradient can overflow here.
    Tensor probe = nonfinite_probe(g);
    auto acc = std::find_if(pending.nonfinite.begin(), pending.nonfinite.end(),
                            [&](const Tensor& t) { return t.device() == g.device(); });
    if (acc == pending.nonfinite.end()) {
      pending.nonfinite.push_back(probe);
    } else {
      add_(*acc, probe);
    }
  }
  pending_.push_back(std::move(pending));
}

bool LossScaler::found_inf(Pending& pending) {
  if (!pending.found_inf) {
    bool any = false;
    for (const Tensor& t : pending.nonfinite) any = any || std::isnan(t.item());
    pending.found_inf = any;
    pending.nonfinite.clear();
  }
  return *pending.found_inf;
}

bool LossScaler::step(Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  Pending* pending = find(optimizer);
  DTRAIN_CHECK(!pending || !pending->stepped,
               "LossScaler::step: already called for this optimizer since the last update()");
  if (!pending) {
    unscale(optimizer);
    pending = &pending_.back();
  }
  pending->stepped = true;
  if (found_inf(*pending)) return false;
  optimizer.step();
  return true;
}

void LossScaler::mark_nonfinite(Optimizer& optimizer) {
  if (!enabled_) return;
  Pending* pending = find(optimizer);
  DTRAIN_CHECK(pending && !pending->stepped,
               "LossScaler::mark_nonfinite: call unscale() for this optimizer first, and before step()");
  pending->nonfinite.clear();
  pending->found_inf = true;
}

void LossScaler::update() {
  if (!enabled_) return;
  DTRAIN_CHECK(!pending_.empty(),
               "LossScaler::update: no unscale() or step() since the last update(), so nothing to update from");
  bool any = false;
  for (Pending& p : pending_) any = any || found_inf(p);
  pending_.clear();
  if (any) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
    return;
  }
  // >=, not ==: a tracker loaded from a run with a longer interval may already exceed it.
  if (++growth_tracker_ >= growth_interval_) {
    growth_tracker_ = 0;
    const double grown = scale_ * growth_factor_;
    if (std::isfinite(grown)) scale_ = grown;
  }
}

NamedTensors LossScaler::state() const {
  if (!enabled_) return {};
  NamedTensors out;
  out.emplace_back("scale", Tensor::scalar(scale_, {DType::f64}));
  out.emplace_back("growth_tracker", Tensor::scalar(static_cast<double>(growth_tracker_), {DType::i64}));
  return out;
}

void LossScaler::load_state(const NamedTensors& state) {
  if (!enabled_) return;
  std::optional<double> scale;
  std::optional<std::int64_t> tracker;
  std::unordered_set<std::string> seen;
  for (const auto& [key, t] : state) {
    DTRAIN_CHECK(seen.insert(key).second, "LossScaler::load_state: entry '{}' appears twice", key);
    DTRAIN_CHECK(key == "scale" || key == "growth_tracker", "LossScaler::load_state: unknown entry '{}'", key);
    DTRAIN_CHECK(t.defined() && t.numel() == 1, "LossScaler::load_state: '{}' must hold one value", key);
    const double value = t.item();
    if (key == "scale") {
      DTRAIN_CHECK(std::isfinite(value) && value > 0,
                   "LossScaler::load_state: 'scale' must be a finite number > 0, got {}", value);
      scale = value;
    } else {
      DTRAIN_CHECK(value >= 0 && value < 0x1p63 && value == std::floor(value),
                   "LossScaler::load_state: 'growth_tracker' must be a count >= 0, got {}", value);
      tracker = static_cast<std::int64_t>(value);
    }
  }
  DTRAIN_CHECK(scale && tracker, "LossScaler::load_state: the state lacks '{}'", !scale ? "scale" : "growth_tracker");
  scale_ = *scale;
  growth_tracker_ = *tracker;
}

}  // namespace dtrain::optim
