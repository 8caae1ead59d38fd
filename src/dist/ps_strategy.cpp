#include "dtrain/dist/ps_strategy.h"

#include "dtrain/optim/clip_grad.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dtrain::dist {

namespace {

// worker[dp=W] + ps[ps=S] over `world`, after checking that both roles have ranks.
DeviceMesh ps_mesh(const CommunicatorPtr& world, const PsOptions& options) {
  DTRAIN_CHECK(world != nullptr, "parameter server strategy: no communicator given");
  DTRAIN_CHECK(options.servers >= 1 && options.servers < world->size(),
               "parameter server strategy: {} server(s) among {} ranks: need at least one server and one worker",
               options.servers, world->size());
  return DeviceMesh(world, std::vector<MeshBlock>{{"worker", {{"dp", world->size() - options.servers}}},
                                                  {"ps", {{"ps", options.servers}}}});
}

}  // namespace

ParameterServerStrategy::ParameterServerStrategy(CommunicatorPtr world, Device device, PsOptions options)
    : Strategy(device), world_(std::move(world)), options_(options), mesh_(ps_mesh(world_, options_)) {}

ParameterServerStrategy::~ParameterServerStrategy() = default;

std::shared_ptr<nn::Module> ParameterServerStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "parameter server strategy: prepare() needs a model");
  DTRAIN_CHECK(ps_ == nullptr, "parameter server strategy: prepare() was called already");
  model->to(device_);
  ps_ = std::make_unique<ParameterServer>(world_, model, options_);
  module_ = std::move(model);
  return module_;
}

ParameterServer& ParameterServerStrategy::parameter_server() {
  DTRAIN_CHECK(ps_ != nullptr, "parameter server strategy: prepare() the model first");
  return *ps_;
}

Strategy::Shard ParameterServerStrategy::data_shard() const {
  return {trains() ? mesh_.coordinate("dp") : 0, mesh_.role_size("worker")};
}

void ParameterServerStrategy::reduce_sums(Tensor& sums) {
  const CommunicatorPtr& group = parameter_server().worker_group();
  DTRAIN_CHECK(group != nullptr, "parameter server strategy: reduce_sums on server rank {}", world_->rank());
  group->all_reduce(sums, ReduceOp::Sum);
}

StepStats ParameterServerStrategy::train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                                              const StepConfig& config) {
  lr_ = optimizer.lr();  // the servers apply the push at the learning rate the caller set
  return Strategy::train_step(micro, optimizer, config);
}

Strategy::CheckpointRole ParameterServerStrategy::checkpoint_role() const {
  const int rank = world_->rank(), workers = mesh_.role_size("worker");
  // The chief writes the model (its values are the servers' after each sync step and at
  // every epoch's end); each server its share of the optimizer state.
  return {.rank = rank,
          .ranks = world_->size(),
          .part = rank == 0 ? "model" : rank >= workers ? fmt::format("server{}", rank - workers) : "",
          .replicas = workers,
          .servers = options_.servers,
          .saves_optimizer = rank >= workers,
          .step_saves = options_.mode == PsMode::Sync};
}

nn::StateDict ParameterServerStrategy::checkpoint_state() const {
  return world_->rank() == 0 ? Strategy::checkpoint_state() : nn::StateDict{};
}

bool ParameterServerStrategy::trains() const { return mesh_.role() == "worker"; }

void ParameterServerStrategy::serve(optim::Optimizer& optimizer, const SaveShare& save_share) {
  parameter_server().serve(optimizer, save_share);
}

void ParameterServerStrategy::checkpoint_servers(std::int64_t step) {
  ParameterServer& ps = parameter_server();
  if (ps.worker_index() == 0) ps.request_save(step);
  // No worker pushes again before every server has taken its share, so that in every mode
  // the shares belong to the parameters the chief saved.
  ps.worker_group()->barrier();
}

std::optional<std::int64_t> ParameterServerStrategy::claim_batch(std::int64_t epoch, std::int64_t batches) {
  return parameter_server().claim_batch(epoch, batches);
}

void ParameterServerStrategy::begin_epoch(std::int64_t epoch) {
  if (epoch != epoch_) staleness_ = {};  // a new epoch, not the next stretch of this one
  epoch_ = epoch;
  parameter_server().join();
}

namespace {

void add_to(StalenessStats& total, const StalenessStats& more) {
  total.counts.resize(std::max(total.counts.size(), more.counts.size()));
  for (std::size_t k = 0; k < more.counts.size(); ++k) total.counts[k] += more.counts[k];
  total.max = std::max(total.max, more.max);
}

// The histogram up to its largest non-empty bin, its mean and max, as a report.
Strategy::EpochReport report(const StalenessStats& s, const std::string& prefix) {
  std::size_t last = 0;
  for (std::size_t k = 0; k < s.counts.size(); ++k) {
    if (s.counts[k] != 0) last = k;
  }
  std::vector<double> histogram;
  if (!s.counts.empty()) histogram.assign(s.counts.begin(), s.counts.begin() + static_cast<std::ptrdiff_t>(last) + 1);
  return {.text = fmt::format("{}staleness mean {:.2f}, max {}", prefix, s.mean(), s.max),
          .values = {{"staleness_mean", s.mean()}, {"staleness_max", static_cast<double>(s.max)}},
          .series = {{"staleness_histogram", std::move(histogram)}}};
}

}  // namespace

Strategy::EpochReport ParameterServerStrategy::end_epoch() {
  ParameterServer& ps = parameter_server();
  ps.leave();
  ps.sync_parameters();
  if (ps.worker_index() != 0) return {};
  const StalenessStats more = ps.staleness();
  add_to(staleness_, more);
  add_to(run_staleness_, more);
  return report(staleness_, "");
}

Strategy::EpochReport ParameterServerStrategy::end_training() {
  if (!trains()) return {};
  ParameterServer& ps = parameter_server();
  ps.shutdown();
  if (ps.worker_index() != 0) return {};
  return report(run_staleness_,
                fmt::format("parameter servers ({}): {} pushes applied, ", ps_mode_name(options_), run_staleness_.total()));
}

void ParameterServerStrategy::forward_backward(const MicroBatch& batch, double weight, bool last,
                                               const StepConfig& config, StepStats& stats) {
  // The last micro-batch's backward pushes; a loss scaler or clipping needs every gradient
  // before any is sent.
  if (last) parameter_server().begin_push(lr_, config.scaler != nullptr || config.clip_grad_norm > 0);
  Strategy::forward_backward(batch, weight, last, config, stats);
}

void ParameterServerStrategy::update(optim::Optimizer& optimizer, const StepConfig& config, StepStats& stats) {
  bool skip = false;
  if (config.scaler || config.clip_grad_norm > 0) {
    if (config.scaler) config.scaler->unscale(optimizer);
    const double norm = std::sqrt(optim::grad_squared_norm(optimizer.params()));
    if (config.clip_grad_norm > 0) {
      stats.grad_norm = norm;
      optim::clip_grads_to_norm(optimizer.params(), norm, config.clip_grad_norm);
    }
    skip = !std::isfinite(norm);
    if (config.scaler) {
      if (skip) config.scaler->mark_nonfinite(optimizer);
      config.scaler->update();
    }
  }
  parameter_server().finish_push(skip);
}

}  // namespace dtrain::dist
