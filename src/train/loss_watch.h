// LossWatch: the Trainer's reading of the training loss for its guard (private to train;
// dtrain/train/guard.h says what is found and what the Trainer does about it). It sees the
// loss of each checked update, the same on every rank that steps with the others, and keeps
// the running median of the last window of finite, ordinary losses, the level the loss
// started at and its best running median.
#pragma once

#include "dtrain/train/guard.h"

#include <cstdint>
#include <deque>
#include <string>

namespace dtrain::train {

enum class LossTrouble : std::uint8_t { None, NonFinite, Spike };

struct LossCheck {
  LossTrouble trouble = LossTrouble::None;
  double loss = 0;
  double median = 0;     // the running median (0 before the window fills)
  double reference = 0;  // what a spike is held against: the median, or the floor
  // A stalled or growing loss to report now ("" for none): what it did, without the action.
  std::string report;
  const char* report_kind = "";  // "stalled" or "growing"
};

class LossWatch {
 public:
  LossWatch(const GuardOptions& options, bool scaled);

  // The loss of the checked update `step` (global, 1-based): NaN or inf when any rank's was.
  LossCheck observe(std::int64_t step, double loss);
  // The median of the window (0 while it is not full).
  double median() const;
  // After a rollback: a run of non-finite losses starts over.
  void after_rollback() { nonfinite_run_ = 0; }

 private:
  void report_progress(std::int64_t step, double median, LossCheck& check);

  GuardOptions options_;
  bool scaled_;
  std::deque<double> window_;
  int nonfinite_run_ = 0;   // consecutive non-finite losses
  double start_level_ = 0;  // the median of the first full window
  std::int64_t start_step_ = 0;
  double best_ = 0;  // the lowest running median, and where
  std::int64_t best_step_ = 0;
  std::int64_t reported_at_ = 0;  // the last stall or growth report
};

}  // namespace dtrain::train
