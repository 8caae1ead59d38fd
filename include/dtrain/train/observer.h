// Observers of a training run: what the Trainer does besides training (progress, the
// metrics file, TensorBoard, the timeline, fault injection, a program's own callbacks)
// watches the run through these hooks instead of living in the training loop. The Trainer
// registers its own observers from its options (TrainerOptions); a program adds more with
// Trainer::add_observer. Every hook is a no-op by default: override the ones you need.
//
//   struct LossPrinter : train::TrainObserver {
//     bool wants_loss(const train::StepPosition& at) override { return at.global_step % 100 == 0; }
//     void on_step_end(const train::StepEvent& e) override {
//       if (e.loss) fmt::print("step {}: loss {:.4f}\n", e.global_step, *e.loss);
//     }
//   };
//   trainer.add_observer(std::make_shared<LossPrinter>());
//
// Observers are called in the order they were registered: the Trainer's own first (so that
// its lines and files come as they always have), then the program's, on every training rank
// (a parameter server's serving ranks call none). The Trainer's fault injection stays last of
// all, since it simulates a crash after everything an update does. A hook's exception ends
// fit() as the Trainer's own errors do.
#pragma once

#include "dtrain/core/trace.h"
#include "dtrain/dist/strategy/strategy.h"

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::train {

// What one epoch did, as the reporting rank prints it.
struct EpochSummary {
  int epoch = 0;              // 1-based
  double train_loss = 0;      // mean over every rank's updates with a finite loss
  double train_accuracy = 0;  // over every rank's training samples
  // Updates whose loss was inf or NaN, summed over the ranks: with a loss scaler, steps it
  // skipped (mixed precision overflow); without one the Trainer stops as diverged.
  std::int64_t nonfinite_updates = 0;
  // Rollbacks this epoch (train/guard.h): on every rank that steps with the others, or this
  // worker's where ranks do not (asynchronous parameter servers).
  int rollbacks = 0;
  double test_loss = 0;           // over the whole test set (all shards)
  double test_accuracy = 0;       // by the first metric
  std::int64_t test_samples = 0;  // evaluated, over every shard: the whole test set, after a lost worker too
  // Every metric's fraction, by name ("accuracy", "top5_accuracy", ...).
  std::vector<std::pair<std::string, double>> test_metrics = {};
  std::int64_t samples = 0;      // over all ranks (a DistributedSampler's padding included)
  std::int64_t updates = 0;      // this rank's
  std::int64_t global_step = 0;  // this rank's updates since the start, at the epoch's end
  double samples_per_s = 0;      // over all shards
  double seconds = 0;
  std::optional<double> replica_divergence = std::nullopt;
  // Training samples the dataset left out as unreadable this epoch, over all ranks.
  std::int64_t bad_samples_skipped = 0;
  // Seconds the reporting rank's training step waited for its data loader this epoch: near
  // zero when the loader keeps ahead.
  double loader_wait_s = 0;
  dist::EpochReport strategy_report = {};  // the strategy's epoch hooks' (e.g. staleness)
  // Where the reporting rank's training seconds went (core/trace.h): compute (forward,
  // backward, optimizer), exposed communication (waiting for messages that the step needs)
  // and data wait; the rest of `seconds` is the loop's own work.
  trace::PhaseTotals time = {};
  // The loss scaler's scale at the epoch's end, where there is one (TrainerOptions::loss_scaler).
  std::optional<double> loss_scale = std::nullopt;
  double exposed_comm_share() const { return seconds > 0 ? time[trace::Phase::Communication] / seconds : 0; }
};

struct FitResult {
  std::vector<EpochSummary> epochs;
  double test_accuracy = 0;  // after the last epoch run (none left to train: the restored model's)
  bool reached_target = false;
  double seconds = 0;  // from the first step to the end of the last evaluation
  // The strategy's report at the end of training (e.g. a parameter server's totals).
  dist::EpochReport strategy_report = {};
  // The launcher asked the job to stop at a checkpoint (DTRAIN_ELASTIC_CONTROL), which is
  // written: it relaunches it at another size. A program exits with kRelaunchExitCode.
  bool stopped_for_relaunch = false;
};

// The exit status of a job that stopped at a checkpoint for dtrain-launch to relaunch it on
// another set of hosts (EX_TEMPFAIL): not a failure.
inline constexpr int kRelaunchExitCode = 75;

// At the end of each optimizer update. `stats` is on the device (reading it waits) and
// valid only during the callback; `loss` is its loss where the Trainer read it
// (TrainObserver::wants_loss), so that reading it costs nothing.
struct StepEvent {
  int epoch = 0;                 // 1-based
  std::int64_t step = 0;         // update within the epoch, 1-based
  std::int64_t global_step = 0;  // updates since the start, 1-based
  double lr = 0;
  const dist::StepStats* stats = nullptr;
  std::optional<double> loss = std::nullopt;
};

// Sums (not means) over every shard.
struct EvalResult {
  double loss_sum = 0;
  std::vector<std::int64_t> counts = {};  // per metric (TrainerOptions::eval_metrics)
  std::int64_t samples = 0;
  double loss() const { return samples ? loss_sum / static_cast<double>(samples) : 0; }
  // Metric `m`'s fraction of the samples (0 without that metric).
  double fraction(std::size_t m) const {
    return samples && m < counts.size() ? static_cast<double>(counts[m]) / static_cast<double>(samples) : 0;
  }
  double accuracy() const { return fraction(0); }
};

// Where fit() starts (after a resume: where the checkpoint left off).
struct FitStart {
  int first_epoch = 1;           // 1-based; > epochs when nothing is left to train
  int epochs = 0;                // TrainerOptions::epochs
  std::int64_t global_step = 0;  // updates done before the first one fit() runs
  std::int64_t updates_per_epoch = 0;
};

struct EpochStart {
  int epoch = 0;  // 1-based
  int epochs = 0;
  std::int64_t updates = 0;     // in the epoch (of all ranks where batches are handed out)
  std::int64_t first_step = 0;  // updates of the epoch done before (a resumed epoch), 0 otherwise
  // Shards the epoch's data is split into: a rank's samples times this is an update's
  // samples over the ranks (fixed shards).
  int shards = 1;
};

// An update about to be reported, before its loss is read (wants_loss).
struct StepPosition {
  int epoch = 0;                 // 1-based
  std::int64_t step = 0;         // update within the epoch, 1-based
  std::int64_t global_step = 0;  // updates since the start, 1-based
};

// One evaluation of the test set during fit().
struct EvalEvent {
  int epoch = 0;  // 1-based
  // Of the epoch trained when it ran: < 1 inside it (TrainerOptions::evaluations_per_epoch),
  // else its closing evaluation, whose figures the EpochSummary also holds. An inside one that
  // reached the target accuracy closes its epoch and is not reported twice.
  double fraction = 1;
  bool closes_epoch = true;
  std::int64_t global_step = 0;
  double seconds = 0;  // since fit() started
  EvalResult result = {};
};

// What the guard (train/guard.h) found at a check: a warning (the loss stalls or grows;
// training goes on) or a rollback to its last good snapshot.
struct GuardEvent {
  enum class Kind { Warning, Rollback };
  Kind kind = Kind::Warning;
  std::int64_t global_step = 0;
  std::string text;  // the line the reporting rank prints
  double loss = 0;   // as the check saw it, agreed over the ranks that step together
  double running_median = 0;
  // Warning: "stalled" or "growing"; Rollback: "spike" or "nonfinite".
  std::string trouble;
  // Rollback only: the global step the state was restored to, the global steps whose
  // batches were skipped, and the run's rollbacks so far.
  std::int64_t restored_step = 0;
  std::int64_t skipped_from = 0, skipped_to = 0;
  int rollbacks = 0;
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;

  // After a resume and before the first update.
  virtual void on_fit_start(const FitStart&) {}
  virtual void on_epoch_start(const EpochStart&) {}
  // Whether this observer needs update `at`'s loss. On a GPU the loss stays on the device and
  // is read (a wait for the device) only when some observer asks, at the epoch's last update,
  // and where the guard checks; on the CPU it is read at every update. Asked of every
  // observer, once per update, right before that update's on_step_end: an observer may
  // remember its answer (a progress line that is due now may not be a moment later).
  virtual bool wants_loss(const StepPosition& /*at*/) { return false; }
  // After every optimizer update (StepEvent::loss: set when the loss was read).
  virtual void on_step_end(const StepEvent&) {}
  // The epoch's updates stop for a while: for an evaluation inside the epoch, at the end of
  // its updates, or for a line the Trainer prints (the guard's) on the reporting rank. A
  // display that redraws a line in place ends it here, so that what follows starts cleanly.
  virtual void on_pause() {}
  // After each evaluation inside an epoch, and after the epoch's closing one.
  virtual void on_evaluation(const EvalEvent&) {}
  // After the guard's warning or rollback (its line already printed).
  virtual void on_guard(const GuardEvent&) {}
  // The epoch's updates are done and summed over the ranks, before its closing evaluation:
  // the summary's training figures only. Every training rank calls it at the same point, so
  // an observer may run a collective over them here (the timeline gathers its events).
  virtual void on_train_epoch_end(const EpochSummary&) {}
  // After the epoch's closing evaluation and its line, before its checkpoint.
  virtual void on_epoch_end(const EpochSummary&) {}
  // Training is over (the last evaluation done), before the Trainer's closing report and the
  // strategy's end of training (FitResult::strategy_report is not set yet). A collective
  // over the training ranks is still allowed here.
  virtual void on_train_end(const FitResult&) {}
  // The end of fit(), after its closing lines.
  virtual void on_fit_end(const FitResult&) {}
  // fit() is ending with `error` (thrown again after this): a display ends its line.
  virtual void on_exception(const std::exception_ptr& /*error*/) {}
};

}  // namespace dtrain::train
