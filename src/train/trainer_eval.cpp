// The Trainer's evaluation: the metrics, the sharded evaluation of the test set, and the
// evaluations inside an epoch.
#include "dtrain/train/trainer.h"

#include "train/rank_sums.h"

#include <fmt/format.h>

#include <chrono>

namespace dtrain::train {

Tensor count_correct(const Tensor& logits, const Tensor& labels) {
  return sum(eq(argmax(logits, 1), labels.to(DType::i64)).to(DType::i64));
}

Tensor count_top_k_correct(const Tensor& logits, const Tensor& labels, int k) {
  const Tensor label_logit = gather(logits, 1, labels.to(DType::i64).reshape({labels.numel(), 1}));
  const Tensor above = sum(gt(logits, label_logit).to(DType::i64), {1});
  return sum(lt(above, Tensor::scalar(k, {DType::i64, logits.device()})).to(DType::i64));
}

std::vector<Metric> default_metrics(int top_k) {
  std::vector<Metric> metrics{{"accuracy", count_correct}};
  if (top_k > 1) {
    metrics.push_back({fmt::format("top{}_accuracy", top_k), [top_k](const Tensor& logits, const Tensor& labels) {
                         return count_top_k_correct(logits, labels, top_k);
                       }});
  }
  return metrics;
}

EvalResult Trainer::evaluate() {
  DTRAIN_CHECK(test_loader_ != nullptr, "Trainer: evaluate() needs a test set");
  if (const dist::Strategy::Shard now = strategy_->data_shard();
      now.index != test_shard_.index || now.count != test_shard_.count) {
    make_test_loader(now);  // ranks were lost: the test set is split among those left
  }
  nn::Module& model = strategy_->module();
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  const Device device = strategy_->device();
  const auto metrics = static_cast<std::int64_t>(metrics_fns_.size());
  Tensor loss_sum = Tensor::zeros({}, {DType::f64, device});
  Tensor counts = Tensor::zeros(metrics > 1 ? Shape{metrics} : Shape{}, {DType::i64, device});
  std::int64_t samples = 0;
  for (const data::Batch& batch : *test_loader_) {
    const dist::MicroBatch b{batch.inputs.to(device, /*non_blocking=*/true),
                             batch.targets.to(device, /*non_blocking=*/true)};
    const dist::EvalSums s = strategy_->eval_step(b, eval_config_);
    if (s.loss_sum.defined()) loss_sum = add(loss_sum, s.loss_sum);
    if (s.correct.defined()) counts = add(counts, s.correct);
    samples += s.samples;
  }
  model.train(was_training);
  // One read per evaluation, then the sums of every shard.
  const std::vector<std::int64_t> mine = counts.to(Device::cpu()).reshape({-1}).to_vector<std::int64_t>();
  std::vector<double> local{loss_sum.item(), static_cast<double>(samples)};
  for (std::int64_t m = 0; m < metrics; ++m) local.push_back(static_cast<double>(mine[static_cast<std::size_t>(m)]));
  const std::vector<double> v = over_ranks(*strategy_, local);
  EvalResult r{.loss_sum = v[0], .counts = {}, .samples = static_cast<std::int64_t>(v[1])};
  for (std::int64_t m = 0; m < metrics; ++m)
    r.counts.push_back(static_cast<std::int64_t>(v[static_cast<std::size_t>(2 + m)]));
  return r;
}

bool Trainer::evaluate_inside(int epoch, double fraction) {
  const EvalResult e = evaluate();
  const bool reached = options_.target_accuracy > 0 && e.accuracy() >= options_.target_accuracy;
  if (reached) early_evaluation_ = e;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - fit_start_).count();
  if (strategy_->reports() && options_.verbose) {
    fmt::print(options_.out,
               "epoch {}/{} at {:.0f}%: test loss {:.4f}, test accuracy {:.2f}%, {:.1f} s since the start\n", epoch,
               options_.epochs, 100 * fraction, e.loss(), 100 * e.accuracy(), seconds);
    std::fflush(options_.out);
  }
  const EvalEvent inside{.epoch = epoch,
                         .fraction = fraction,
                         .closes_epoch = false,
                         .global_step = global_step_,
                         .seconds = seconds,
                         .result = e};
  notify([&](TrainObserver& o) { o.on_evaluation(inside); });
  return reached;
}

}  // namespace dtrain::train
