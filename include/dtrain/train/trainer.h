// Trainer: the one training loop, for every distribution strategy. It owns what every
// trainer program needs: this rank's data loaders (its strategy's shard of each dataset),
// the epoch loop, the learning rate per global update, gradient accumulation, clipping,
// mixed precision and the loss scaler, sharded evaluation, target accuracy, the guard and
// checkpoints. What it does besides (progress, JSON-lines metrics, TensorBoard, the
// timeline, fault injection, a program's callbacks) are observers of the run
// (train/observer.h), which it registers from its options. How a step is distributed is
// the strategy's business.
//
//   auto strategy = dist::make_strategy("", dist::world(), device);  // strategy_factory.h
//   auto model = strategy->prepare(nn::lenet_cnn());
//   optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
//   train::Trainer trainer(strategy, {.train = train_set, .test = test_set, .batch_size = 64},
//                          {.epochs = 3});
//   auto schedule = optim::CosineLr(0.05, trainer.updates_per_epoch() * 3);
//   train::FitResult r = trainer.fit(sgd, &schedule);
//
// Step statistics (loss, correct count) are accumulated on the model's device; on a GPU
// they are read only when an observer asks (the progress line, when it is due) and at the
// end of an epoch, so the loop adds no wait of its own between steps besides the guard's
// check every 10 updates (and, where configured, the loss scaler's inf/NaN check and
// clipping's norm).
//
// Divergence (a non-finite loss, a spike) is the guard's (train/guard.h): the ranks that
// step together agree on it at every check and roll back together, or all stop with the
// same message. Other errors (a bad batch, a callback's exception) are thrown on the rank
// that meets them, while the others may already be in the next collective: a program ends
// the job with dist::abort_job (as train_mnist does), or the communicator's watchdog does
// after its timeout.
#pragma once

#include "dtrain/core/trace.h"
#include "dtrain/data/dataloader.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/train/checkpointer.h"
#include "dtrain/train/guard.h"
#include "dtrain/train/metrics_log.h"
#include "dtrain/train/observer.h"
#include "dtrain/train/progress.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::train {

struct UpdateBatches;
struct LossCheck;

struct TrainerData {
  std::shared_ptr<const data::Dataset> train = nullptr;
  std::shared_ptr<const data::Dataset> test = nullptr;  // null: no evaluation
  // Samples per optimizer update over all ranks; split into shards x accumulate equal
  // micro-batches (an error otherwise). Where batches are handed out at run time (a
  // parameter server's async modes), each update is one rank's: accumulate micro-batches.
  std::int64_t batch_size = 64;
  std::int64_t eval_batch_size = 500;  // per rank
  std::uint64_t seed = 1;              // the training order of every epoch
  int workers = 1;                     // loader threads per rank
};

// A timeline of a few updates (core/trace.h): data wait, forward, backward, each bucket's
// all-reduce, the optimizer, per thread of every training rank (parameter servers are not
// in it), in the Chrome trace-event JSON that Perfetto and chrome://tracing open.
struct TraceOptions {
  std::filesystem::path file = {};  // empty: no timeline
  std::int64_t first_step = 1;      // global updates, 1-based, inclusive
  std::int64_t last_step = 5;
};
// "A-B" or "A" (global updates, 1-based) into first and last; throws naming the expectation.
void parse_trace_steps(std::string_view text, TraceOptions& options);

// What evaluation (and the training line) counts besides the loss: a metric counts the
// outputs of a batch it takes as right (an i64 scalar on the outputs' device), reported as
// a fraction of the samples.
struct Metric {
  std::string name;  // "accuracy", "top5_accuracy", ...: "test_<name>" in the metrics file
  dist::CorrectFn count;
};

struct TrainerOptions {
  int epochs = 1;
  int accumulate = 1;  // micro-batches per optimizer update (gradient accumulation)
  // > 0: samples per micro-batch on each shard, the accumulation derived from the global
  // batch (batch / (shards x micro_batch)), so that a job relaunched on fewer ranks keeps
  // its memory per rank and accumulates more; excludes accumulate > 1.
  std::int64_t micro_batch = 0;
  double clip_grad_norm = 0;   // > 0: clip the gradients' global L2 norm to this
  double label_smoothing = 0;  // training loss only, in [0, 1)
  // > 1: evaluation also counts top-k accuracy (a sample is right when its label is among
  // the k highest logits; ImageNet reports k = 5).
  int top_k = 0;
  // The loss of training and evaluation, averaged over a batch. Empty: cross-entropy (with
  // label_smoothing in training only). For regression, e.g. mse_loss.
  dist::LossFn loss = {};
  // The metrics (see Metric); the first is "the" accuracy (epoch lines, target_accuracy).
  // nullopt: top-1 accuracy ("accuracy"), and top-k ("top<k>_accuracy") with top_k > 1. An empty
  // list: the loss alone (target_accuracy then has nothing to reach).
  std::optional<std::vector<Metric>> eval_metrics = std::nullopt;
  std::optional<DType> autocast = std::nullopt;
  // Dynamic loss scaling (for f16); disabled by default.
  optim::LossScalerOptions loss_scaler = {.enabled = false};
  // In (0, 1]: stop after the first epoch whose test accuracy reaches it (every rank stops,
  // since every rank sees the same all-reduced accuracy). Needs a test set.
  double target_accuracy = 0;
  // Evaluations per epoch (>= 1): k also evaluates, and checks the target accuracy, at k - 1
  // evenly spaced points inside each epoch (a line and an "evaluation" metrics event each),
  // so that time to accuracy is measured finer than epochs.
  int evaluations_per_epoch = 1;
  bool check_replicas = false;         // report the replicas' largest difference after each epoch
  std::filesystem::path metrics = {};  // JSON lines, written by the reporting rank
  bool verbose = true;                 // progress and epoch lines on the reporting rank
  std::FILE* out = stdout;
  // Checkpoints at the end of each epoch and every `every` updates, and resuming from one
  // (train/checkpointer.h). A resumed run on the saving job's shape repeats the
  // uninterrupted run's updates bit for bit (CPU); fit() then trains the epochs that are
  // left of options.epochs.
  CheckpointOptions checkpoint = {};
  // How progress shows on the reporting rank (with verbose): a bar, lines, or nothing.
  ProgressMode progress = ProgressMode::Auto;
  TraceOptions trace = {};
  // TensorBoard event files (train/tensorboard.h), written by the reporting rank: the loss
  // and learning rate of the updates whose loss was read, and each epoch's figures.
  std::filesystem::path tensorboard = {};
  // What happens when the loss diverges (train/guard.h): by default it is found, reported
  // and rolled back to an in-memory snapshot.
  GuardOptions guard = {};
  // A directory for the sample log: each applied update's sample indices, a file per rank
  // and attempt (src/train/sample_log.h; tools/check_sample_log.py audits it). Empty: none.
  std::filesystem::path sample_log = {};
};

class SampleLog;  // train/sample_log.h

class Trainer {
 public:
  // The strategy must have prepared its model. Builds this rank's loaders; throws when the
  // batch does not split into shards x accumulate micro-batches or an option is invalid.
  Trainer(std::shared_ptr<dist::Strategy> strategy, TrainerData data, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Per rank; where batches are handed out (dist::BatchDispenser), of all ranks together.
  std::int64_t updates_per_epoch() const;
  std::int64_t micro_batch_size() const { return micro_batch_; }  // per rank

  // Observers (train/observer.h) are called in the order they were added, after the
  // Trainer's own (progress, metrics file, TensorBoard, timeline: from the options).
  void add_observer(std::shared_ptr<TrainObserver> observer);
  // A function called at each update's end, or each epoch's end (an observer of that hook).
  void on_step_end(std::function<void(const StepEvent&)> callback);
  void on_epoch_end(std::function<void(const EpochSummary&)> callback);

  // Trains for options.epochs (or until the target accuracy), evaluating after each epoch
  // when there is a test set. `schedule` gives the learning rate of each global update
  // (null keeps the optimizer's). The optimizer must be over the strategy's module. On a
  // rank that does not train (a parameter server), serves until training is done and
  // returns an empty result. Where batches are handed out at run time, an update's
  // learning rate is that of the global update its first batch belongs to.
  FitResult fit(optim::Optimizer& optimizer, const optim::LrSchedule* schedule = nullptr);
  // The test set's sums over all shards (collective), in eval mode without gradients.
  EvalResult evaluate();

  optim::LossScaler& scaler() { return scaler_; }
  dist::Strategy& strategy() { return *strategy_; }
  // The checkpointer, when options.checkpoint names a directory or a checkpoint to resume.
  Checkpointer* checkpointer() { return checkpointer_.get(); }

 private:
  struct Epoch;  // one epoch's running state (trainer_epoch.cpp)
  struct Guard;  // the guard's state (run_guard.h)

  // Checks the options against the data and the strategy; sets micro_batch_.
  void check_options();
  void make_loaders();
  // The test set's share of `shard` (again when the strategy's shard changes).
  void make_test_loader(const dist::Strategy::Shard& shard);
  // The Trainer's own observers from the options (metrics file, TensorBoard, progress,
  // timeline, fault injection), and the checkpointer.
  void make_outputs();
  void make_step_configs();
  // fit() on a training rank (fit() tells the observers when it throws).
  FitResult train(optim::Optimizer& optimizer, const optim::LrSchedule* schedule);
  // An epoch's training steps, with evaluations inside it as configured; stops early when
  // one of those reaches the target (its result in early_evaluation_).
  EpochSummary train_epoch(optim::Optimizer& optimizer, const optim::LrSchedule* schedule, int epoch);
  // One update of `epoch` from `batches`: the step, its sums, progress, callbacks and a
  // checkpoint when one is due.
  void run_update(Epoch& e, UpdateBatches& batches);
  // At the end of stretch `part` of the epoch (not the last): the strategy's ranks meet,
  // all evaluate, and the next stretch starts unless the target was reached.
  void evaluation_point(Epoch& e, int part);
  EpochSummary summarize(Epoch& e);
  // A rank that serves instead of training: until training is done.
  void serve(dist::ServerLoop& server, optim::Optimizer& optimizer);
  // Loads options.checkpoint.resume (if any) and returns the first epoch to train.
  int resume(optim::Optimizer& optimizer);
  // A checkpoint at `position` (its epoch, its step_in_epoch), with this rank's epoch sums.
  void save_checkpoint(const optim::Optimizer& optimizer, int epoch, std::int64_t step_in_epoch,
                       const std::vector<double>& epoch_sums);
  // An evaluation inside epoch `epoch` after `fraction` of it: printed, observed, and whether
  // it reached the target accuracy.
  bool evaluate_inside(int epoch, double fraction);
  // `hook` of every observer, in order.
  template <typename Hook>
  void notify(Hook&& hook) {
    for (const std::shared_ptr<TrainObserver>& o : observers_) hook(*o);
  }
  // The guard (trainer_guard.cpp; train/guard.h). make_guard: after the step configs.
  void make_guard();
  // Whether update `step` of the epoch is checked: every check_every updates, and the
  // epoch's last.
  bool guard_checks(const Epoch& e, std::int64_t step) const;
  // The learning rate of the next update: the schedule's (or, without one, the optimizer's),
  // lowered after a rollback.
  void set_update_lr(Epoch& e, std::int64_t position);
  // At the start of fit(): the state it starts from is the first good snapshot.
  void guard_start(optim::Optimizer& optimizer, int epoch);
  // At the start of each epoch (its sums as they start).
  void guard_begin_epoch(Epoch& e);
  // After update `step` of the epoch: the check; true when it rolled back (throws when
  // divergence must end the run, naming the step and the loss).
  bool guard_update(Epoch& e, const dist::StepStats& stats, std::int64_t step);
  void guard_snapshot(optim::Optimizer& optimizer, int epoch, std::int64_t step_in_epoch);
  // `window`: the updates since the previous check, whose losses this check covered.
  void guard_rollback(Epoch& e, const LossCheck& check, const std::string& what, std::int64_t window);
  void guard_say(const std::string& text);
  // The epoch's line on the reporting rank (its records are the observers').
  void report(const EpochSummary& summary) const;
  // The per-epoch breakdown of where the time went, after the last epoch.
  void report_time(const std::vector<EpochSummary>& epochs) const;

  std::shared_ptr<dist::Strategy> strategy_;
  dist::Capabilities caps_;  // the strategy's
  TrainerData data_;
  TrainerOptions options_;
  std::vector<Metric> metrics_fns_;  // options.eval_metrics or the defaults
  std::int64_t micro_batch_ = 0;
  std::unique_ptr<data::DataLoader> train_loader_, test_loader_;
  dist::Strategy::Shard test_shard_;  // the one test_loader_ reads
  optim::LossScaler scaler_;
  dist::StepConfig train_config_, eval_config_;
  // The Trainer's own, then the program's, then `trailing_` of the Trainer's that stay last.
  std::vector<std::shared_ptr<TrainObserver>> observers_;
  std::size_t trailing_ = 0;
  std::int64_t global_step_ = 0;
  std::chrono::steady_clock::time_point fit_start_;
  std::optional<EvalResult> early_evaluation_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<Guard> guard_;
  std::unique_ptr<SampleLog> sample_log_;
  bool relaunching_ = false;  // the launcher asked for a stop at the checkpoint just written
  // Where the first epoch trained by fit() starts, after a resume: its first update, and
  // this rank's epoch sums so far (EpochSums::values order).
  std::int64_t resume_step_ = 0;
  std::vector<double> resume_sums_;
};

// Number of rows of `logits` (N, C) whose argmax equals `labels` (N), as an i64 scalar on
// the logits' device.
Tensor count_correct(const Tensor& logits, const Tensor& labels);
// Number of rows whose label's logit has fewer than k logits above it (top-k correct; a
// tie counts in the label's favour), as an i64 scalar on the logits' device.
Tensor count_top_k_correct(const Tensor& logits, const Tensor& labels, int k);
// The Trainer's metrics when TrainerOptions::eval_metrics is not given: "accuracy"
// (count_correct), and "top<k>_accuracy" (count_top_k_correct) when top_k > 1.
std::vector<Metric> default_metrics(int top_k);

}  // namespace dtrain::train
