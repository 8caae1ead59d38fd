#include "dtrain/dist/strategy/strategy.h"

#include "dtrain/autograd/autocast.h"
#include "dtrain/core/trace.h"
#include "dtrain/optim/clip_grad.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include <cmath>

namespace dtrain::dist {
namespace {

// The model's output for `inputs` and its loss, under autocast when configured (the
// caller's setting stands otherwise).
std::pair<Variable, Variable> output_and_loss(nn::Module& module, const MicroBatch& batch, const StepConfig& config) {
  std::optional<AutocastGuard> guard;
  if (config.autocast) guard.emplace(*config.autocast);
  Variable output = module(Variable(batch.inputs));
  Variable loss = config.loss(output, batch.targets);
  return {output, loss};
}

}  // namespace

Strategy::Strategy(std::string name, Device device, CommunicatorPtr world)
    : device_(device), world_(std::move(world)), name_(std::move(name)) {
  DTRAIN_CHECK(world_ != nullptr, "{} strategy: no communicator given", name_);
  placement_ = {.shard = {world_->rank(), world_->size()}, .reports = world_->rank() == 0, .sums = world_};
}

void Strategy::place(Placement placement) {
  DTRAIN_CHECK(placement.shard.count >= 1 && placement.shard.index >= 0 &&
                   placement.shard.index < placement.shard.count && placement.shard.splits >= 1,
               "{} strategy: rank {} placed at data shard {} of {} (split {} ways)", name_, rank(),
               placement.shard.index, placement.shard.count, placement.shard.splits);
  placement_ = std::move(placement);
}

void Strategy::reduce_sums(Tensor& sums) {
  DTRAIN_CHECK(placement_.sums != nullptr, "{} strategy: rank {} holds no evaluation shard to add up", name_, rank());
  placement_.sums->all_reduce(sums, ReduceOp::Sum);
  if (placement_.copies) placement_.copies->all_reduce(sums, ReduceOp::Max);
}

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
    forward_backward(micro[i], sample_share(micro[i].inputs.size(0), total, micro.size()), i + 1 == micro.size(),
                     config, stats);
  }
  exchange_gradients();
  update(stepped_optimizer(optimizer), config, stats);
  return stats;
}

double Strategy::sample_share(std::int64_t rows, std::int64_t total, std::size_t count) {
  return count == 1 || total == 0 ? 1.0 : static_cast<double>(rows) / static_cast<double>(total);
}

Variable Strategy::weighted_loss(const Variable& output, const Tensor& targets, double weight, const StepConfig& config,
                                 StepStats* stats) {
  Variable loss = config.loss(output, targets);
  Variable weighted = weight == 1 ? loss : mul(loss, weight);
  if (stats) {
    stats->loss = accumulate(stats->loss, weighted.data());
    if (config.correct) stats->correct = accumulate(stats->correct, config.correct(output.data(), targets));
  }
  return config.scaler ? config.scaler->scale(weighted) : weighted;
}

Tensor Strategy::accumulate(const Tensor& total, const Tensor& value) {
  return total.defined() ? add(total, value) : value;
}

void Strategy::forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                                StepStats& stats) {
  Variable scaled;
  {
    trace::Span span("forward", trace::Phase::Forward);
    std::optional<AutocastGuard> guard;  // forward and loss only, as in output_and_loss
    if (config.autocast) guard.emplace(*config.autocast);
    scaled = weighted_loss((*module_)(Variable(batch.inputs)), batch.targets, weight, config, &stats);
  }
  {
    trace::Span span("backward", trace::Phase::Backward);
    scaled.backward();
  }
  stats.samples += batch.inputs.size(0);
}

void Strategy::set_tensor_parallel(CommunicatorPtr group, TensorParallelPlan plan, TensorParallelOptions options) {
  DTRAIN_CHECK(module_ == nullptr, "{} strategy: set_tensor_parallel() after prepare()", name());
  tensor_parallel_setting_ = TensorParallelSetting{std::move(group), std::move(plan), options};
}

void Strategy::apply_tensor_parallel(nn::Module& model) {
  if (!tensor_parallel_setting_) return;
  const TensorParallelSetting& s = *tensor_parallel_setting_;
  tensor_parallel_ = parallelize(model, s.group, s.plan, s.options);
  tensor_parallel_partial_ = tensor_parallel_->partial();
  if (s.group->rank() != 0) add_counted_elsewhere(tensor_parallel_->replicated());
}

void Strategy::set_tensor_parallel_view(
    const std::function<std::vector<Variable>(const std::vector<Variable>&)>& slices_of) {
  if (!tensor_parallel_) return;
  tensor_parallel_partial_ = slices_of(tensor_parallel_->partial());
  if (tensor_parallel_->group()->rank() != 0) add_counted_elsewhere(slices_of(tensor_parallel_->replicated()));
}

std::string Strategy::tensor_parallel_part() const {
  return tensor_parallel_ ? fmt::format(".tp{}", tensor_parallel_->group()->rank()) : "";
}

void Strategy::share_tensor_parallel_slices(CheckpointPlan& plan) const {
  if (!tensor_parallel_ || !module_) return;
  struct Sliced {
    ParameterSlice slice;
    Shape local;
  };
  // Every name of each parameter of this rank's module that it holds a slice of.
  auto sliced = std::make_shared<std::map<std::string, Sliced>>();
  for (const auto& [name, p] : module_->named_parameters()) {
    if (const ParameterSlice* s = tensor_parallel_->slice_of(p)) sliced->emplace(name, Sliced{*s, p.shape()});
  }
  for (const auto& [alias, name] : module_->parameter_aliases()) {
    if (const auto it = sliced->find(name); it != sliced->end()) sliced->emplace(alias, it->second);
  }
  for (const auto& [name, s] : *sliced) plan.whole_shapes.emplace(name, s.slice.whole);
  // "<parameter><suffix>": the optimizer's entries are "<parameter>/<buffer>".
  const auto split = [](const std::string& key) {
    const auto slash = key.find('/');
    return std::pair{key.substr(0, slash), slash == std::string::npos ? std::string() : key.substr(slash)};
  };
  const bool first_rank = tensor_parallel_->group()->rank() == 0;
  plan.slice_entries = [sliced, split, first_rank](optim::NamedTensors entries) {
    optim::NamedTensors out;
    for (auto& [key, t] : entries) {
      const auto [name, suffix] = split(key);
      const auto it = sliced->find(name);
      if (it == sliced->end() || t.shape() != it->second.local) {
        if (first_rank) out.emplace_back(key, std::move(t));  // every rank holds it alike
        continue;
      }
      const ParameterSlice& s = it->second.slice;
      std::int64_t at = 0;
      for (const auto& [begin, size] : s.pieces) {
        out.emplace_back(fmt::format("{}[d{}:{}:{}]{}", name, s.dim, begin, begin + size, suffix),
                         t.narrow(s.dim, at, size).contiguous());
        at += size;
      }
    }
    return out;
  };
  plan.local_entries = [sliced, split](optim::NamedTensors entries) {
    optim::NamedTensors out;
    std::set<std::string> seen;
    for (auto& [key, t] : entries) {
      if (!seen.insert(key).second) continue;  // saved alike by several ranks
      const auto [name, suffix] = split(key);
      const auto it = sliced->find(name);
      if (it == sliced->end() || t.shape() != it->second.slice.whole) {
        out.emplace_back(key, std::move(t));
        continue;
      }
      const ParameterSlice& s = it->second.slice;
      std::vector<Tensor> pieces;
      for (const auto& [begin, size] : s.pieces) pieces.push_back(t.narrow(s.dim, begin, size));
      out.emplace_back(key, pieces.size() == 1 ? pieces.front().contiguous() : cat(pieces, s.dim));
    }
    return out;
  };
}

void Strategy::update(optim::Optimizer& optimizer, const StepConfig& config, StepStats& stats) {
  trace::Span span("optimizer", trace::Phase::Optimizer);
  if (tensor_parallel_) tensor_parallel_->finish_gradients(tensor_parallel_partial_);
  const CommunicatorPtr& parts = model_parts_;
  const bool spread = parts != nullptr && parts->size() > 1;
  // With the gradients spread over ranks, a scaler's inf/NaN must be seen by all of them:
  // the summed norm carries it. Where the optimizer steps elsewhere, the norm is the only
  // way to know that a scaled step must be skipped.
  const bool shared_overflow = config.scaler && (spread || !steps_optimizer_here_);
  bool nonfinite = false;
  if (config.clip_grad_norm > 0 || shared_overflow) {
    if (config.scaler) config.scaler->unscale(optimizer);  // clip the true gradients
    double squared = 0;
    if (counted_elsewhere_.empty()) {
      squared = optim::grad_squared_norm(optimizer.params());
    } else {
      std::vector<Variable> counted;
      for (const Variable& p : optimizer.params()) {
        const bool elsewhere = std::any_of(counted_elsewhere_.begin(), counted_elsewhere_.end(),
                                           [&](const Variable& e) { return e.is(p); });
        if (!elsewhere) counted.push_back(p);
      }
      squared = optim::grad_squared_norm(counted);
    }
    if (spread) {
      Tensor t = Tensor::full({1}, squared, {DType::f64});
      parts->all_reduce(t, ReduceOp::Sum);
      squared = t.item();
    }
    const double norm = std::sqrt(squared);
    if (config.clip_grad_norm > 0) {
      stats.grad_norm = norm;
      optim::clip_grads_to_norm(optimizer.params(), norm, config.clip_grad_norm);
    }
    nonfinite = !std::isfinite(norm);
    // Without a scaler an inf/NaN norm is divergence: leave the parameters as they were,
    // for the caller to report (the scaler skips such a step by itself).
    if (nonfinite && !config.scaler && steps_optimizer_here_) return;
    if (nonfinite && shared_overflow) config.scaler->mark_nonfinite(optimizer);
  }
  apply_update(optimizer, config, nonfinite);
}

void Strategy::apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool) {
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

LocalStrategy::LocalStrategy(Device device) : Strategy("local", device, single_process_communicator()) {}

std::shared_ptr<nn::Module> LocalStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "local strategy: prepare() needs a model");
  model->to(device_);
  module_ = std::move(model);
  return module_;
}

}  // namespace dtrain::dist
