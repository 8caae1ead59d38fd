#include "dtrain/dist/pipeline/pipeline_strategy.h"

#include "dtrain/comm/partition.h"
#include "dist/pipeline/pipeline_executor.h"
#include "dist/zero/optimizer_shards.h"
#include "dist/zero/replica_sync.h"
#include "dtrain/dist/strategy/parallel_dims.h"
#include "dtrain/dist/pipeline/pipeline_partition.h"
#include "dtrain/dist/data_parallel/sync_batch_norm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

namespace dtrain::dist {
namespace {

// This rank's layers, registered under their names in the whole model, so that its state
// dict is the model's restricted to the stage.
class PipelineStage final : public nn::Module {
 public:
  void add(const std::string& name, nn::ModulePtr layer) { register_module(name, std::move(layer)); }
  Variable forward(const Variable&) override {
    DTRAIN_FAIL("pipeline stage: its forward runs through PipelineStrategy::train_step and eval_step");
  }
  std::string describe() const override { return "PipelineStage"; }
};

// Every rank must cut the same model the same way: each compares its description with
// world rank 0's, and all of them throw when any differs (a collective).
void check_same_everywhere(const CommunicatorPtr& world, const std::vector<std::int64_t>& mine,
                           const std::string& what) {
  Tensor n = Tensor::full({1}, static_cast<double>(mine.size()), {DType::i64});
  world->all_reduce(n, ReduceOp::Max);
  std::vector<std::int64_t> padded = mine;
  padded.resize(static_cast<std::size_t>(n.item<std::int64_t>()), -1);
  Tensor theirs = Tensor::from_vector<std::int64_t>(padded, {static_cast<std::int64_t>(padded.size())});
  world->broadcast(theirs, 0);
  const bool differs = theirs.to_vector<std::int64_t>() != padded;
  Tensor any = Tensor::full({1}, differs ? 1 : 0, {DType::i64});
  world->all_reduce(any, ReduceOp::Max);
  if (any.item() == 0) return;
  DTRAIN_CHECK(!differs,
               "pipeline: rank {} has {} [{}], rank 0 has [{}]: every rank must build the same model and cut "
               "it at the same points",
               world->rank(), what, fmt::join(padded, ", "), fmt::join(theirs.to_vector<std::int64_t>(), ", "));
  DTRAIN_FAIL(
      "pipeline: another rank's {} differs from rank 0's (see its message): every rank must build the same "
      "model and cut it at the same points",
      what);
}

}  // namespace

namespace {

// The factory's mesh for pp=stages over `world` (parallel_dims.h), after checking that it
// divides: under ZeRO the shards span all of a stage's replicas.
std::shared_ptr<const DeviceMesh> pipeline_mesh(const CommunicatorPtr& world, const PipelineOptions& o) {
  const int stages = o.stages;
  DTRAIN_CHECK(world != nullptr, "pipeline strategy: no communicator given");
  DTRAIN_CHECK(stages >= 1, "pipeline strategy: stages must be >= 1, got {}", stages);
  DTRAIN_CHECK(world->size() % stages == 0,
               "pipeline strategy: {} ranks is not a multiple of the {} stages (ranks = stages x data-parallel "
               "replicas)",
               world->size(), stages);
  const int dp = world->size() / stages;
  if (o.zero > 0) return ParallelDims{.pp = stages, .dp_shard = dp, .zero = o.zero}.mesh(world);
  return ParallelDims{.pp = stages, .dp_replicate = dp}.mesh(world);
}

}  // namespace

PipelineStrategy::PipelineStrategy(CommunicatorPtr world, Device device, PipelineOptions options)
    : PipelineStrategy(pipeline_mesh(world, options), device, std::move(options)) {}

PipelineStrategy::PipelineStrategy(std::shared_ptr<const DeviceMesh> mesh, Device device, PipelineOptions options)
    : Strategy("pipeline", device, mesh ? mesh->world() : nullptr),
      mesh_(std::move(mesh)),
      options_(std::move(options)) {
  DTRAIN_CHECK(mesh_->role_group() == mesh_->world(),
               "pipeline strategy: the mesh {} has several roles; a pipeline "
               "takes every rank",
               mesh_->describe());
  DTRAIN_CHECK(mesh_->has("pp") && mesh_->size("pp") == options_.stages,
               "pipeline strategy: the mesh {} must have a \"pp\" dimension of the {} stages", mesh_->describe(),
               options_.stages);
  const int K = options_.stages;
  check_schedule(options_.schedule, {K, options_.virtual_stages, options_.micro_batches});
  pipe_ = mesh_->group("pp");
  stage_ = mesh_->coordinate("pp");
  if (mesh_->has("dp")) {
    replicas_comm_ = mesh_->group("dp");
    replica_ = mesh_->coordinate("dp");
    replicas_ = mesh_->size("dp");
  }
  const int tp = mesh_->has("tp") ? mesh_->size("tp") : 1;
  DTRAIN_CHECK(replicas_ * K * tp == world_->size(),
               "pipeline strategy: the mesh {} has dimensions besides dp, pp and tp", mesh_->describe());
  // A tensor-parallel group reads one shard and computes one loss: the first of its ranks
  // reports, and the sums add up over the other dimensions.
  const bool first_of_tp = tp == 1 || mesh_->coordinate("tp") == 0;
  place({.shard = {replica_, replicas_, options_.micro_batches},
         .reports = replica_ == 0 && stage_ == loss_stage() && first_of_tp,
         .sums = tp > 1 ? mesh_->group("dp_pp") : world_,
         .copies = tp > 1 ? mesh_->group("tp") : nullptr});
  // The model's gradients are spread over the stages (a stage's replicas hold the same
  // averaged ones) and their tensor-parallel ranks; over every rank once the replicas
  // shard the optimizer (prepare()).
  set_model_parts(tp > 1 ? mesh_->group("pp_tp") : pipe_);
  for (int s : options_.recompute_stages) {
    DTRAIN_CHECK(s >= 0 && s < K, "pipeline strategy: recompute_stages names stage {}; the stages are 0 to {}", s,
                 K - 1);
  }
  if (options_.zero > 0) {
    DTRAIN_CHECK(options_.data_parallel.data_parallel.gradient_exchange == "all_reduce" &&
                     !options_.data_parallel.data_parallel.exchange_factory,
                 "pipeline strategy: a sharded optimizer (zero={}) reduce-scatters the gradients itself; it takes no "
                 "other gradient exchange (got '{}'; 16-bit shares are its `wire`)",
                 options_.zero, options_.data_parallel.data_parallel.gradient_exchange);
    // Every rank holds a slice of its stage's gradients; under hybrid sharding the groups
    // of shards hold the same ones, so the parts of one model are a shard group's, all stages.
    set_model_parts(mesh_->has("dp_shard_pp") ? mesh_->group("dp_shard_pp") : world_);
  }
}

PipelineStrategy::~PipelineStrategy() = default;

int PipelineStrategy::loss_stage() const {
  const PipelineShape shape{options_.stages, options_.virtual_stages, options_.micro_batches};
  return stage_of(options_.schedule, shape, parts() - 1);
}

bool PipelineStrategy::recomputes(int stage) const {
  return options_.recompute || std::find(options_.recompute_stages.begin(), options_.recompute_stages.end(), stage) !=
                                   options_.recompute_stages.end();
}

int PipelineStrategy::parts() const { return options_.stages * options_.virtual_stages; }

std::pair<int, int> PipelineStrategy::chunk_layers(int c, int layers) const {
  return {c == 0 ? 0 : cuts_[static_cast<std::size_t>(c) - 1],
          c == parts() - 1 ? layers : cuts_[static_cast<std::size_t>(c)]};
}

std::vector<int> PipelineStrategy::virtual_stages_of(int stage) const {
  std::vector<int> out;
  const PipelineShape shape{options_.stages, options_.virtual_stages, options_.micro_batches};
  for (int v = 0; v < options_.virtual_stages; ++v) out.push_back(virtual_stage_of(options_.schedule, shape, stage, v));
  return out;
}

bool PipelineStrategy::holds(int layer, int layers) const {
  for (int c : virtual_stages_of(stage_)) {
    const auto [begin, end] = chunk_layers(c, layers);
    if (layer >= begin && layer < end) return true;
  }
  return false;
}

void PipelineStrategy::check_layer_count(int layers) const {
  DTRAIN_CHECK(module_ == nullptr, "pipeline strategy: prepare() was already called");
  DTRAIN_CHECK(parts() <= layers,
               "pipeline strategy: {} stages x {} virtual stages need at least {} layers, the model has {}",
               options_.stages, options_.virtual_stages, parts(), layers);
}

void PipelineStrategy::check_stages_have_parameters(int layers, const std::vector<std::int64_t>& params,
                                                    const std::vector<std::string>& names) const {
  // Every rank knows every stage's layers, so all of them refuse together.
  for (int s = 0; s < options_.stages; ++s) {
    std::int64_t total = 0;
    std::vector<std::string> held;
    for (int c : virtual_stages_of(s)) {
      const auto [begin, end] = chunk_layers(c, layers);
      for (int i = begin; i < end; ++i) {
        total += params[static_cast<std::size_t>(i)];
        held.push_back(fmt::format("{}: {}", i, names[static_cast<std::size_t>(i)]));
      }
    }
    DTRAIN_CHECK(total > 0,
                 "pipeline: stage {} would hold no parameters (layers {}), nothing for its optimizer to train: use "
                 "fewer stages or other cut points",
                 s, fmt::join(held, ", "));
  }
}

std::shared_ptr<nn::Module> PipelineStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "pipeline strategy: prepare() needs a model");
  auto sequential = std::dynamic_pointer_cast<nn::Sequential>(model);
  DTRAIN_CHECK(sequential != nullptr, "pipeline strategy: the model must be a Sequential to be cut into stages, got {}",
               model->describe());
  const int layers = static_cast<int>(sequential->size());
  check_layer_count(layers);
  std::vector<std::int64_t> params;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < sequential->size(); ++i) {
    params.push_back((*sequential)[i]->num_parameters());
    names.push_back((*sequential)[i]->describe());
  }
  if (!options_.cuts.empty()) {
    check_cuts(options_.cuts, layers, parts());
    cuts_ = options_.cuts;
  } else if (options_.balance == PipelineOptions::Balance::Parameters) {
    cuts_ = balanced_cuts(std::vector<double>(params.begin(), params.end()), parts());
  } else {
    // Timed on one rank and shared, so that every rank cuts the same way.
    DTRAIN_CHECK(options_.profile_input.defined(),
                 "pipeline strategy: balancing by time needs PipelineOptions::profile_input (a batch of input)");
    Tensor costs = Tensor::zeros({layers, 2}, {DType::f64});  // forward, backward
    if (world_->rank() == 0) {
      sequential->to(device_);
      std::vector<double> flat;
      for (const LayerCost& c : measured_layer_costs(*sequential, options_.profile_input.to(device_))) {
        flat.push_back(c.forward);
        flat.push_back(c.backward);
      }
      costs = Tensor::from_vector<double>(flat, {layers, 2});
    }
    world_->broadcast(costs, 0);
    const std::vector<double> flat = costs.to_vector<double>();
    std::vector<LayerCost> layer_costs;
    for (std::size_t i = 0; i < flat.size(); i += 2) layer_costs.push_back({flat[i], flat[i + 1]});
    // A recomputing stage's chunks pay their forward twice.
    std::vector<bool> recomputing;
    const PipelineShape shape{options_.stages, options_.virtual_stages, options_.micro_batches};
    for (int c = 0; c < parts(); ++c) recomputing.push_back(recomputes(stage_of(options_.schedule, shape, c)));
    cuts_ = balanced_cuts(layer_costs, recomputing);
  }
  std::vector<std::int64_t> description{layers, parts()};
  description.insert(description.end(), cuts_.begin(), cuts_.end());
  description.insert(description.end(), params.begin(), params.end());
  check_same_everywhere(world_, description, "(layers, parts, cut points..., parameters per layer...)");
  check_stages_have_parameters(layers, params, names);

  // Each rank's slices of every layer, once the cut (by the whole layers, the same on every
  // rank) is known.
  apply_tensor_parallel(*sequential);
  tie_shared_parameters(*sequential, layers);
  std::map<int, nn::ModulePtr> mine;
  for (int i = 0; i < layers; ++i) {
    if (holds(i, layers)) mine[i] = (*sequential)[static_cast<std::size_t>(i)];
  }
  sequential.reset();  // the other stages' layers go with the caller's last reference
  model.reset();
  return build_stage(std::move(mine), layers);
}

void PipelineStrategy::tie_shared_parameters(const nn::Sequential& model, int layers) {
  const PipelineShape shape{options_.stages, options_.virtual_stages, options_.micro_batches};
  // Each parameter, in model order, with the stages whose layers use it.
  std::vector<std::pair<Variable, std::set<int>>> uses;
  std::map<const void*, std::size_t> index;
  std::map<const void*, std::vector<int>> layers_of;
  for (int c = 0; c < parts(); ++c) {
    const auto [begin, end] = chunk_layers(c, layers);
    for (int i = begin; i < end; ++i) {
      for (const Variable& p : model[static_cast<std::size_t>(i)]->parameters()) {
        auto [it, fresh] = index.emplace(p.id(), uses.size());
        if (fresh) uses.push_back({p, {}});
        uses[it->second].second.insert(stage_of(options_.schedule, shape, c));
        layers_of[p.id()].push_back(i);
      }
    }
  }
  std::vector<Variable> counted_elsewhere;
  for (const auto& [param, stages] : uses) {
    if (stages.size() < 2) continue;
    const std::vector<int>& in = layers_of[param.id()];
    DTRAIN_CHECK(options_.zero == 0,
                 "pipeline strategy: layers {} on stages {} share a parameter (tied weights); with zero={} each stage "
                 "holds a slice of it, which cannot be summed across the stages: use zero=0 under pp",
                 fmt::join(in, " and "), fmt::join(stages, " and "), options_.zero);
    const bool held = stages.count(stage_) > 0;
    CommunicatorPtr group = pipe_->split(held ? 0 : 1, pipe_->rank());  // every stage of the pipeline takes part
    if (!held) continue;
    tied_.push_back({param, group});
    if (stage_ != *stages.begin()) counted_elsewhere.push_back(param);
  }
  add_counted_elsewhere(counted_elsewhere);
}

void PipelineStrategy::sum_tied_gradients() {
  for (TiedParameter& t : tied_) {
    if (!t.param.has_grad()) t.param.set_grad(Tensor::zeros(t.param.shape(), t.param.data().options()));
    Tensor g = t.param.grad();
    if (g.device().is_cuda()) {
      // The stages' group is a host communicator (a split of the pipeline's): through host memory.
      Tensor host = g.to(Device::cpu());
      t.stages->all_reduce(host, ReduceOp::Sum);
      g.copy_(host);
    } else {
      t.stages->all_reduce(g, ReduceOp::Sum);
    }
  }
}

std::shared_ptr<nn::Module> PipelineStrategy::prepare_layers(int layers, const LayerFactory& layer,
                                                             std::uint64_t seed) {
  DTRAIN_CHECK(layer != nullptr, "pipeline strategy: prepare_layers() needs a layer factory");
  check_layer_count(layers);
  DTRAIN_CHECK(!options_.cuts.empty() || options_.balance == PipelineOptions::Balance::Parameters,
               "pipeline strategy: balancing by time profiles the whole model on one rank: pass a Sequential to "
               "prepare(), or give the cut points");
  if (!options_.cuts.empty()) {
    check_cuts(options_.cuts, layers, parts());
    cuts_ = options_.cuts;
  }
  // Each layer from its own seed, so its initial values do not depend on which layers a
  // rank builds; the caller's generator is left as it was.
  Generator& gen = default_generator();
  const std::uint64_t saved_seed = gen.seed(), saved_offset = gen.offset();
  auto make = [&](int i) {
    gen.set_state(seed + static_cast<std::uint64_t>(i), 0);
    nn::ModulePtr m = layer(i);
    DTRAIN_CHECK(m != nullptr, "pipeline strategy: the layer factory returned no layer {}", i);
    return m;
  };
  std::map<int, nn::ModulePtr> mine;
  std::vector<std::int64_t> description{layers, parts()};
  if (cuts_.empty()) {
    // Balancing needs every layer's size: each is built once, one at a time, and only this
    // rank's are kept.
    std::vector<std::int64_t> params;
    std::vector<std::string> names;
    for (int i = 0; i < layers; ++i) {
      nn::ModulePtr m = make(i);
      params.push_back(m->num_parameters());
      names.push_back(m->describe());
      mine[i] = std::move(m);
    }
    std::vector<double> costs(params.begin(), params.end());
    cuts_ = balanced_cuts(costs, parts());
    std::erase_if(mine, [&](const auto& entry) { return !holds(entry.first, layers); });
    description.insert(description.end(), cuts_.begin(), cuts_.end());
    description.insert(description.end(), params.begin(), params.end());
    check_same_everywhere(world_, description, "(layers, parts, cut points..., parameters per layer...)");
    check_stages_have_parameters(layers, params, names);
  } else {
    description.insert(description.end(), cuts_.begin(), cuts_.end());
    check_same_everywhere(world_, description, "(layers, parts, cut points...)");
    std::int64_t params = 0;
    for (int i = 0; i < layers; ++i) {
      if (!holds(i, layers)) continue;
      mine[i] = make(i);
      params += mine[i]->num_parameters();
    }
    // Only this rank knows its stage's size: the ranks agree on whether any stage is empty.
    Tensor fewest = Tensor::full({1}, static_cast<double>(params), {DType::i64});
    world_->all_reduce(fewest, ReduceOp::Min);
    DTRAIN_CHECK(params > 0,
                 "pipeline: stage {} would hold no parameters, nothing for its optimizer to train: use "
                 "other cut points",
                 stage_);
    DTRAIN_CHECK(fewest.item() > 0, "pipeline: another stage would hold no parameters (see its message)");
  }
  gen.set_state(saved_seed, saved_offset);
  return build_stage(std::move(mine), layers);
}

std::shared_ptr<nn::Module> PipelineStrategy::build_stage(std::map<int, nn::ModulePtr> layers, int count) {
  auto stage = std::make_shared<PipelineStage>();
  for (auto& [index, layer] : layers) stage->add(std::to_string(index), std::move(layer));
  stage->to(device_);
  if (replicas_ > 1 || options_.zero > 0) {
    if (options_.data_parallel.sync_batch_norm) {
      convert_sync_batch_norm(*stage, mesh_->tensor_group("dp", device_));
    }
    // Sharded: inside the mesh's dp_shard groups, replicated across dp_replicate (hybrid).
    CommunicatorPtr shard = replicas_comm_, replicate;
    if (options_.zero > 0 && mesh_->has("dp_shard")) {
      shard = mesh_->group("dp_shard");
      if (mesh_->size("dp_replicate") > 1) replicate = mesh_->tensor_group("dp_replicate", device_);
    }
    if (!shard) shard = pipe_->split(pipe_->rank(), 0);  // one replica: a group of this rank alone
    sync_ = std::make_unique<ReplicaSync>(stage, shard, replicate, device_,
                                          ReplicaSyncOptions{.zero = options_.zero,
                                                             .data_parallel = options_.data_parallel.data_parallel,
                                                             .unit_bytes = options_.unit_bytes,
                                                             .wire = options_.wire,
                                                             .release_after_passes = true,
                                                             .codec = options_.codec});
  }
  // The chunks, from the stage's children (after any SyncBatchNorm conversion replaced
  // some), in order: a rank's chunks hold ever later layers.
  std::vector<nn::ModulePtr> chunks;
  std::size_t next = 0;
  for (int c : virtual_stages_of(stage_)) {
    const auto [begin, end] = chunk_layers(c, count);
    auto chunk = std::make_shared<nn::Sequential>();
    for (int i = begin; i < end; ++i) chunk->push_back(stage->children().at(next++).second);
    chunks.push_back(chunk);
  }
  PipelineExecutor::Config config{.comm = pipe_,
                                  .tensor_comm = mesh_->tensor_group("pp", device_),
                                  .device = device_,
                                  .schedule = options_.schedule,
                                  .virtual_stages = options_.virtual_stages,
                                  .recompute = recomputes(stage_)};
  if (sync_ && sync_->gatherer()) config.after_pass = [sync = sync_.get()] { sync->end_pass(); };
  executor_ = std::make_unique<PipelineExecutor>(std::move(config), std::move(chunks));
  module_ = stage;
  return module_;
}

std::vector<MicroBatch> PipelineStrategy::split(std::span<const MicroBatch> batches) const {
  std::vector<MicroBatch> parts;
  const int K = options_.stages;
  for (const MicroBatch& b : batches) {
    const std::int64_t rows = b.inputs.size(0);
    // A short last batch is split into as many parts as it has rows, and for the
    // interleaved schedule a multiple of the stages.
    std::int64_t n = std::min<std::int64_t>(options_.micro_batches, rows);
    if (options_.schedule == PipelineSchedule::Interleaved) n -= n % K;
    DTRAIN_CHECK(n >= 1, "pipeline: a batch of {} samples is too small for the interleaved schedule's {} stages", rows,
                 K);
    for (int j = 0; j < n; ++j) {
      const Range r = slice(static_cast<std::size_t>(rows), j, static_cast<int>(n));
      const auto start = static_cast<std::int64_t>(r.begin), len = static_cast<std::int64_t>(r.size());
      parts.push_back({b.inputs.narrow(0, start, len), b.targets.narrow(0, start, len)});
    }
  }
  return parts;
}

StepStats PipelineStrategy::train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                                       const StepConfig& config) {
  module();
  DTRAIN_CHECK(!micro.empty(), "pipeline strategy: train_step needs at least one micro-batch");
  DTRAIN_CHECK(config.loss != nullptr, "pipeline strategy: StepConfig::loss is not set");
  const auto start = std::chrono::steady_clock::now();
  optimizer.zero_grad();
  const std::vector<MicroBatch> parts = split(micro);
  std::vector<Tensor> inputs;
  std::int64_t total = 0;
  for (const MicroBatch& p : parts) {
    inputs.push_back(p.inputs);
    total += p.inputs.size(0);
  }
  StepStats stats;
  stats.samples = total;
  // As in Strategy::train_step: each part's loss weighted by its share of the samples.
  auto last = [&](const Variable& output, int m, bool record) {
    const MicroBatch& part = parts[static_cast<std::size_t>(m)];
    return weighted_loss(output, part.targets, sample_share(part.inputs.size(0), total, parts.size()), config,
                         record ? &stats : nullptr);
  };
  // With replicas, only the last pass of each kind that adds to a chunk's gradients (its
  // last backward; or its last B for the 1-D parameters and last W for the others) hands
  // them to the reducer.
  std::optional<DataParallel::NoSyncGuard> no_sync;
  PipelineExecutor::BeforeGradientsFn before_gradients;
  if (sync_) {
    before_gradients = [&](int, PipelineAction::Kind, bool last_of_chunk) {
      if (last_of_chunk) no_sync.reset();
      else if (!no_sync) no_sync.emplace(sync_->data_parallel());
    };
  }
  const PipelineExecutor::Timing t = executor_->run(inputs, /*train=*/true, config.autocast, last, before_gradients);
  no_sync.reset();
  if (sync_) sync_->finish();
  sum_tied_gradients();
  update(stepped_optimizer(optimizer), config, stats);
  timing_ = {.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
             .wait_s = t.wait_s,
             .weights_early = t.weights_early,
             .chunk_s = t.chunk_s};
  for (const PassTimes& c : t.chunk_s) {
    timing_.forward_s += c.forward;
    timing_.backward_s += c.backward;
    timing_.weight_s += c.weight;
  }
  timing_.compute_s = timing_.forward_s + timing_.backward_s + timing_.weight_s;
  return stats;
}

EvalSums PipelineStrategy::eval_step(const MicroBatch& batch, const StepConfig& config) {
  module();
  DTRAIN_CHECK(config.loss != nullptr, "pipeline strategy: StepConfig::loss is not set");
  const std::vector<MicroBatch> parts = split(std::span(&batch, 1));
  std::vector<Tensor> inputs;
  for (const MicroBatch& p : parts) inputs.push_back(p.inputs);
  EvalSums sums;
  auto last = [&](const Variable& output, int m, bool) {
    const MicroBatch& part = parts[static_cast<std::size_t>(m)];
    const auto rows = part.inputs.size(0);
    sums.loss_sum = accumulate(sums.loss_sum,
                               mul(config.loss(output, part.targets).data().to(DType::f64), static_cast<double>(rows)));
    if (config.correct) sums.correct = accumulate(sums.correct, config.correct(output.data(), part.targets));
    sums.samples += rows;
    return Variable();
  };
  executor_->run(inputs, /*train=*/false, config.autocast, last);
  return sums;
}

std::int64_t PipelineStrategy::shard_elements() const { return sync_ ? sync_->shard_elements() : 0; }

const optim::Optimizer* PipelineStrategy::shard_optimizer() const { return sync_ ? sync_->shard_optimizer() : nullptr; }

optim::Optimizer& PipelineStrategy::stepped_optimizer(optim::Optimizer& given) {
  return sync_ ? sync_->stepped_optimizer(given) : given;
}

void PipelineStrategy::apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) {
  Strategy::apply_update(optimizer, config, nonfinite);
  if (sync_) sync_->after_update();
}

Capabilities PipelineStrategy::capabilities() {
  if (!sync_) return {};
  return {.replica_divergence = [this] {
    Tensor d = Tensor::full({1}, sync_->replica_divergence().value_or(0), {DType::f64});
    pipe_->all_reduce(d, ReduceOp::Max);
    return d.item();
  }};
}

CheckpointPlan PipelineStrategy::checkpoint_plan() const {
  CheckpointPlan plan{.rank = world_->rank(),
                      .ranks = world_->size(),
                      .part = replica_ == 0 ? fmt::format("stage{}{}", stage_, tensor_parallel_part()) : "",
                      .whole_model = options_.stages == 1,
                      .stages = options_.stages,
                      .replicas = replicas_,
                      .mesh = mesh_->layout()};
  share_tensor_parallel_slices(plan);
  if (sync_ && sync_->shards()) {
    // Replica 0 writes the stage's model; every replica of the first shard group its chunks'
    // optimizer state (under hybrid sharding the other groups hold the same chunks).
    const bool writes = !mesh_->has("dp_replicate") || mesh_->coordinate("dp_replicate") == 0;
    if (replica_ != 0) plan.part = writes ? fmt::format("stage{}-shard{}", stage_, replica_) : "";
    // Replica 0 writes the stage's model, or at zero 3 every writing replica its chunks of
    // the parameters (replica 0 with the buffers).
    plan.saves_model = replica_ == 0 || (writes && sync_->gatherer() != nullptr);
    sync_->share_parameters_through(plan, replica_ == 0);
    sync_->shards()->share_through(plan);
    sync_->share_exchange_state_through(plan);
  } else if (sync_) {
    // The replicas' gradient exchange may keep state of each rank's own (PowerSGD).
    plan.rank_state = [ddp = &sync_->data_parallel()] { return ddp->exchange_state(); };
    plan.load_rank_state = [ddp = &sync_->data_parallel()](const std::vector<std::pair<std::string, Tensor>>& state) {
      ddp->load_exchange_state(state);
    };
  }
  return plan;
}

}  // namespace dtrain::dist
