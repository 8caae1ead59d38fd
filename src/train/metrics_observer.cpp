// The metrics file (TrainerOptions::metrics) as an observer of the run: one JSON line per
// epoch, evaluation inside an epoch, guard report, and the strategy's summary at the end.
#include "dtrain/train/metrics_log.h"
#include "train/observers.h"

namespace dtrain::train {
namespace {

class MetricsObserver : public TrainObserver {
 public:
  MetricsObserver(const std::filesystem::path& file, RecordContext context) : log_(file), context_(context) {}

  void on_evaluation(const EvalEvent& e) override {
    if (e.closes_epoch) return;  // in the epoch's record
    log_.write("evaluation", {{"epoch", e.epoch - 1 + e.fraction},
                              {"step", static_cast<double>(e.global_step)},
                              {"test_loss", e.result.loss()},
                              {"test_accuracy", e.result.accuracy()},
                              {"seconds", e.seconds}});
  }

  void on_guard(const GuardEvent& g) override {
    if (g.kind == GuardEvent::Kind::Warning) {
      log_.write("divergence", {{"step", static_cast<double>(g.global_step)},
                                {"loss", g.loss},
                                {"running_median", g.running_median},
                                {g.trouble, 1}});
      return;
    }
    log_.write("rollback", {{"step", static_cast<double>(g.global_step)},
                            {"loss", g.loss},
                            {"running_median", g.running_median},
                            {g.trouble, 1},
                            {"restored_step", static_cast<double>(g.restored_step)},
                            {"skipped_from", static_cast<double>(g.skipped_from)},
                            {"skipped_to", static_cast<double>(g.skipped_to)},
                            {"rollbacks", g.rollbacks}});
  }

  void on_epoch_end(const EpochSummary& s) override {
    log_.write("epoch", epoch_record(s, context_), s.strategy_report.series);
  }

  void on_fit_end(const FitResult& r) override {
    const dist::EpochReport& run = r.strategy_report;
    if (!run.values.empty()) log_.write("summary", run.values, run.series);
  }

 private:
  MetricsLog log_;
  RecordContext context_;
};

}  // namespace

std::shared_ptr<TrainObserver> make_metrics_observer(const std::filesystem::path& file, RecordContext context) {
  return std::make_shared<MetricsObserver>(file, context);
}

}  // namespace dtrain::train
