// The Trainer's epoch: stretches of updates between evaluation points, each update's step
// and bookkeeping, and the epoch's summary over the ranks.
#include "dtrain/train/trainer.h"

#include "train/batch_source.h"
#include "train/epoch_sums.h"
#include "train/rank_sums.h"
#include "train/sample_log.h"
#include "train/trainer_epoch.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <utility>

namespace dtrain::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

EpochSummary Trainer::train_epoch(optim::Optimizer& optimizer, const optim::LrSchedule* schedule, int epoch) {
  const auto start = Clock::now();
  strategy_->module().train();
  const Device device = strategy_->device();
  const std::int64_t updates = updates_per_epoch();
  Epoch e{.epoch = epoch,
          .optimizer = optimizer,
          .schedule = schedule,
          .updates = updates,
          .read_each_step = device.is_cpu(),
          .sums = EpochSums(device),
          .parts = options_.evaluations_per_epoch,
          .span = (updates + options_.evaluations_per_epoch - 1) / options_.evaluations_per_epoch};
  // A resumed epoch continues from its first update not done, with its sums so far.
  const std::int64_t first_step = std::exchange(resume_step_, 0);
  const EpochStart begin{.epoch = epoch,
                         .epochs = options_.epochs,
                         .updates = updates,
                         .first_step = first_step,
                         .shards = strategy_->data_shard().count};
  notify([&](TrainObserver& o) { o.on_epoch_start(begin); });
  if (first_step > 0) e.sums.restore(resume_sums_);
  guard_begin_epoch(e);
  const std::int64_t skipped_before = data_.train->bad_samples_skipped();
  const double waited_before = train_loader_->wait_seconds();
  train_loader_->set_epoch(epoch - 1);
  if (caps_.epochs) caps_.epochs->begin_epoch(epoch - 1);
  const trace::PhaseTotals time_before = trace::thread_totals();

  BatchSource source(*train_loader_, device, options_.accumulate, caps_.dispenser);
  for (int part = 0; part < e.parts && !e.stop; ++part) {
    const std::int64_t end = std::min(updates, e.span * (part + 1));
    if (end <= first_step) continue;  // done before the checkpoint this epoch resumed from
    source.begin(std::max(e.span * part, first_step), end, static_cast<std::int64_t>(epoch - 1) * e.parts + part);
    while (!e.stop) {
      std::optional<UpdateBatches> batches = source.next();
      if (!batches) break;
      run_update(e, *batches);
    }
    if (relaunching_) break;  // the launcher's stop, at the checkpoint just written
    evaluation_point(e, part);
  }
  source.finish();
  notify([](TrainObserver& o) { o.on_pause(); });

  // This rank's training time; the collectives of the summary come after it.
  const double seconds = seconds_since(start) - e.evaluating_s;
  const trace::PhaseTotals time = trace::thread_totals() - time_before;
  EpochSummary summary = summarize(e);
  summary.seconds = seconds;
  summary.samples_per_s = seconds > 0 ? static_cast<double>(summary.samples) / seconds : 0;
  summary.time = time;
  summary.bad_samples_skipped = static_cast<std::int64_t>(
      over_ranks(*strategy_, {static_cast<double>(data_.train->bad_samples_skipped() - skipped_before)})[0]);
  summary.loader_wait_s = train_loader_->wait_seconds() - waited_before;
  notify([&](TrainObserver& o) { o.on_train_epoch_end(summary); });
  return summary;
}

void Trainer::run_update(Epoch& e, UpdateBatches& batches) {
  std::vector<dist::MicroBatch> micro;
  for (Staged& s : batches.micro) micro.push_back({s.inputs.get(), s.targets.get()});
  batches.micro.clear();  // the batches' memory goes back with `micro`, before the next update's
  set_update_lr(e, batches.position);
  const dist::StepStats stats = strategy_->train_step(micro, e.optimizer, train_config_);
  micro.clear();
  ++global_step_;
  e.sums.add(stats);
  const std::int64_t step = batches.position + 1;
  if (sample_log_) sample_log_->record(e.epoch, global_step_, step, batches.numbers);
  // Every observer is asked (one may remember its answer); any of them wanting the loss reads it.
  const StepPosition at{.epoch = e.epoch, .step = step, .global_step = global_step_};
  bool wanted = false;
  notify([&](TrainObserver& o) { wanted = o.wants_loss(at) || wanted; });
  const bool read = stats.loss.defined() && (e.read_each_step || wanted || step == e.updates);
  // Divergence is the guard's: it rolls it back, or ends the run, at its checks (guard.h).
  if (guard_checks(e, step)) guard_update(e, stats, step);
  const StepEvent event{.epoch = e.epoch,
                        .step = step,
                        .global_step = global_step_,
                        .lr = e.optimizer.lr(),
                        .stats = &stats,
                        .loss = read ? std::optional<double>(stats.loss.item()) : std::nullopt};
  notify([&](TrainObserver& o) { o.on_step_end(event); });
  if (!checkpointer_) return;
  // The epoch's last update is saved by the end-of-epoch checkpoint, after its evaluation.
  const std::int64_t every = checkpointer_->options().every;
  if (every > 0 && global_step_ % every == 0 && step < e.updates && !checkpointer_->options().dir.empty()) {
    save_checkpoint(e.optimizer, e.epoch, step, e.sums.values());
    e.stop = relaunching_;
  }
}

void Trainer::evaluation_point(Epoch& e, int part) {
  if (part + 1 >= e.parts || e.span * (part + 1) >= e.updates) return;
  const auto paused = Clock::now();
  if (caps_.epochs) e.report = caps_.epochs->end_epoch();
  notify([](TrainObserver& o) { o.on_pause(); });
  e.stop = evaluate_inside(e.epoch, static_cast<double>(e.span * (part + 1)) / static_cast<double>(e.updates));
  e.evaluating_s += seconds_since(paused);
  if (!e.stop && caps_.epochs) caps_.epochs->begin_epoch(e.epoch - 1);
}

EpochSummary Trainer::summarize(Epoch& e) {
  EpochSummary summary;
  summary.epoch = e.epoch;
  if (caps_.epochs) summary.strategy_report = e.stop ? std::move(e.report) : caps_.epochs->end_epoch();
  const EpochTotals t = e.sums.totals(*strategy_);
  summary.nonfinite_updates = t.nonfinite_losses;
  DTRAIN_CHECK(train_config_.scaler != nullptr || summary.nonfinite_updates == 0,
               "training diverged in epoch {}: {} update(s) over the ranks had a non-finite loss (lower the "
               "learning rate?)",
               e.epoch, summary.nonfinite_updates);
  summary.train_loss = t.finite_losses > 0 ? t.loss_sum / static_cast<double>(t.finite_losses) : 0;
  summary.train_accuracy = t.counted > 0 ? static_cast<double>(t.correct) / static_cast<double>(t.counted) : 0;
  summary.updates = e.sums.updates();
  summary.global_step = global_step_;
  summary.rollbacks = e.rollbacks;
  // Handed-out batches differ in number between ranks: their sum; fixed shards are equal.
  summary.samples = caps_.dispenser ? t.samples : e.sums.samples() * strategy_->data_shard().count;
  return summary;
}

}  // namespace dtrain::train
