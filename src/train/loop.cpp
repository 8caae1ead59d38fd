#include "dtrain/train/loop.h"

#include "dtrain/autograd/autocast.h"
#include "dtrain/optim/clip_grad.h"
#include "dtrain/tensor/upload.h"

#include <chrono>
#include <cmath>

namespace dtrain::train {

std::int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  Tensor predicted = argmax(logits, 1);
  return static_cast<std::int64_t>(sum(eq(predicted, labels.to(DType::i64)).to(DType::i64)).item());
}

namespace {

// Where the model's parameters are (the CPU for a model without any).
Device device_of(const std::vector<Variable>& params) {
  return params.empty() ? Device::cpu() : params.front().device();
}

// The logits and the loss of one batch already on the model's device.
struct Forward {
  Variable logits, loss;
};

Forward forward(nn::Module& model, const Tensor& x, const Tensor& y, double label_smoothing,
                std::optional<DType> autocast) {
  std::optional<AutocastGuard> guard;  // none given: the caller's setting stands
  if (autocast) guard.emplace(*autocast);
  Variable logits = model.forward(Variable(x));
  Variable loss = cross_entropy(logits, y, label_smoothing);
  return {logits, loss};
}

}  // namespace

EpochStats train_epoch(nn::Module& model, data::DataLoader& loader, optim::Optimizer& optimizer,
                       const EpochOptions& options, Progress* progress) {
  auto start = std::chrono::steady_clock::now();
  model.train();
  EpochStats stats;
  double loss_sum = 0;
  std::int64_t finite_steps = 0;  // steps whose loss counts (a scaler's skipped ones do not)
  std::int64_t correct = 0;
  const auto params = model.parameters();
  const Device device = device_of(params);
  optim::LossScaler* scaler = options.scaler;
  // Each batch's upload is queued before the previous step's kernels, so that on a GPU it
  // overlaps them (upload.h); on the CPU an Upload is the batch itself.
  struct Staged {
    Upload inputs, targets;
    std::int64_t n;
  };
  auto stage = [&](const data::Batch& b) {
    return Staged{Upload(b.inputs, device), Upload(b.targets, device), b.inputs.size(0)};
  };
  auto it = loader.begin();
  const auto end = loader.end();
  std::optional<Staged> next;
  if (it != end) next.emplace(stage(*it));
  while (next) {
    Staged batch = std::move(*next);
    next.reset();
    if (++it != end) next.emplace(stage(*it));
    if (options.schedule) optimizer.set_lr(options.schedule->lr_at(options.first_step + stats.steps));
    optimizer.zero_grad();
    const Tensor& targets = batch.targets.get();
    const Forward f = forward(model, batch.inputs.get(), targets, options.label_smoothing, options.autocast);
    Variable scaled = scaler ? scaler->scale(f.loss) : f.loss;
    scaled.backward();
    if (options.after_backward) options.after_backward();
    if (scaler && options.clip_grad_norm > 0) scaler->unscale(optimizer);
    double norm = options.clip_grad_norm > 0 ? optim::clip_grad_norm(params, options.clip_grad_norm) : 0;
    double loss_value = f.loss.item();
    // With a scaler, inf/NaN (an f16 overflow in forward or backward) skips the step and
    // shrinks the scale, as PyTorch's GradScaler does; without one it is divergence.
    const bool finite = std::isfinite(loss_value);
    DTRAIN_CHECK(scaler || (finite && std::isfinite(norm)),
                 "training diverged at step {}: loss {}, gradient norm {} (lower the learning rate?)",
                 options.first_step + stats.steps, loss_value, norm);
    if (scaler) {
      scaler->step(optimizer);
      scaler->update();
    } else {
      optimizer.step();
    }

    const std::int64_t n = batch.n;
    if (finite) {
      loss_sum += loss_value;
      ++finite_steps;
    }
    correct += count_correct(f.logits.data(), targets);
    stats.samples += n;
    ++stats.steps;
    if (progress) progress->update(stats.steps, loss_value, n);
  }
  if (progress) progress->finish();
  stats.mean_loss = finite_steps ? loss_sum / static_cast<double>(finite_steps) : 0;
  stats.accuracy = stats.samples ? static_cast<double>(correct) / static_cast<double>(stats.samples) : 0;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

EvalStats evaluate(nn::Module& model, data::DataLoader& loader, std::optional<DType> autocast) {
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  EvalStats stats;
  const Device device = device_of(model.parameters());
  for (const data::Batch& batch : loader) {
    const Tensor targets = batch.targets.to(device, /*non_blocking=*/true);
    const Forward f = forward(model, batch.inputs.to(device, /*non_blocking=*/true), targets, 0, autocast);
    const std::int64_t n = batch.inputs.size(0);
    stats.loss_sum += f.loss.item() * static_cast<double>(n);
    stats.correct += count_correct(f.logits.data(), targets);
    stats.samples += n;
  }
  model.train(was_training);
  return stats;
}

}  // namespace dtrain::train
