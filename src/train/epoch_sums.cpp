#include "train/epoch_sums.h"

#include "dtrain/core/error.h"
#include "train/rank_sums.h"

namespace dtrain::train {

EpochSums::EpochSums(Device device)
    : loss_sum_(Tensor::zeros({}, {DType::f64, device})),
      finite_(Tensor::zeros({}, {DType::i64, device})),
      correct_(Tensor::zeros({}, {DType::i64, device})),
      zero_(Tensor::zeros({}, {DType::f64, device})) {}

void EpochSums::add(const dist::StepStats& s) {
  ++updates_;
  samples_ += s.samples;
  if (s.correct.defined()) {
    correct_ = dtrain::add(correct_, s.correct);
    counted_ += s.samples;
  }
  if (!s.loss.defined()) return;
  const Tensor loss = s.loss.to(DType::f64);
  const Tensor finite = eq(mul(loss, 0.0), zero_);  // inf * 0 and NaN * 0 are NaN
  loss_sum_ = dtrain::add(loss_sum_, where(finite, loss, zero_));
  finite_ = dtrain::add(finite_, finite.to(DType::i64));
  ++losses_;
}

std::vector<double> EpochSums::values() const {
  return {loss_sum_.item(),
          static_cast<double>(finite_.item<std::int64_t>()),
          static_cast<double>(correct_.item<std::int64_t>()),
          static_cast<double>(counted_),
          static_cast<double>(losses_),
          static_cast<double>(updates_),
          static_cast<double>(samples_)};
}

void EpochSums::restore(const std::vector<double>& v) {
  DTRAIN_CHECK(v.size() == kSavedValues, "checkpoint: the epoch sums hold {} values, expected {}", v.size(),
               kSavedValues);
  const Device device = loss_sum_.device();
  loss_sum_ = Tensor::full({}, v[0], {DType::f64, device});
  finite_ = Tensor::full({}, v[1], {DType::i64, device});
  correct_ = Tensor::full({}, v[2], {DType::i64, device});
  counted_ = static_cast<std::int64_t>(v[3]);
  losses_ = static_cast<std::int64_t>(v[4]);
  updates_ = static_cast<std::int64_t>(v[5]);
  samples_ = static_cast<std::int64_t>(v[6]);
}

std::vector<double> EpochSums::resumed(const std::vector<double>* v, std::int64_t updates) {
  std::vector<double> out = v && v->size() == kSavedValues ? *v : std::vector<double>(kSavedValues, 0.0);
  out[5] = static_cast<double>(updates);  // the updates already done in the epoch
  return out;
}

EpochTotals EpochSums::totals(dist::Strategy& strategy) const {
  const auto finite = finite_.item<std::int64_t>();
  const std::vector<double> t =
      over_ranks(strategy, {loss_sum_.item(), static_cast<double>(finite), static_cast<double>(losses_ - finite),
                            static_cast<double>(correct_.item<std::int64_t>()), static_cast<double>(counted_),
                            static_cast<double>(samples_)});
  const auto count = [](double x) { return static_cast<std::int64_t>(x); };
  return {.loss_sum = t[0],
          .finite_losses = count(t[1]),
          .nonfinite_losses = count(t[2]),
          .correct = count(t[3]),
          .counted = count(t[4]),
          .samples = count(t[5])};
}

}  // namespace dtrain::train
