#include "dtrain/train/trainer.h"

#include "dtrain/data/distributed_sampler.h"
#include "dtrain/data/sampler.h"
#include "dtrain/data/subset.h"
#include "dtrain/tensor/upload.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/tensorboard.h"
#include "train/fault_injection.h"
#include "train/rank_sums.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <utility>

namespace dtrain::train {

Tensor count_correct(const Tensor& logits, const Tensor& labels) {
  return sum(eq(argmax(logits, 1), labels.to(DType::i64)).to(DType::i64));
}

Tensor count_top_k_correct(const Tensor& logits, const Tensor& labels, int k) {
  const Tensor label_logit = gather(logits, 1, labels.to(DType::i64).reshape({labels.numel(), 1}));
  const Tensor above = sum(gt(logits, label_logit).to(DType::i64), {1});
  return sum(lt(above, Tensor::scalar(k, {DType::i64, logits.device()})).to(DType::i64));
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }


// An epoch's running sums, kept on the model's device so that adding a step's numbers
// never waits for the step. A non-finite loss adds 0 and is counted apart: with a loss
// scaler that is a skipped step, without one it is divergence.
class RunningSums {
 public:
  explicit RunningSums(Device device)
      : loss_sum_(Tensor::zeros({}, {DType::f64, device})),
        finite_(Tensor::zeros({}, {DType::i64, device})),
        correct_(Tensor::zeros({}, {DType::i64, device})),
        zero_(Tensor::zeros({}, {DType::f64, device})) {}

  void add(const dist::StepStats& s) {
    ++updates_;
    samples_ += s.samples;
    if (s.correct.defined()) {
      correct_ = dtrain::add(correct_, s.correct);
      counted_ += s.samples;
    }
    if (!s.loss.defined()) return;
    const Tensor loss = s.loss.to(DType::f64);
    const Tensor finite = eq(mul(loss, 0.0), zero_);  // inf * 0 and NaN * 0 are NaN
    loss_sum_ = dtrain::add(loss_sum_, where(finite, loss, zero_));
    finite_ = dtrain::add(finite_, finite.to(DType::i64));
    ++losses_;
  }

  // This rank's updates with a non-finite loss so far (reading waits for the device).
  std::int64_t nonfinite() const { return losses_ - finite_.item<std::int64_t>(); }
  std::int64_t updates() const { return updates_; }
  std::int64_t samples() const { return samples_; }

  // This rank's sums so far, for a checkpoint (reading waits for the device), and back.
  std::vector<double> values() const {
    return {loss_sum_.item(), static_cast<double>(finite_.item<std::int64_t>()),
            static_cast<double>(correct_.item<std::int64_t>()), static_cast<double>(counted_),
            static_cast<double>(losses_), static_cast<double>(updates_), static_cast<double>(samples_)};
  }
  void restore(const std::vector<double>& v) {
    DTRAIN_CHECK(v.size() == 7, "checkpoint: the epoch sums hold {} values, expected 7", v.size());
    const Device device = loss_sum_.device();
    loss_sum_ = Tensor::full({}, v[0], {DType::f64, device});
    finite_ = Tensor::full({}, v[1], {DType::i64, device});
    correct_ = Tensor::full({}, v[2], {DType::i64, device});
    counted_ = static_cast<std::int64_t>(v[3]);
    losses_ = static_cast<std::int64_t>(v[4]);
    updates_ = static_cast<std::int64_t>(v[5]);
    samples_ = static_cast<std::int64_t>(v[6]);
  }

  // The epoch's sums over every rank (a collective): [loss sum, finite losses, non-finite
  // losses, correct, samples counted for accuracy, samples].
  std::vector<double> totals(dist::Strategy& strategy) const {
    const auto finite = finite_.item<std::int64_t>();
    return over_ranks(strategy, {loss_sum_.item(), static_cast<double>(finite), static_cast<double>(losses_ - finite),
                                 static_cast<double>(correct_.item<std::int64_t>()), static_cast<double>(counted_),
                                 static_cast<double>(samples_)});
  }

 private:
  Tensor loss_sum_, finite_, correct_, zero_;
  std::int64_t updates_ = 0, samples_ = 0, counted_ = 0, losses_ = 0;
};

// A batch whose upload to the device was queued ahead of the step that uses it: on a GPU
// the copy overlaps the previous step's kernels (upload.h); on the CPU it is the batch.
struct Staged {
  Upload inputs, targets;
  Staged(const data::Batch& b, Device device) : inputs(b.inputs, device), targets(b.targets, device) {}
};

}  // namespace

Trainer::Trainer(std::shared_ptr<dist::Strategy> strategy, TrainerData data, TrainerOptions options)
    : strategy_(std::move(strategy)), data_(std::move(data)), options_(std::move(options)),
      scaler_(options_.loss_scaler) {
  DTRAIN_CHECK(strategy_ != nullptr, "Trainer: no strategy given");
  strategy_->module();  // prepared
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
  const dist::Strategy::Shard shard = strategy_->data_shard();
  // A fixed shard per rank splits each update over the ranks; a handed-out batch is one
  // rank's whole update (as a worker's step under tf.distribute's ParameterServerStrategy).
  const int splits = strategy_->hands_out_batches() ? 1 : shard.count;
  const std::int64_t parts = static_cast<std::int64_t>(splits) * options_.accumulate;
  DTRAIN_CHECK(data_.batch_size >= parts && data_.batch_size % parts == 0,
               "batch size {}: must be divisible by the {} ranks x {} accumulation steps", data_.batch_size, splits,
               options_.accumulate);
  micro_batch_ = data_.batch_size / parts;
  strategy_->check_micro_batch(micro_batch_);

  const bool pin = strategy_->device().is_cuda();  // batches upload while the GPU computes
  // A dataset stored in shards picks each rank's share itself (whole shards, read in order).
  std::shared_ptr<const data::Sampler> sampler = data_.train->rank_sampler(shard.index, shard.count, data_.seed, true);
  if (!sampler) {
    sampler = std::make_shared<data::DistributedSampler>(data_.train->size(), shard.index, shard.count, data_.seed);
  }
  train_loader_ = std::make_unique<data::DataLoader>(
      data_.train, data::DataLoaderOptions{.batch_size = micro_batch_, .workers = data_.workers, .pin_memory = pin},
      sampler);
  if (data_.test) {
    const data::DataLoaderOptions eval{.batch_size = data_.eval_batch_size, .workers = data_.workers, .pin_memory = pin};
    if (auto share = data_.test->rank_sampler(shard.index, shard.count, data_.seed, false)) {
      test_loader_ = std::make_unique<data::DataLoader>(data_.test, eval, std::move(share));
    } else {
      test_loader_ = std::make_unique<data::DataLoader>(data::Subset::shard(data_.test, shard.index, shard.count), eval);
    }
  }
  if (strategy_->reports() && !options_.metrics.empty()) metrics_ = std::make_unique<MetricsLog>(options_.metrics);
  if (strategy_->reports() && !options_.tensorboard.empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(options_.tensorboard);
  }
  if (!options_.trace.file.empty()) {
    DTRAIN_CHECK(options_.trace.first_step >= 1 && options_.trace.first_step <= options_.trace.last_step,
                 "Trainer: trace steps {}-{}: expected 1 <= first <= last", options_.trace.first_step,
                 options_.trace.last_step);
    if (strategy_->reports()) {
      // Fail now, not after the steps: the file is written at the end of an epoch.
      std::ofstream probe(options_.trace.file, std::ios::trunc);
      DTRAIN_CHECK(probe.good(), "--trace {}: cannot write the file", options_.trace.file.string());
    }
  }
  if (!options_.checkpoint.dir.empty() || !options_.checkpoint.resume.empty()) {
    checkpointer_ = std::make_unique<Checkpointer>(options_.checkpoint, *strategy_);
  }

  const double smoothing = options_.label_smoothing;
  train_config_ = {.loss = [smoothing](const Variable& out, const Tensor& y) { return cross_entropy(out, y, smoothing); },
                   .correct = count_correct,
                   .autocast = options_.autocast,
                   .scaler = scaler_.enabled() ? &scaler_ : nullptr,
                   .clip_grad_norm = options_.clip_grad_norm};
  DTRAIN_CHECK(options_.top_k >= 0, "Trainer: top_k must be >= 0 (0: off), got {}", options_.top_k);
  // With top-k the evaluation's "correct" is the pair (top-1, top-k): the strategies only add
  // these tensors up, whatever their shape.
  const int k = options_.top_k;
  dist::CorrectFn correct = count_correct;
  if (k > 1) {
    correct = [k](const Tensor& logits, const Tensor& labels) {
      return stack({count_correct(logits, labels), count_top_k_correct(logits, labels, k)}, 0);
    };
  }
  eval_config_ = {.loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); },
                  .correct = correct,
                  .autocast = options_.autocast};
}

Trainer::~Trainer() = default;

std::int64_t Trainer::updates_per_epoch() const {
  // A last, shorter update takes the micro-batches that are left. Handed-out batches: the
  // updates of all ranks together.
  const std::int64_t batches = strategy_->hands_out_batches()
                                   ? (data_.train->size() + micro_batch_ - 1) / micro_batch_
                                   : train_loader_->num_batches();
  return (batches + options_.accumulate - 1) / options_.accumulate;
}

void Trainer::on_step_end(std::function<void(const StepEvent&)> callback) {
  step_callbacks_.push_back(std::move(callback));
}

void Trainer::on_epoch_end(std::function<void(const EpochSummary&)> callback) {
  epoch_callbacks_.push_back(std::move(callback));
}

EpochSummary Trainer::train_epoch(optim::Optimizer& optimizer, const optim::LrSchedule* schedule, int epoch) {
  const auto start = Clock::now();
  nn::Module& model = strategy_->module();
  model.train();
  const Device device = strategy_->device();
  const std::int64_t updates = updates_per_epoch();
  const int shards = strategy_->data_shard().count;
  const bool unscaled = train_config_.scaler == nullptr;
  const bool handed_out = strategy_->hands_out_batches();
  // On the CPU reading a step's loss costs nothing, so divergence stops the very step; on a
  // GPU the sums are read only when the progress line is due and at the end.
  const bool read_each_step = device.is_cpu();
  Progress progress(fmt::format("epoch {}/{}", epoch, options_.epochs), updates,
                    options_.verbose && strategy_->reports(), options_.out, 10.0, options_.progress);
  progress.set_sample_scale(shards);
  RunningSums sums(device);
  // A resumed epoch continues from its first update not done, with its sums so far.
  const std::int64_t first_step = std::exchange(resume_step_, 0);
  if (first_step > 0) sums.restore(resume_sums_);
  const std::int64_t skipped_before = data_.train->bad_samples_skipped();
  const double waited_before = train_loader_->wait_seconds();
  train_loader_->set_epoch(epoch - 1);
  strategy_->begin_epoch(epoch - 1);
  const trace::PhaseTotals time_before = trace::thread_totals();

  std::vector<Staged> staged;
  std::vector<dist::MicroBatch> micro;
  double shown_loss = 0;
  // One update from the staged micro-batches; `position`: its update in the epoch (from
  // 0; the same on every rank, for the schedule and the progress line).
  const auto run_update = [&](std::int64_t position) {
    for (Staged& s : staged) micro.push_back({s.inputs.get(), s.targets.get()});
    if (schedule) optimizer.set_lr(schedule->lr_at(static_cast<std::int64_t>(epoch - 1) * updates + position));
    const dist::StepStats stats = strategy_->train_step(micro, optimizer, train_config_);
    micro.clear();  // the batches' memory goes back before the next update's
    staged.clear();
    ++global_step_;
    sums.add(stats);
    const std::int64_t step = position + 1;
    DTRAIN_CHECK(!unscaled || !stats.grad_norm || std::isfinite(*stats.grad_norm),
                 "training diverged at step {}: gradient norm {} (lower the learning rate?)", global_step_,
                 *stats.grad_norm);
    const bool due = progress.due(step);
    if (stats.loss.defined() && (read_each_step || due || step == updates)) {
      shown_loss = stats.loss.item();
      if (tensorboard_) {
        tensorboard_->add_scalar("train/loss", shown_loss, global_step_);
        tensorboard_->add_scalar("train/learning_rate", optimizer.lr(), global_step_);
      }
      DTRAIN_CHECK(!unscaled || sums.nonfinite() == 0, "training diverged {} step {}: loss {} (lower the learning rate?{})",
                   read_each_step ? "at" : "by", global_step_, shown_loss,
                   read_each_step ? "" : " on a GPU a label outside the model's classes makes the loss NaN too");
    }
    if (due) progress.update(step, shown_loss, stats.samples);
    else progress.count(stats.samples);
    trace_after_update();
    for (const auto& callback : step_callbacks_) {
      callback({.epoch = epoch, .step = step, .global_step = global_step_, .lr = optimizer.lr(), .stats = &stats});
    }
    if (!checkpointer_) return;
    fault::maybe_kill_at_step(checkpointer_->rank(), global_step_);
    // The epoch's last update is saved by the end-of-epoch checkpoint, after its evaluation.
    const std::int64_t every = checkpointer_->options().every;
    if (every > 0 && global_step_ % every == 0 && step < updates && !checkpointer_->options().dir.empty()) {
      save_checkpoint(optimizer, epoch, step, sums.values());
    }
  };

  // Evaluation points split the epoch into `parts` stretches of `span` updates each.
  const int parts = options_.evaluations_per_epoch;
  const std::int64_t span = (updates + parts - 1) / parts;
  bool stop = false;
  double evaluating_s = 0;  // inside the epoch: not training time
  dist::Strategy::EpochReport report;  // the strategy's, for the epoch so far
  // At the end of stretch `part` (not the last): the strategy's ranks take one model, all
  // evaluate, and the next stretch starts unless the target was reached.
  const auto evaluation_point = [&](int part) {
    if (part + 1 >= parts || span * (part + 1) >= updates) return;
    const auto paused = Clock::now();
    report = strategy_->end_epoch();
    progress.finish();
    stop = evaluate_inside(epoch, static_cast<double>(span * (part + 1)) / static_cast<double>(updates));
    evaluating_s += seconds_since(paused);
    if (!stop) strategy_->begin_epoch(epoch - 1);
  };
  if (handed_out) {
    // Batches of the epoch's shuffled order, claimed one at a time, so that a rank that is
    // free takes the next; the schedule follows the position of the claimed batch. Each
    // stretch between evaluations has its own queue.
    const std::int64_t n = data_.train->size();
    const std::int64_t batches = (n + micro_batch_ - 1) / micro_batch_;
    const std::vector<std::int64_t> order = data::random_permutation(n, data_.seed, epoch - 1);
    for (int part = 0; part < parts && !stop; ++part) {
      const std::int64_t first_batch = std::min(batches, span * part * options_.accumulate);
      const std::int64_t count = std::min(batches, span * (part + 1) * options_.accumulate) - first_batch;
      if (count <= 0) break;
      const std::int64_t queue = static_cast<std::int64_t>(epoch - 1) * parts + part;
      for (;;) {
        std::int64_t first = -1;
        for (int k = 0; k < options_.accumulate; ++k) {
          std::optional<std::int64_t> c;
          {
            trace::Span claiming("claim batch", trace::Phase::Communication);  // asks server 0
            c = strategy_->claim_batch(queue, count);
          }
          if (!c) break;
          const std::int64_t b = first_batch + *c;
          if (first < 0) first = b;
          const std::int64_t begin = b * micro_batch_;
          const std::vector<std::int64_t> indices(order.begin() + begin,
                                                  order.begin() + std::min(n, begin + micro_batch_));
          trace::Span wait("data", trace::Phase::Data);
          staged.emplace_back(data_.train->get_epoch_batch(indices, epoch - 1), device);
        }
        if (staged.empty()) break;
        run_update(first / options_.accumulate);
      }
      evaluation_point(part);
    }
  } else {
    std::optional<trace::Span> first_wait(std::in_place, "data", trace::Phase::Data);
    auto it = train_loader_->begin_at(first_step * options_.accumulate);
    const auto end = train_loader_->end();
    std::optional<Staged> next;
    if (it != end) next.emplace(*it, device);
    first_wait.reset();
    while (next && !stop) {
      staged.push_back(std::move(*next));
      next.reset();
      {
        trace::Span wait("data", trace::Phase::Data);
        if (++it != end) next.emplace(*it, device);  // queued before this step's kernels
      }
      if (next && static_cast<int>(staged.size()) < options_.accumulate) continue;
      run_update(sums.updates());
      if (sums.updates() % span == 0) evaluation_point(static_cast<int>(sums.updates() / span) - 1);
    }
  }
  progress.finish();

  // The seconds are this rank's training time; the totals' collective comes after it.
  const double seconds = seconds_since(start) - evaluating_s;
  EpochSummary summary;
  summary.time = trace::thread_totals() - time_before;
  summary.strategy_report = stop ? std::move(report) : strategy_->end_epoch();
  // loss sum, finite, non-finite, correct, counted, samples
  const std::vector<double> t = sums.totals(*strategy_);
  summary.bad_samples_skipped = static_cast<std::int64_t>(
      over_ranks(*strategy_, {static_cast<double>(data_.train->bad_samples_skipped() - skipped_before)})[0]);
  summary.loader_wait_s = train_loader_->wait_seconds() - waited_before;
  summary.epoch = epoch;
  summary.nonfinite_updates = static_cast<std::int64_t>(t[2]);
  DTRAIN_CHECK(!unscaled || summary.nonfinite_updates == 0,
               "training diverged in epoch {}: {} update(s) over the ranks had a non-finite loss (lower the "
               "learning rate?)",
               epoch, summary.nonfinite_updates);
  summary.train_loss = t[1] > 0 ? t[0] / t[1] : 0;
  summary.train_accuracy = t[4] > 0 ? t[3] / t[4] : 0;
  summary.updates = sums.updates();
  // Handed-out batches differ in number between ranks: their sum; fixed shards are equal.
  summary.samples = handed_out ? static_cast<std::int64_t>(t[5]) : sums.samples() * shards;
  summary.seconds = seconds;
  summary.samples_per_s = summary.seconds > 0 ? static_cast<double>(summary.samples) / summary.seconds : 0;
  // Ranks whose updates differ in number (handed-out batches) agree on when to write.
  if (!options_.trace.file.empty() && !trace_written_ && over_ranks(*strategy_, {trace_pending_ ? 1.0 : 0.0})[0] > 0) {
    write_trace();
  }
  return summary;
}

bool Trainer::evaluate_inside(int epoch, double fraction) {
  const EvalResult e = evaluate();
  const bool reached = options_.target_accuracy > 0 && e.accuracy() >= options_.target_accuracy;
  if (reached) early_evaluation_ = e;
  if (!strategy_->reports()) return reached;
  const double seconds = seconds_since(fit_start_);
  if (options_.verbose) {
    fmt::print(options_.out, "epoch {}/{} at {:.0f}%: test loss {:.4f}, test accuracy {:.2f}%, {:.1f} s since the start\n",
               epoch, options_.epochs, 100 * fraction, e.loss(), 100 * e.accuracy(), seconds);
    std::fflush(options_.out);
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("evaluation/test_loss", e.loss(), global_step_);
    tensorboard_->add_scalar("evaluation/test_accuracy", e.accuracy(), global_step_);
  }
  if (metrics_) {
    metrics_->write("evaluation", {{"epoch", epoch - 1 + fraction},
                                   {"test_loss", e.loss()},
                                   {"test_accuracy", e.accuracy()},
                                   {"seconds", seconds}});
  }
  return reached;
}

EvalResult Trainer::evaluate() {
  DTRAIN_CHECK(test_loader_ != nullptr, "Trainer: evaluate() needs a test set");
  nn::Module& model = strategy_->module();
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  const Device device = strategy_->device();
  Tensor loss_sum = Tensor::zeros({}, {DType::f64, device});
  const bool top_k = options_.top_k > 1;
  Tensor correct = Tensor::zeros(top_k ? Shape{2} : Shape{}, {DType::i64, device});
  std::int64_t samples = 0;
  for (const data::Batch& batch : *test_loader_) {
    const dist::MicroBatch b{batch.inputs.to(device, /*non_blocking=*/true),
                             batch.targets.to(device, /*non_blocking=*/true)};
    const dist::EvalSums s = strategy_->eval_step(b, eval_config_);
    if (s.loss_sum.defined()) loss_sum = add(loss_sum, s.loss_sum);
    if (s.correct.defined()) correct = add(correct, s.correct);
    samples += s.samples;
  }
  model.train(was_training);
  // One read per evaluation, then the sums of every shard.
  const std::vector<std::int64_t> counts = correct.to(Device::cpu()).reshape({-1}).to_vector<std::int64_t>();
  const auto v = over_ranks(*strategy_, {loss_sum.item(), static_cast<double>(counts[0]),
                                         static_cast<double>(top_k ? counts[1] : 0), static_cast<double>(samples)});
  return {.loss_sum = v[0],
          .correct = static_cast<std::int64_t>(v[1]),
          .correct_top_k = static_cast<std::int64_t>(v[2]),
          .samples = static_cast<std::int64_t>(v[3])};
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
  const bool same_epochs = r->epoch_sums && r->epoch_sums->size() == 7 && p.updates_per_epoch == updates;
  resume_sums_ = same_epochs && resume_step_ > 0 ? *r->epoch_sums : std::vector<double>(7, 0.0);
  resume_sums_[5] = static_cast<double>(resume_step_);  // the updates already done in the epoch
  if (strategy_->reports() && options_.verbose) {
    fmt::print(options_.out, "resuming from {}: epoch {}, update {} of {} (global step {}), saved by a {}-rank {} job\n",
               r->from.string(), epoch, resume_step_, updates, global_step_, r->manifest.job.world_size,
               r->manifest.job.strategy);
    if (p.epochs != options_.epochs) {
      fmt::print(options_.out, "the saved run was planned for {} epoch(s), this one for {}: a learning-rate schedule "
                 "over the run's length follows the new total\n", p.epochs, options_.epochs);
    }
    if (epoch > options_.epochs) {
      fmt::print(options_.out, "the checkpoint is at the end of epoch {}: nothing left to train for {} epoch(s) (raise "
                 "--epochs to continue)\n", epoch - 1, options_.epochs);
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
                      epoch_sums, fmt::format("{} ({} parameters on this rank)", model.describe(), model.num_parameters()));
}

FitResult Trainer::fit(optim::Optimizer& optimizer, const optim::LrSchedule* schedule) {
  FitResult result;
  if (!strategy_->trains()) {
    // A server starts from the checkpoint too (its shard of the model and of the optimizer
    // state), and writes its share of each checkpoint when the chief asks.
    dist::Strategy::SaveShare save_share;
    if (checkpointer_) {
      resume(optimizer);
      if (!options_.checkpoint.dir.empty()) {
        save_share = [this](std::int64_t step, optim::NamedTensors share) {
          checkpointer_->save_share(step, std::move(share));
        };
      }
    }
    strategy_->serve(optimizer, save_share);
    return result;
  }
  // Time to accuracy runs from the first step to the end of the evaluation that reached
  // the target: evaluation is part of knowing that it was reached.
  const auto start = Clock::now();
  fit_start_ = start;
  const int first_epoch = resume(optimizer);
  trace::name_thread("training");
  trace_after_update();  // a timeline from the first update starts here
  for (int epoch = first_epoch; epoch <= options_.epochs; ++epoch) {
    early_evaluation_.reset();
    EpochSummary summary = train_epoch(optimizer, schedule, epoch);
    if (test_loader_) {
      // An evaluation inside the epoch that reached the target ended it.
      const EvalResult e = early_evaluation_ ? *early_evaluation_ : evaluate();
      summary.test_loss = e.loss();
      summary.test_accuracy = e.accuracy();
      summary.test_top_k_accuracy = e.top_k_accuracy();
    }
    if (options_.check_replicas) summary.replica_divergence = strategy_->replica_divergence();
    report(summary);
    for (const auto& callback : epoch_callbacks_) callback(summary);
    if (checkpointer_ && !options_.checkpoint.dir.empty()) save_checkpoint(optimizer, epoch + 1, 0, {});
    result.epochs.push_back(summary);
    result.test_accuracy = summary.test_accuracy;
    // Every rank has the same all-reduced accuracy, so all of them stop together.
    result.reached_target = options_.target_accuracy > 0 && summary.test_accuracy >= options_.target_accuracy;
    if (result.reached_target) break;
  }
  result.seconds = seconds_since(start);
  if (!options_.trace.file.empty() && !trace_written_) write_trace();  // the run ended inside the window
  report_time(result.epochs);
  if (checkpointer_ && !options_.checkpoint.dir.empty()) checkpointer_->finish();
  const dist::Strategy::EpochReport run = strategy_->end_training();
  if (strategy_->reports() && metrics_ && !run.values.empty()) metrics_->write("summary", run.values, run.series);
  if (strategy_->reports() && options_.verbose) {
    if (!run.text.empty()) fmt::print(options_.out, "{}\n", run.text);
    if (test_loader_) fmt::print(options_.out, "final test accuracy: {:.2f}%\n", 100 * result.test_accuracy);
    if (options_.target_accuracy > 0) {
      fmt::print(options_.out, "{} {:.2f}% test accuracy {} {} epoch(s){} {:.1f} s\n",
                 result.reached_target ? "reached" : "did not reach", 100 * options_.target_accuracy,
                 result.reached_target ? "after" : "in", result.epochs.size(), result.reached_target ? " in" : ",",
                 result.seconds);
    }
    std::fflush(options_.out);
  }
  return result;
}

}  // namespace dtrain::train
