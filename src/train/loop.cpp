#include "dtrain/train/loop.h"

#include "dtrain/optim/clip_grad.h"

#include <chrono>
#include <cmath>

namespace dtrain::train {

std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  Tensor predicted = argmax(logits, 1);
  return static_cast<std::int64_t>(sum(eq(predicted, labels.to(DType::i64)).to(DType::i64)).item());
}

EpochStats train_epoch(nn::Module& model, data::DataLoader& loader, optim::Optimizer& optimizer,
                       const EpochOptions& options, Progress* progress) {
  auto start = std::chrono::steady_clock::now();
  model.train();
  EpochStats stats;
  double loss_sum = 0;
  std::int64_t correct = 0;
  const auto params = model.parameters();
  for (const data::Batch& batch : loader) {
    if (options.schedule) optimizer.set_lr(options.schedule->lr_at(options.first_step + stats.steps));
    optimizer.zero_grad();
    Variable logits = model.forward(Variable(batch.inputs));
    Variable loss = cross_entropy(logits, batch.targets, options.label_smoothing);
    loss.backward();
    if (options.after_backward) options.after_backward();
    double norm = options.clip_grad_norm > 0 ? optim::clip_grad_norm(params, options.clip_grad_norm) : 0;
    double loss_value = loss.item();
    DTRAIN_CHECK(std::isfinite(loss_value) && std::isfinite(norm),
                 "training diverged at step {}: loss {}, gradient norm {} (lower the learning rate?)",
                 options.first_step + stats.steps, loss_value, norm);
    optimizer.step();

    const std::int64_t n = batch.inputs.size(0);
    loss_sum += loss_value;
    correct += count_correct(logits.data(), batch.targets);
    stats.samples += n;
    ++stats.steps;
    if (progress) progress->update(stats.steps, loss_value, n);
  }
  if (progress) progress->finish();
  stats.mean_loss = stats.steps ? loss_sum / static_cast<double>(stats.steps) : 0;
  stats.accuracy = stats.samples ? static_cast<double>(correct) / static_cast<double>(stats.samples) : 0;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

EvalStats evaluate(nn::Module& model, data::DataLoader& loader) {
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  EvalStats stats;
  for (const data::Batch& batch : loader) {
    Variable logits = model.forward(Variable(batch.inputs));
    const std::int64_t n = batch.inputs.size(0);
    stats.loss_sum += cross_entropy(logits, batch.targets).item() * static_cast<double>(n);
    stats.correct += count_correct(logits.data(), batch.targets);
    stats.samples += n;
  }
  model.train(was_training);
  return stats;
}

}  // namespace dtrain::train
