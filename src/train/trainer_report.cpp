// The Trainer's report on the reporting rank: each epoch's line (the same figures go to the
// metrics file and TensorBoard through their observers), and where the time went.
#include "dtrain/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::train {
namespace {

// A metric's name as the epoch line shows it: "top5_accuracy" -> "top5 accuracy".
std::string label_of(std::string name) {
  std::replace(name.begin(), name.end(), '_', ' ');
  return name;
}

}  // namespace

void Trainer::report(const EpochSummary& s) const {
  if (!strategy_->reports()) return;
  if (options_.verbose) {
    // "test loss L, test accuracy A%, top5 accuracy B%": each metric by its name.
    std::string test = test_loader_ ? fmt::format(", test loss {:.4f}", s.test_loss) : "";
    for (std::size_t m = 0; m < s.test_metrics.size(); ++m) {
      test += fmt::format(", {}{} {:.2f}%", m == 0 ? "test " : "", label_of(s.test_metrics[m].first),
                          100 * s.test_metrics[m].second);
    }
    std::string notes = s.replica_divergence ? fmt::format(", replica max diff {:.3g}", *s.replica_divergence) : "";
    if (!s.strategy_report.text.empty()) notes += ", " + s.strategy_report.text;
    if (s.bad_samples_skipped > 0) notes += fmt::format(", {} bad sample(s) skipped", s.bad_samples_skipped);
    if (s.rollbacks > 0) notes += fmt::format(", {} rollback(s) after divergence", s.rollbacks);
    if (s.loader_wait_s >= 0.05) notes += fmt::format(", waited {:.1f} s for data", s.loader_wait_s);
    if (train_config_.scaler && s.nonfinite_updates > 0) {
      notes += fmt::format(", {} update(s) skipped for inf/NaN (loss scale {:g})", s.nonfinite_updates,
                           s.loss_scale.value_or(0));
    }
    const std::string train =
        metrics_fns_.empty()
            ? ""
            : fmt::format(", train {} {:.2f}%", label_of(metrics_fns_.front().name), 100 * s.train_accuracy);
    fmt::print(options_.out, "epoch {}/{}: train loss {:.4f}{}{}, {:.0f} samples/s, {:.1f} s{}\n", s.epoch,
               options_.epochs, s.train_loss, train, test, s.samples_per_s, s.seconds, notes);
    std::fflush(options_.out);
  }
}

void Trainer::report_time(const std::vector<EpochSummary>& epochs) const {
  if (!strategy_->reports() || !options_.verbose || epochs.empty()) return;
  const auto cell = [](double part, double whole) {
    return fmt::format("{:8.2f} {:>6}", part, whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-");
  };
  fmt::print(options_.out, "where the training time went on rank {} (seconds, share of the epoch):\n",
             strategy_->rank());
  fmt::print(options_.out, "{:>5} {:>9}  {:>15}  {:>15}  {:>15}  {:>15}\n", "epoch", "training", "compute",
             "exposed comm", "data wait", "other");
  for (const EpochSummary& e : epochs) {
    const double comm = e.time[trace::Phase::Communication], data = e.time[trace::Phase::Data];
    const double other = std::max(0.0, e.seconds - e.time.compute() - comm - data);
    fmt::print(options_.out, "{:>5} {:>9.2f}  {}  {}  {}  {}\n", e.epoch, e.seconds, cell(e.time.compute(), e.seconds),
               cell(comm, e.seconds), cell(data, e.seconds), cell(other, e.seconds));
  }
  std::fflush(options_.out);
}

}  // namespace dtrain::train
