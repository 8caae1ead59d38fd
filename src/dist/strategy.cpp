#include "dtrain/dist/strategy.h"

#include "dtrain/autograd/autocast.h"
#include "dtrain/dist/data_parallel_strategy.h"
#include "dtrain/optim/clip_grad.h"

#include <cmath>

namespace dtrain::dist {
namespace {

// The running sum `total` (undefined at first) plus `value`.
Tensor accumulate(const Tensor& total, const Tensor& value) { return total.defined() ? add(total, value) : value; }

// The model's output for `inputs` and its loss, under autocast when configured (the
// caller's setting stands otherwise).
std::pair<Variable, Variable> output_and_loss(nn::Module& module, const MicroBatch& batch, const StepConfig& config) {
  std::optional<AutocastGuard> guard;
  if (config.autocast) guard.emplace(*config.autocast);
  Variable output = module.forward(Variable(batch.inputs));
  Variable loss = config.loss(output, batch.targets);
  return {output, loss};
}

}  // namespace

Strategy::~Strategy() = default;

nn::Module& Strategy::module() const {
  DTRAIN_CHECK(module_ != nullptr, "{} strategy: prepare() the model first", name());
  return *module_;
}

StepStats Strategy::train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                               const StepConfig& config) {
  module();  // prepared
  DTRAIN_CHECK(!micro.empty(), "{} strategy: train_step needs at least one micro-batch", name());
  DTRAIN_CHECK(config.loss != nullptr, "{} strategy: StepConfig::loss is not set", name());
  optimizer.zero_grad();
  StepStats stats;
  // Each micro-batch's loss is weighted by its share of the update's samples, so that the
  // summed gradients are those of the mean loss over the update (a shorter last
  // micro-batch counts for what it holds); one micro-batch keeps its loss as it is.
  std::int64_t total = 0;
  for (const MicroBatch& b : micro) total += b.inputs.size(0);
  for (std::size_t i = 0; i < micro.size(); ++i) {
    const double weight = micro.size() == 1 || total == 0
                              ? 1.0
                              : static_cast<double>(micro[i].inputs.size(0)) / static_cast<double>(total);
    forward_backward(micro[i], weight, i + 1 == micro.size(), config, stats);
  }
  exchange_gradients();
  update(optimizer, config, stats);
  return stats;
}

void Strategy::forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                                StepStats& stats) {
  auto [output, loss] = output_and_loss(*module_, batch, config);
  Variable weighted = weight == 1 ? loss : mul(loss, weight);
  Variable scaled = config.scaler ? config.scaler->scale(weighted) : weighted;
  scaled.backward();
  stats.loss = accumulate(stats.loss, weighted.data());
  if (config.correct) stats.correct = accumulate(stats.correct, config.correct(output.data(), batch.targets));
  stats.samples += batch.inputs.size(0);
}

void Strategy::update(optim::Optimizer& optimizer, const StepConfig& config, StepStats& stats) {
  if (config.clip_grad_norm > 0) {
    if (config.scaler) config.scaler->unscale(optimizer);  // clip the true gradients
    stats.grad_norm = optim::clip_grad_norm(optimizer.params(), config.clip_grad_norm);
    // Without a scaler an inf/NaN norm is divergence: leave the parameters as they were,
    // for the caller to report (the scaler skips such a step by itself).
    if (!config.scaler && !std::isfinite(*stats.grad_norm)) return;
  }
  if (config.scaler) {
    config.scaler->step(optimizer);  // skipped when a gradient is inf or NaN
    config.scaler->update();
  } else {
    optimizer.step();
  }
}

EvalSums Strategy::eval_step(const MicroBatch& batch, const StepConfig& config) {
  module();
  DTRAIN_CHECK(config.loss != nullptr, "{} strategy: StepConfig::loss is not set", name());
  auto [output, loss] = output_and_loss(*module_, batch, config);
  EvalSums sums;
  sums.samples = batch.inputs.size(0);
  sums.loss_sum = mul(loss.data().to(DType::f64), static_cast<double>(sums.samples));
  if (config.correct) sums.correct = config.correct(output.data(), batch.targets);
  return sums;
}

nn::StateDict Strategy::checkpoint_state() const { return module().state_dict(); }

std::shared_ptr<nn::Module> LocalStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "local strategy: prepare() needs a model");
  model->to(device_);
  module_ = std::move(model);
  return module_;
}

std::shared_ptr<Strategy> default_strategy(const CommunicatorPtr& world, Device device) {
  DTRAIN_CHECK(world != nullptr, "default_strategy: no communicator given");
  if (world->size() == 1) return std::make_shared<LocalStrategy>(device);
  return std::make_shared<DataParallelStrategy>(world, device);
}

}  // namespace dtrain::dist
