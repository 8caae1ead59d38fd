#include "dtrain/dist/ps/ps_strategy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

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
    : Strategy("parameter_server", device, world), options_(options), mesh_(ps_mesh(world, options_)) {
  steps_optimizer_here_ = false;  // the servers step it
  place_among_workers();
}

ParameterServerStrategy::~ParameterServerStrategy() = default;

std::shared_ptr<nn::Module> ParameterServerStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "parameter server strategy: prepare() needs a model");
  DTRAIN_CHECK(ps_ == nullptr, "parameter server strategy: prepare() was called already");
  model->to(device_);
  ps_ = std::make_unique<ParameterServer>(world_, model, options_);
  module_ = std::move(model);
  place_among_workers();
  return module_;
}

ParameterServer& ParameterServerStrategy::parameter_server() {
  DTRAIN_CHECK(ps_ != nullptr, "parameter server strategy: prepare() the model first");
  return *ps_;
}

void ParameterServerStrategy::place_among_workers() {
  // The servers' group is null: they evaluate nothing.
  const CommunicatorPtr group = ps_ != nullptr ? ps_->worker_group() : nullptr;
  Shard shard{trains() ? mesh_.coordinate("dp") : 0, mesh_.role_size("worker")};
  // After a loss, the group of the workers left (their training batches come from server
  // 0's claims; this splits the test set among them).
  if (group != nullptr && !ps_->lost_workers().empty()) shard = {group->rank(), group->size()};
  place({.shard = shard, .reports = world_->rank() == 0, .sums = group});
}

StepStats ParameterServerStrategy::train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                                              const StepConfig& config) {
  lr_ = optimizer.lr();                                // the servers apply the push at the learning rate the caller set
  batches_ = static_cast<std::int64_t>(micro.size());  // each a claimed batch
  return Strategy::train_step(micro, optimizer, config);
}

CheckpointPlan ParameterServerStrategy::checkpoint_plan() const {
  const int rank = world_->rank(), workers = mesh_.role_size("worker");
  CheckpointPlan plan{.rank = rank,
                      .ranks = world_->size(),
                      .part = rank == 0         ? "model"
                              : rank >= workers ? fmt::format("server{}", rank - workers)
                                                : "",
                      .saves_optimizer = rank >= workers,
                      // Lockstep sync alone: with backup workers the others may push meanwhile.
                      .step_saves = options_.mode == PsMode::Sync && options_.backup_workers == 0,
                      .replicas = workers,
                      .servers = options_.servers,
                      .mesh = mesh_.layout()};
  if (trains()) {
    plan.absent_ranks = [ps = ps_.get()] { return ps->lost_workers(); };  // worker w is rank w
    // No worker pushes again before every server has taken its share, so that in every mode
    // the shares belong to the parameters the chief saved.
    plan.after_snapshot = [ps = ps_.get()](std::int64_t step) {
      DTRAIN_CHECK(ps != nullptr, "parameter server strategy: prepare() the model first");
      if (ps->worker_index() == 0) ps->request_save(step);
      ps->worker_group()->barrier();
    };
  }
  return plan;
}

Capabilities ParameterServerStrategy::capabilities() {
  if (!trains()) return {.server = this};
  // Lockstep sync reads fixed shards; the other modes, and backup workers, claim batches.
  const bool claims = options_.mode != PsMode::Sync || options_.backup_workers > 0;
  return {.dispenser = claims ? this : nullptr, .epochs = this, .remote_state = this};
}

bool ParameterServerStrategy::keeps_copies() const { return world_->rank() == 0; }

void ParameterServerStrategy::keep_copy(std::int64_t id) { parameter_server().keep_copy(id); }

std::optional<RemoteState::Restored> ParameterServerStrategy::restore_copy(std::int64_t id, std::int64_t window) {
  return parameter_server().restore_copy(id, window);
}

bool ParameterServerStrategy::shares_update() const { return options_.mode == PsMode::Sync; }

bool ParameterServerStrategy::trains() const { return mesh_.role() == "worker"; }

void ParameterServerStrategy::serve(optim::Optimizer& optimizer, const SaveShare& save_share) {
  parameter_server().serve(optimizer, save_share);
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
  total.dropped += more.dropped;
  total.handed_again += more.handed_again;
  total.missed += more.missed;
}

// The histogram up to its largest non-empty bin, its mean and max, as a report.
// backup_workers: also the late pushes dropped. `lost`: the workers lost so far.
EpochReport report(const StalenessStats& s, const std::string& prefix, int backup_workers,
                   const std::vector<int>& lost) {
  std::size_t last = 0;
  for (std::size_t k = 0; k < s.counts.size(); ++k) {
    if (s.counts[k] != 0) last = k;
  }
  std::vector<double> histogram;
  if (!s.counts.empty()) histogram.assign(s.counts.begin(), s.counts.begin() + static_cast<std::ptrdiff_t>(last) + 1);
  EpochReport out{.text = fmt::format("{}staleness mean {:.2f}, max {}", prefix, s.mean(), s.max),
                  .values = {{"staleness_mean", s.mean()}, {"staleness_max", static_cast<double>(s.max)}},
                  .series = {{"staleness_histogram", std::move(histogram)}}};
  if (backup_workers > 0) {
    out.text += fmt::format(", {} late gradient(s) dropped", s.dropped);
    out.values.emplace_back("dropped_gradients", static_cast<double>(s.dropped));
  }
  if (!lost.empty()) {
    out.text +=
        fmt::format(", worker(s) {} lost, {} batch(es) handed out again", fmt::join(lost, " and "), s.handed_again);
    if (s.missed > 0) out.text += fmt::format(" ({} left untrained: it was lost as the epoch ended)", s.missed);
    out.values.emplace_back("lost_workers", static_cast<double>(lost.size()));
    out.values.emplace_back("batches_handed_again", static_cast<double>(s.handed_again));
    out.values.emplace_back("batches_missed", static_cast<double>(s.missed));
  }
  return out;
}

}  // namespace

EpochReport ParameterServerStrategy::end_epoch() {
  ParameterServer& ps = parameter_server();
  ps.leave();
  ps.sync_parameters();
  place_among_workers();  // the workers lost so far are known here
  if (ps.worker_index() != 0) return {};
  const StalenessStats more = ps.staleness();
  add_to(staleness_, more);
  add_to(run_staleness_, more);
  return report(staleness_, "", options_.backup_workers, ps.lost_workers());
}

EpochReport ParameterServerStrategy::end_training() {
  ParameterServer& ps = parameter_server();
  ps.shutdown();
  if (ps.worker_index() != 0) return {};
  return report(
      run_staleness_,
      fmt::format("parameter servers ({}): {} pushes applied, ", ps_mode_name(options_), run_staleness_.total()),
      options_.backup_workers, ps.lost_workers());
}

void ParameterServerStrategy::forward_backward(const MicroBatch& batch, double weight, bool last,
                                               const StepConfig& config, StepStats& stats) {
  // The last micro-batch's backward pushes; a loss scaler or clipping needs every gradient
  // before any is sent.
  if (last) parameter_server().begin_push(lr_, config.scaler != nullptr || config.clip_grad_norm > 0, batches_);
  Strategy::forward_backward(batch, weight, last, config, stats);
}

void ParameterServerStrategy::apply_update(optim::Optimizer&, const StepConfig& config, bool nonfinite) {
  if (config.scaler) config.scaler->update();
  parameter_server().finish_push(nonfinite);
}

}  // namespace dtrain::dist
