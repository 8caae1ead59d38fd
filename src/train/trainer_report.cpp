// The Trainer's report of an epoch on the reporting rank: the epoch line, and the same
// figures as metrics-file records and TensorBoard scalars.
#include "dtrain/train/metrics_log.h"
#include "dtrain/train/tensorboard.h"
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
                           scaler_.scale_value());
    }
    const std::string train =
        metrics_fns_.empty()
            ? ""
            : fmt::format(", train {} {:.2f}%", label_of(metrics_fns_.front().name), 100 * s.train_accuracy);
    fmt::print(options_.out, "epoch {}/{}: train loss {:.4f}{}{}, {:.0f} samples/s, {:.1f} s{}\n", s.epoch,
               options_.epochs, s.train_loss, train, test, s.samples_per_s, s.seconds, notes);
    std::fflush(options_.out);
  }
  if (!metrics_ && !tensorboard_) return;
  // The global step is TensorBoard's x-axis: in the metrics file it ties each line to its scalars.
  std::vector<std::pair<std::string, double>> values{
      {"epoch", s.epoch}, {"step", static_cast<double>(global_step_)}, {"train_loss", s.train_loss}};
  if (!metrics_fns_.empty()) values.emplace_back("train_" + metrics_fns_.front().name, s.train_accuracy);
  if (test_loader_) {
    values.insert(values.end(), {{"test_loss", s.test_loss}, {"test_samples", static_cast<double>(s.test_samples)}});
  }
  for (const auto& [name, value] : s.test_metrics) values.emplace_back("test_" + name, value);
  values.insert(values.end(), {{"bad_samples_skipped", static_cast<double>(s.bad_samples_skipped)},
                               {"loader_wait_s", s.loader_wait_s}});
  values.insert(values.end(), {{"samples_per_s", s.samples_per_s}, {"seconds", s.seconds}});
  values.insert(values.end(), {{"compute_s", s.time.compute()},
                               {"exposed_comm_s", s.time[trace::Phase::Communication]},
                               {"data_wait_s", s.time[trace::Phase::Data]},
                               {"exposed_comm_share", s.exposed_comm_share()}});
  if (s.rollbacks > 0) values.emplace_back("rollbacks", s.rollbacks);
  if (s.replica_divergence) values.emplace_back("replica_max_diff", *s.replica_divergence);
  if (train_config_.scaler) {
    values.insert(values.end(), {{"skipped_updates", static_cast<double>(s.nonfinite_updates)},
                                 {"loss_scale", scaler_.scale_value()}});
  }
  values.insert(values.end(), s.strategy_report.values.begin(), s.strategy_report.values.end());
  if (tensorboard_) {
    // At the epoch's last update, so that they line up with the step scalars.
    for (const auto& [name, value] : values) {
      if (name != "epoch" && name != "step") tensorboard_->add_scalar("epoch/" + name, value, global_step_);
    }
    tensorboard_->flush();
  }
  if (metrics_) metrics_->write("epoch", values, s.strategy_report.series);
}

}  // namespace dtrain::train
