// An epoch's figures as the metrics file and TensorBoard record them (observers.h).
#include "train/observers.h"

namespace dtrain::train {

std::vector<std::pair<std::string, double>> epoch_record(const EpochSummary& s, const RecordContext& context) {
  const std::vector<Metric>& metrics = *context.metrics;
  // The global step is TensorBoard's x-axis: in the metrics file it ties each line to its scalars.
  std::vector<std::pair<std::string, double>> values{
      {"epoch", s.epoch}, {"step", static_cast<double>(s.global_step)}, {"train_loss", s.train_loss}};
  if (!metrics.empty()) values.emplace_back("train_" + metrics.front().name, s.train_accuracy);
  if (context.has_test) {
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
  if (s.loss_scale) {
    values.insert(values.end(),
                  {{"skipped_updates", static_cast<double>(s.nonfinite_updates)}, {"loss_scale", *s.loss_scale}});
  }
  values.insert(values.end(), s.strategy_report.values.begin(), s.strategy_report.values.end());
  return values;
}

}  // namespace dtrain::train
