#include "train/loss_watch.h"

#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace dtrain::train {

namespace {
// A running median at or above this share of the starting level has not left it.
constexpr double kStalled = 0.95;
// A running median above this many times the best one, and back this share of the way from
// the best to the starting level, has grown. The best is the lowest of noisy medians: a
// healthy run's median wanders 1.5x above it once the loss is small (the main job's did, at
// 0.31 against 0.21 from 2.3), which is no divergence; a diverging one climbs back toward
// where it started.
constexpr double kGrown = 1.5;
constexpr double kRegained = 0.5;
// The spike check holds a loss against the running median, but never against less than this
// share of the starting level: near zero (a task learnt) a loss of twice nothing is noise.
constexpr double kSpikeFloor = 0.1;
}  // namespace

void check_guard_options(const GuardOptions& o) {
  DTRAIN_CHECK(o.spike_factor == 0 || o.spike_factor > 1, "guard: spike_factor must be > 1 (0: off), got {}",
               o.spike_factor);
  DTRAIN_CHECK(o.window >= 3, "guard: window must be >= 3 losses, got {}", o.window);
  DTRAIN_CHECK(o.snapshot_every >= 1, "guard: snapshot_every must be >= 1 update, got {}", o.snapshot_every);
  DTRAIN_CHECK(o.max_rollbacks >= 0, "guard: max_rollbacks must be >= 0, got {}", o.max_rollbacks);
  DTRAIN_CHECK(o.lr_factor > 0 && o.lr_factor <= 1, "guard: lr_factor must lie in (0, 1], got {}", o.lr_factor);
  DTRAIN_CHECK(o.cooldown >= 0, "guard: cooldown must be >= 0 updates, got {}", o.cooldown);
  DTRAIN_CHECK(o.nonfinite_patience >= 1, "guard: nonfinite_patience must be >= 1, got {}", o.nonfinite_patience);
  DTRAIN_CHECK(o.stall_updates >= 0, "guard: stall_updates must be >= 0 (0: off), got {}", o.stall_updates);
  DTRAIN_CHECK(o.check_every >= 1, "guard: check_every must be >= 1, got {}", o.check_every);
}

LossWatch::LossWatch(const GuardOptions& options, bool scaled) : options_(options), scaled_(scaled) {
  check_guard_options(options_);
}

double LossWatch::median() const {
  if (static_cast<std::int64_t>(window_.size()) < options_.window) return 0;
  std::vector<double> sorted(window_.begin(), window_.end());
  const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  return *mid;
}

LossCheck LossWatch::observe(std::int64_t step, double loss) {
  LossCheck check{.loss = loss, .median = median(), .reference = 0, .report = {}, .report_kind = ""};
  if (!std::isfinite(loss)) {
    ++nonfinite_run_;
    // A loss scaler skips an overflowing step and lowers its scale; a loss that stays
    // non-finite is beyond it.
    if (!scaled_ || nonfinite_run_ >= options_.nonfinite_patience) check.trouble = LossTrouble::NonFinite;
    return check;
  }
  nonfinite_run_ = 0;
  check.reference = std::max(check.median, kSpikeFloor * start_level_);
  if (options_.spike_factor > 0 && check.median > 0 && loss > options_.spike_factor * check.reference) {
    check.trouble = LossTrouble::Spike;  // not in the window: it would lift the median
    return check;
  }
  window_.push_back(loss);
  if (static_cast<std::int64_t>(window_.size()) > options_.window) window_.pop_front();
  const double m = median();
  if (m > 0) report_progress(step, m, check);
  return check;
}

void LossWatch::report_progress(std::int64_t step, double m, LossCheck& check) {
  if (start_level_ == 0) {
    start_level_ = best_ = m;
    start_step_ = best_step_ = step;
  }
  if (m < best_) {
    best_ = m;
    best_step_ = step;
  }
  const std::int64_t stretch = options_.stall_updates;
  if (stretch == 0 || step - reported_at_ < stretch) return;
  if (best_ >= kStalled * start_level_ && step - start_step_ >= stretch) {
    check.report = fmt::format(
        "the loss has stayed at its starting level for {} updates (running median {:.4g}, {:.4g} at update {}): "
        "the model is not learning (learning rate too high, or too low?)",
        step - start_step_, m, start_level_, start_step_);
    check.report_kind = "stalled";
  } else if (m > kGrown * best_ && m > best_ + kRegained * (start_level_ - best_) && step - best_step_ >= stretch) {
    check.report = fmt::format(
        "the loss has grown for {} updates: running median {:.4g}, {:.2f}x its best ({:.4g} at update {}), "
        "back {:.0f}% of the way to its starting level {:.4g}",
        step - best_step_, m, m / best_, best_, best_step_, 100 * (m - best_) / (start_level_ - best_), start_level_);
    check.report_kind = "growing";
  }
  if (!check.report.empty()) reported_at_ = step;
}

}  // namespace dtrain::train
