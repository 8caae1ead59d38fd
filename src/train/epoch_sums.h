// An epoch's running sums on this rank (private to train), kept on the model's device so
// that adding a step's numbers never waits for the step. A non-finite loss adds 0 and is
// counted apart: with a loss scaler that is a skipped step, without one it is divergence.
#pragma once

#include "dtrain/dist/strategy/strategy.h"

#include <cstdint>
#include <vector>

namespace dtrain::train {

// The epoch's sums over every rank.
struct EpochTotals {
  double loss_sum = 0;             // over the updates with a finite loss
  std::int64_t finite_losses = 0;  // updates with a finite loss
  std::int64_t nonfinite_losses = 0;
  std::int64_t correct = 0;  // by the first metric
  std::int64_t counted = 0;  // samples the metric counted over
  std::int64_t samples = 0;
};

class EpochSums {
 public:
  explicit EpochSums(Device device);

  void add(const dist::StepStats& s);

  // This rank's updates with a non-finite loss so far (reading waits for the device).
  std::int64_t nonfinite() const { return losses_ - finite_.item<std::int64_t>(); }
  std::int64_t updates() const { return updates_; }
  std::int64_t samples() const { return samples_; }

  // This rank's sums so far, as a checkpoint keeps them (7 numbers, an order fixed by the
  // checkpoint format: loss sum, finite, correct, counted, losses, updates, samples), and back.
  static constexpr std::size_t kSavedValues = 7;
  std::vector<double> values() const;
  void restore(const std::vector<double>& v);
  // Sums that start an epoch resumed at update `updates` with `v` (a checkpoint's values,
  // or nothing when they were another job shape's: then only the update count carries).
  static std::vector<double> resumed(const std::vector<double>* v, std::int64_t updates);

  // Over every rank (a collective through the strategy).
  EpochTotals totals(dist::Strategy& strategy) const;

 private:
  Tensor loss_sum_, finite_, correct_, zero_;
  std::int64_t updates_ = 0, samples_ = 0, counted_ = 0, losses_ = 0;
};

}  // namespace dtrain::train
