#include "dtrain/train/trainer.h"

#include "dtrain/data/distributed_sampler.h"
#include "dtrain/data/sampler.h"
#include "dtrain/data/subset.h"
#include "train/elastic_control.h"
#include "train/epoch_sums.h"
#include "train/fault_injection.h"
#include "train/observers.h"
#include "train/rank_sums.h"
#include "train/run_guard.h"
#include "train/sample_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace dtrain::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Trainer::on_step_end and on_epoch_end: a function as an observer of one hook.
class StepFunction : public TrainObserver {
 public:
  explicit StepFunction(std::function<void(const StepEvent&)> f) : f_(std::move(f)) {}
  void on_step_end(const StepEvent& e) override { f_(e); }

 private:
  std::function<void(const StepEvent&)> f_;
};

class EpochFunction : public TrainObserver {
 public:
  explicit EpochFunction(std::function<void(const EpochSummary&)> f) : f_(std::move(f)) {}
  void on_epoch_end(const EpochSummary& s) override { f_(s); }

 private:
  std::function<void(const EpochSummary&)> f_;
};

}  // namespace

Trainer::Trainer(std::shared_ptr<dist::Strategy> strategy, TrainerData data, TrainerOptions options)
    : strategy_(std::move(strategy)),
      data_(std::move(data)),
      options_(std::move(options)),
      scaler_(options_.loss_scaler) {
  DTRAIN_CHECK(strategy_ != nullptr, "Trainer: no strategy given");
  strategy_->module();  // prepared
  caps_ = strategy_->capabilities();
  check_options();
  make_loaders();
  make_outputs();
  make_step_configs();
  make_guard();
}

Trainer::~Trainer() = default;

void Trainer::check_options() {
  DTRAIN_CHECK(data_.train != nullptr, "Trainer: no training set given");
  DTRAIN_CHECK(options_.epochs >= 1, "Trainer: epochs must be >= 1, got {}", options_.epochs);
  DTRAIN_CHECK(options_.accumulate >= 1, "Trainer: accumulate must be >= 1, got {}", options_.accumulate);
  DTRAIN_CHECK(data_.eval_batch_size >= 1, "Trainer: eval_batch_size must be >= 1, got {}", data_.eval_batch_size);
  DTRAIN_CHECK(options_.clip_grad_norm >= 0, "Trainer: clip_grad_norm must be >= 0 (0: off), got {}",
               options_.clip_grad_norm);
  DTRAIN_CHECK(options_.target_accuracy >= 0 && options_.target_accuracy <= 1,
               "Trainer: target_accuracy must lie in [0, 1] (0: off), got {}", options_.target_accuracy);
  DTRAIN_CHECK(options_.evaluations_per_epoch >= 1, "Trainer: evaluations_per_epoch must be >= 1, got {}",
               options_.evaluations_per_epoch);
  DTRAIN_CHECK(options_.evaluations_per_epoch == 1 || data_.test != nullptr,
               "Trainer: {} evaluations per epoch need a test set", options_.evaluations_per_epoch);
  DTRAIN_CHECK(options_.target_accuracy == 0 || data_.test != nullptr,
               "Trainer: target_accuracy {} needs a test set to measure it", options_.target_accuracy);
  DTRAIN_CHECK(options_.top_k >= 0, "Trainer: top_k must be >= 0 (0: off), got {}", options_.top_k);
  const dist::Strategy::Shard shard = strategy_->data_shard();
  // A fixed shard per rank splits each update over the ranks; a handed-out batch is one
  // rank's whole update, unless the dispenser says it is a share. A serving rank trains
  // nothing (a worker checks the batch).
  const bool whole = caps_.server != nullptr || (caps_.dispenser && !caps_.dispenser->shares_update());
  const int splits = whole ? 1 : shard.count;
  if (options_.micro_batch > 0) {
    DTRAIN_CHECK(options_.accumulate == 1, "Trainer: give accumulate ({}) or micro_batch ({}), not both",
                 options_.accumulate, options_.micro_batch);
    const std::int64_t per_shard = data_.batch_size / splits;
    DTRAIN_CHECK(data_.batch_size % splits == 0 && per_shard % options_.micro_batch == 0,
                 "batch size {}: the {} samples of each of {} ranks do not split into micro-batches of {}",
                 data_.batch_size, per_shard, splits, options_.micro_batch);
    DTRAIN_CHECK(per_shard / options_.micro_batch <= (1 << 16),
                 "batch size {}: {} micro-batches of {} per update are too many", data_.batch_size,
                 per_shard / options_.micro_batch, options_.micro_batch);
    options_.accumulate = static_cast<int>(per_shard / options_.micro_batch);
  }
  const std::int64_t parts = static_cast<std::int64_t>(splits) * options_.accumulate;
  DTRAIN_CHECK(data_.batch_size >= parts && data_.batch_size % parts == 0,
               "batch size {}: must be divisible by the {} ranks x {} accumulation steps", data_.batch_size, splits,
               options_.accumulate);
  micro_batch_ = data_.batch_size / parts;
  DTRAIN_CHECK(micro_batch_ >= shard.splits && micro_batch_ % shard.splits == 0,
               "{}: a batch of {} samples per shard cannot be split into {} equal micro-batches (make the batch size "
               "a multiple of shards x accumulation x micro-batches)",
               strategy_->name(), micro_batch_, shard.splits);
}

void Trainer::make_loaders() {
  const dist::Strategy::Shard shard = strategy_->data_shard();
  const bool pin = strategy_->device().is_cuda();  // batches upload while the GPU computes
  const data::DataLoaderOptions train{.batch_size = micro_batch_, .workers = data_.workers, .pin_memory = pin};
  std::shared_ptr<const data::Sampler> sampler;
  if (caps_.dispenser) {
    // Every batch of the epoch's order; the dispenser says which this rank takes.
    sampler = std::make_shared<data::RandomSampler>(data_.train->size(), data_.seed);
  } else {
    // A dataset stored in shards picks each rank's share itself (whole shards, read in order).
    sampler = data_.train->rank_sampler(shard.index, shard.count, data_.seed, true);
    if (!sampler) {
      sampler = std::make_shared<data::DistributedSampler>(data_.train->size(), shard.index, shard.count, data_.seed);
    }
  }
  train_loader_ = std::make_unique<data::DataLoader>(data_.train, train, sampler);
  if (!options_.sample_log.empty()) {
    // Handed-out batches have no global order of updates for the audit to follow.
    DTRAIN_CHECK(caps_.dispenser == nullptr,
                 "--sample-log: {} hands batches out at run time, so its updates have no global order to log (fixed "
                 "shards only: data parallel, ZeRO, pipelines, tensor parallel, synchronous parameter servers)",
                 strategy_->name());
    const SampleLogShape shape{.rank = strategy_->rank(),
                               .world_size = strategy_->ranks(),
                               .shards = shard.count,
                               .shard = shard.index,
                               .dataset_size = data_.train->size(),
                               .global_batch = data_.batch_size,
                               .micro_batch = micro_batch_};
    sample_log_ = std::make_unique<SampleLog>(options_.sample_log, shape, sampler);
  }
  if (data_.test) make_test_loader(shard);
}

void Trainer::make_test_loader(const dist::Strategy::Shard& shard) {
  const data::DataLoaderOptions eval{
      .batch_size = data_.eval_batch_size, .workers = data_.workers, .pin_memory = strategy_->device().is_cuda()};
  if (auto share = data_.test->rank_sampler(shard.index, shard.count, data_.seed, false)) {
    test_loader_ = std::make_unique<data::DataLoader>(data_.test, eval, std::move(share));
  } else {
    test_loader_ = std::make_unique<data::DataLoader>(data::Subset::shard(data_.test, shard.index, shard.count), eval);
  }
  test_shard_ = shard;
}

void Trainer::make_outputs() {
  // In this order: the files are opened (and fail) as they always were, and each hook's
  // lines and records come in the order the loop used to write them.
  const RecordContext records{.metrics = &metrics_fns_, .has_test = data_.test != nullptr};
  if (strategy_->reports() && !options_.metrics.empty()) {
    observers_.push_back(make_metrics_observer(options_.metrics, records));
  }
  if (strategy_->reports() && !options_.tensorboard.empty()) {
    observers_.push_back(make_tensorboard_observer(options_.tensorboard, records));
  }
  if (strategy_->reports() && options_.verbose)
    observers_.push_back(make_progress_observer(options_.out, options_.progress));
  if (!options_.trace.file.empty()) {
    observers_.push_back(make_timeline_observer(*strategy_, options_.trace, options_.verbose, options_.out));
  }
  observers_.push_back(make_fault_observer(*strategy_));
  trailing_ = 1;  // the fault's crash comes after every other observer (add_observer)
  if (!options_.checkpoint.dir.empty() || !options_.checkpoint.resume.empty()) {
    checkpointer_ = std::make_unique<Checkpointer>(options_.checkpoint, *strategy_);
  }
}

void Trainer::make_step_configs() {
  metrics_fns_ = options_.eval_metrics ? *options_.eval_metrics : default_metrics(options_.top_k);
  for (const Metric& m : metrics_fns_) {
    DTRAIN_CHECK(!m.name.empty() && m.count != nullptr, "Trainer: every metric needs a name and a count function");
  }
  DTRAIN_CHECK(options_.target_accuracy == 0 || !metrics_fns_.empty(),
               "Trainer: target_accuracy {} needs a metric to reach it (eval_metrics is empty)",
               options_.target_accuracy);
  dist::LossFn train_loss = options_.loss, eval_loss = options_.loss;
  if (!options_.loss) {
    const double smoothing = options_.label_smoothing;
    train_loss = [smoothing](const Variable& out, const Tensor& y) { return cross_entropy(out, y, smoothing); };
    eval_loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); };
  }
  // Training counts the first metric; evaluation counts all of them as one vector (the
  // strategies only add these tensors up, whatever their shape).
  dist::CorrectFn first = metrics_fns_.empty() ? dist::CorrectFn{} : metrics_fns_.front().count;
  dist::CorrectFn all;
  if (metrics_fns_.size() == 1) {
    all = first;
  } else if (!metrics_fns_.empty()) {
    all = [metrics = metrics_fns_](const Tensor& out, const Tensor& y) {
      std::vector<Tensor> counts;
      for (const Metric& m : metrics) counts.push_back(m.count(out, y));
      return stack(counts, 0);
    };
  }
  // DTRAIN_FAULT's loss faults (tests of the guard), on the rank they name.
  train_loss = fault::corrupt_loss(std::move(train_loss), strategy_->rank(), [this] { return global_step_; });
  train_config_ = {.loss = train_loss,
                   .correct = first,
                   .autocast = options_.autocast,
                   .scaler = scaler_.enabled() ? &scaler_ : nullptr,
                   .clip_grad_norm = options_.clip_grad_norm};
  eval_config_ = {.loss = eval_loss, .correct = all, .autocast = options_.autocast};
}

std::int64_t Trainer::updates_per_epoch() const {
  // A last, shorter update takes the micro-batches that are left. Handed-out batches: the
  // loader holds every batch of the epoch, so this counts the updates of all ranks.
  return (train_loader_->num_batches() + options_.accumulate - 1) / options_.accumulate;
}

void Trainer::add_observer(std::shared_ptr<TrainObserver> observer) {
  DTRAIN_CHECK(observer != nullptr, "Trainer::add_observer: no observer given");
  observers_.insert(observers_.end() - static_cast<std::ptrdiff_t>(trailing_), std::move(observer));
}

void Trainer::on_step_end(std::function<void(const StepEvent&)> callback) {
  DTRAIN_CHECK(callback != nullptr, "Trainer::on_step_end: no function given");
  add_observer(std::make_shared<StepFunction>(std::move(callback)));
}

void Trainer::on_epoch_end(std::function<void(const EpochSummary&)> callback) {
  DTRAIN_CHECK(callback != nullptr, "Trainer::on_epoch_end: no function given");
  add_observer(std::make_shared<EpochFunction>(std::move(callback)));
}

int Trainer::resume(optim::Optimizer& optimizer) {
  if (!checkpointer_) return 1;
  const std::optional<Restored> r = checkpointer_->restore(optimizer, scaler_);
  if (!r) {
    if (strategy_->reports() && options_.verbose && options_.checkpoint.resume == "auto") {
      fmt::print(options_.out, "no checkpoint in {} yet: starting afresh\n", options_.checkpoint.dir.string());
    }
    return 1;
  }
  const checkpoint::TrainingPosition& p = r->manifest.position;
  DTRAIN_CHECK(p.batch_size == data_.batch_size,
               "checkpoint {}: saved with a batch size of {}, this run has {}: resume with --batch-size {} (the "
               "position inside the epoch and the schedule count updates of that size)",
               r->from.string(), p.batch_size, data_.batch_size, p.batch_size);
  global_step_ = p.global_step;
  int epoch = p.epoch;
  resume_step_ = p.step_in_epoch;
  // Another number of ranks may split the epoch into another number of updates; the
  // epoch's sums then start afresh (they were the other ranks').
  const std::int64_t updates = updates_per_epoch();
  if (resume_step_ >= updates) {
    ++epoch;
    resume_step_ = 0;
  }
  const bool same_epochs = r->epoch_sums && p.updates_per_epoch == updates;
  resume_sums_ = EpochSums::resumed(same_epochs && resume_step_ > 0 ? &*r->epoch_sums : nullptr, resume_step_);
  if (strategy_->reports() && options_.verbose) {
    fmt::print(options_.out,
               "resuming from {}: epoch {}, update {} of {} (global step {}), saved by a {}-rank {} job (mesh {})\n",
               r->from.string(), epoch, resume_step_, updates, global_step_, r->manifest.job.world_size,
               r->manifest.job.strategy, checkpoint::describe_mesh(r->manifest.job.mesh));
    const int shards = strategy_->data_shard().count;
    if (!caps_.dispenser && r->manifest.job.replicas != shards && caps_.server == nullptr) {
      // The global batch is the run's --batch-size: another number of shards takes other
      // shares of it, the same samples (update u: positions [u G, (u + 1) G) of the order).
      fmt::print(options_.out,
                 "the global batch of {} is kept on {} data-parallel shard(s) instead of the checkpoint's {}: {} "
                 "samples per shard and update ({} accumulation step(s) of {}), {} before\n",
                 data_.batch_size, shards, r->manifest.job.replicas, data_.batch_size / shards, options_.accumulate,
                 micro_batch_, data_.batch_size / r->manifest.job.replicas);
      if (resume_step_ > 0 && !data_.train->shares_keep_global_order()) {
        fmt::print(options_.out,
                   "warning: this dataset deals whole shards to ranks, so the rest of epoch {} is dealt afresh over "
                   "{} shard(s): some of its samples are taken twice this epoch and others not at all (resume at an "
                   "epoch's end to avoid it)\n",
                   epoch, shards);
      }
    }
    if (p.epochs != options_.epochs) {
      fmt::print(options_.out,
                 "the saved run was planned for {} epoch(s), this one for {}: a learning-rate schedule "
                 "over the run's length follows the new total\n",
                 p.epochs, options_.epochs);
    }
    if (epoch > options_.epochs) {
      fmt::print(options_.out,
                 "the checkpoint is at the end of epoch {}: nothing left to train for {} epoch(s) (raise "
                 "--epochs to continue)\n",
                 epoch - 1, options_.epochs);
    }
    std::fflush(options_.out);
  }
  return epoch;
}

void Trainer::save_checkpoint(const optim::Optimizer& optimizer, int epoch, std::int64_t step_in_epoch,
                              const std::vector<double>& epoch_sums) {
  const nn::Module& model = strategy_->module();
  checkpointer_->save(optimizer, scaler_,
                      {.global_step = global_step_,
                       .epoch = epoch,
                       .step_in_epoch = step_in_epoch,
                       .updates_per_epoch = updates_per_epoch(),
                       .epochs = options_.epochs,
                       .batch_size = data_.batch_size,
                       .data_seed = data_.seed},
                      epoch_sums,
                      fmt::format("{} ({} parameters on this rank)", model.describe(), model.num_parameters()));
  if (!elastic_control_enabled()) return;
  // The launcher's request, read by rank 0, stops every rank at this checkpoint once it is
  // on disk (one small sum per checkpoint, only under the elastic launcher).
  Tensor request = Tensor::from_vector<double>({strategy_->rank() == 0 && relaunch_requested() ? 1.0 : 0.0}, {1});
  strategy_->reduce_sums(request);
  if (request.to_vector<double>()[0] == 0) return;
  checkpointer_->finish();
  relaunching_ = true;
}

void Trainer::serve(dist::ServerLoop& server, optim::Optimizer& optimizer) {
  // A serving rank starts from the checkpoint too (its shard of the model and of the
  // optimizer state), and writes its share of each checkpoint when the chief asks.
  dist::ServerLoop::SaveShare save_share;
  if (checkpointer_) {
    resume(optimizer);
    if (!options_.checkpoint.dir.empty()) {
      save_share = [this](std::int64_t step, optim::NamedTensors share) {
        checkpointer_->save_share(step, std::move(share));
      };
    }
  }
  server.serve(optimizer, save_share);
}

FitResult Trainer::fit(optim::Optimizer& optimizer, const optim::LrSchedule* schedule) {
  if (caps_.server) {
    serve(*caps_.server, optimizer);
    return {};
  }
  try {
    return train(optimizer, schedule);
  } catch (...) {
    // The observers end what they show (a progress line) before the error is reported.
    const std::exception_ptr error = std::current_exception();
    notify([&](TrainObserver& o) { o.on_exception(error); });
    throw;
  }
}

FitResult Trainer::train(optim::Optimizer& optimizer, const optim::LrSchedule* schedule) {
  FitResult result;
  // Time to accuracy runs from the first step to the end of the evaluation that reached
  // the target: evaluation is part of knowing that it was reached.
  const auto start = Clock::now();
  fit_start_ = start;
  const int first_epoch = resume(optimizer);
  guard_start(optimizer, first_epoch);
  trace::name_thread("training");
  const FitStart fit_start{.first_epoch = first_epoch,
                           .epochs = options_.epochs,
                           .global_step = global_step_,
                           .updates_per_epoch = updates_per_epoch()};
  notify([&](TrainObserver& o) { o.on_fit_start(fit_start); });
  for (int epoch = first_epoch; epoch <= options_.epochs; ++epoch) {
    early_evaluation_.reset();
    EpochSummary summary = train_epoch(optimizer, schedule, epoch);
    if (relaunching_) break;  // stopped inside the epoch, at a checkpoint
    if (test_loader_) {
      // An evaluation inside the epoch that reached the target ended it (and was observed).
      EvalResult e;
      if (early_evaluation_) {
        e = *early_evaluation_;
      } else {
        e = evaluate();
        const EvalEvent closing{
            .epoch = epoch, .global_step = global_step_, .seconds = seconds_since(start), .result = e};
        notify([&](TrainObserver& o) { o.on_evaluation(closing); });
      }
      summary.test_loss = e.loss();
      summary.test_accuracy = e.accuracy();
      summary.test_samples = e.samples;
      for (std::size_t m = 0; m < metrics_fns_.size(); ++m)
        summary.test_metrics.emplace_back(metrics_fns_[m].name, e.fraction(m));
    }
    if (options_.check_replicas && caps_.replica_divergence) summary.replica_divergence = caps_.replica_divergence();
    if (train_config_.scaler) summary.loss_scale = scaler_.scale_value();
    report(summary);
    notify([&](TrainObserver& o) { o.on_epoch_end(summary); });
    if (checkpointer_ && !options_.checkpoint.dir.empty()) save_checkpoint(optimizer, epoch + 1, 0, {});
    result.epochs.push_back(summary);
    result.test_accuracy = summary.test_accuracy;
    // Every rank has the same all-reduced accuracy, so all of them stop together.
    result.reached_target = options_.target_accuracy > 0 && summary.test_accuracy >= options_.target_accuracy;
    // Asked to stop at this epoch's checkpoint: nothing is left to relaunch for when the run
    // is done (every rank decides alike).
    if (relaunching_ && (result.reached_target || epoch == options_.epochs)) relaunching_ = false;
    if (result.reached_target || relaunching_) break;
  }
  result.stopped_for_relaunch = relaunching_;
  if (relaunching_) {
    if (strategy_->rank() == 0) acknowledge_relaunch(global_step_);
    if (strategy_->reports() && options_.verbose) {
      fmt::print(options_.out,
                 "\nstopped after global step {} for the launcher to relaunch the job on its new hosts (the "
                 "checkpoint is written)\n",
                 global_step_);
      std::fflush(options_.out);
    }
  }
  if (result.epochs.empty() && test_loader_ && !relaunching_) {
    // Nothing was left to train (a finished run resumed): the result is the restored model's.
    const EvalResult e = evaluate();
    result.test_accuracy = e.accuracy();
    result.reached_target = options_.target_accuracy > 0 && result.test_accuracy >= options_.target_accuracy;
  }
  result.seconds = seconds_since(start);
  notify([&](TrainObserver& o) { o.on_train_end(result); });
  report_time(result.epochs);
  if (checkpointer_ && !options_.checkpoint.dir.empty()) checkpointer_->finish();
  if (caps_.epochs) result.strategy_report = caps_.epochs->end_training();
  const dist::EpochReport& run = result.strategy_report;
  if (strategy_->reports() && options_.verbose && !relaunching_) {
    if (!run.text.empty()) fmt::print(options_.out, "{}\n", run.text);
    if (test_loader_ && !metrics_fns_.empty()) {
      fmt::print(options_.out, "final test {}: {:.2f}%{}\n", metrics_fns_.front().name, 100 * result.test_accuracy,
                 result.epochs.empty() ? " (the restored model: no epoch left to train)" : "");
    }
    if (options_.target_accuracy > 0) {
      fmt::print(options_.out, "{} {:.2f}% test accuracy {} {} epoch(s){} {:.1f} s\n",
                 result.reached_target ? "reached" : "did not reach", 100 * options_.target_accuracy,
                 result.reached_target ? "after" : "in", result.epochs.size(), result.reached_target ? " in" : ",",
                 result.seconds);
    }
    std::fflush(options_.out);
  }
  notify([&](TrainObserver& o) { o.on_fit_end(result); });
  return result;
}

}  // namespace dtrain::train
