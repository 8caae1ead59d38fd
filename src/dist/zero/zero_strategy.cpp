#include "dtrain/dist/zero/zero_strategy.h"

#include "dist/strategy/replica_state.h"
#include "dist/zero/layer_gatherer.h"
#include "dist/zero/optimizer_shards.h"
#include "dist/zero/replica_sync.h"
#include "dtrain/dist/strategy/parallel_dims.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace dtrain::dist {

namespace {

void check_options(const ZeroOptions& o) {
  DTRAIN_CHECK(o.stage >= 1 && o.stage <= 3,
               "zero: stage {} is not a ZeRO stage (1: the optimizer state sharded, 2: the "
               "gradients too, 3: the parameters too)",
               o.stage);
  DTRAIN_CHECK(o.bucket_bytes > 0, "zero: bucket_bytes must be positive");
}

// The factory's mesh over `comm` (parallel_dims.h), row-major: groups of shard_ranks
// consecutive ranks shard the model; the dp_replicate groups link the ranks that hold the
// same chunks.
std::shared_ptr<const DeviceMesh> shard_mesh(const CommunicatorPtr& comm, const ZeroOptions& o) {
  DTRAIN_CHECK(comm != nullptr, "zero: no communicator given");
  check_options(o);
  const int ranks = comm->size(), group = o.shard_ranks == 0 ? ranks : o.shard_ranks;
  DTRAIN_CHECK(group >= 1 && ranks % group == 0,
               "zero: shard groups of {} rank(s) do not divide the {} ranks (hybrid sharding needs "
               "as many ranks on every host)",
               o.shard_ranks, ranks);
  return ParallelDims{.dp_replicate = ranks / group, .dp_shard = group, .zero = o.stage}.mesh(comm);
}

}  // namespace

ZeroStrategy::ZeroStrategy(CommunicatorPtr comm, Device device, ZeroOptions options)
    : ZeroStrategy(shard_mesh(comm, options), device, options) {}

ZeroStrategy::ZeroStrategy(std::shared_ptr<const DeviceMesh> mesh, Device device, ZeroOptions options)
    : Strategy("zero", device, mesh ? mesh->world() : nullptr),
      mesh_(std::move(mesh)),
      comm_(world_),
      options_(options) {
  check_options(options_);
  const int tp = mesh_->has("tp") ? mesh_->size("tp") : 1;
  DTRAIN_CHECK(mesh_->size("dp_replicate") * mesh_->size("dp_shard") * tp == comm_->size(),
               "zero: the mesh {} has dimensions besides dp_replicate, dp_shard and tp of more than one "
               "rank",
               mesh_->describe());
  options_.shard_ranks = mesh_->size("dp_shard");
  shard_comm_ = mesh_->group("dp_shard");  // the world itself when a shard spans it
  if (mesh_->size("dp_replicate") > 1) replica_comm_ = mesh_->group("dp_replicate");
  set_model_parts(shard_comm_);
  if (tp > 1) {
    // FSDP2 with tensor parallelism: the shards are cut over dp_shard only, each
    // tensor-parallel rank's slices on their own; a tensor-parallel group reads one shard of
    // the data, and one model's parts are its shards' and its tensor-parallel ranks'.
    const CommunicatorPtr& replicas = mesh_->group("dp");
    place({.shard = {replicas->rank(), replicas->size(), 1},
           .reports = world_->rank() == 0,
           .sums = replicas,
           .copies = mesh_->group("tp")});
    set_model_parts(mesh_->group("dp_shard_pp"));
  }
}

ZeroStrategy::~ZeroStrategy() = default;

std::shared_ptr<nn::Module> ZeroStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "zero: prepare() needs a model");
  DTRAIN_CHECK(sync_ == nullptr, "zero: prepare() was already called");
  apply_tensor_parallel(*model);
  model->to(device_);
  ReplicaSyncOptions o{
      .zero = options_.stage, .unit_bytes = options_.unit_bytes, .wire = options_.wire, .codec = options_.codec};
  o.data_parallel.bucket_bytes = options_.bucket_bytes;
  o.data_parallel.overlap = options_.overlap;
  sync_ = std::make_unique<ReplicaSync>(model, shard_comm_,
                                        replica_comm_ ? mesh_->tensor_group("dp_replicate", device_) : nullptr, device_,
                                        std::move(o));
  if (const TensorParallel* tp = tensor_parallel()) view_tensor_parallel_slices(*model, *tp);
  module_ = std::move(model);
  return module_;
}

void ZeroStrategy::view_tensor_parallel_slices(const nn::Module& model, const TensorParallel& tp) {
  // The gradient sums of sequence parallelism run on the slices the optimizer steps, which
  // must then lie alike on every rank of the tensor-parallel group: the same parameter
  // shapes (a vocabulary or MLP width that splits unevenly would shift them).
  if (!tp.partial().empty()) {
    const std::string who = fmt::format(
        "zero={} with tp={},sp: sequence parallelism sums gradient slices over the tensor-parallel ranks, which needs "
        "the same parameter shapes on each of them; this model splits unevenly (a vocabulary or MLP width that does "
        "not divide by {}): pad it to a multiple, or leave out sp",
        options_.stage, tp.group()->size(), tp.group()->size());
    check_same_structure(who.c_str(), model, *tp.group(), device_);
  }
  std::map<const void*, std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.emplace(p.id(), name);
  const OptimizerShards* shards = sync_->shards();
  set_tensor_parallel_view([&names, shards](const std::vector<Variable>& params) {
    std::set<std::string> wanted;
    for (const Variable& p : params) wanted.insert(names.at(p.id()));
    return shards->slices_of(wanted);
  });
}

ReplicaSync& ZeroStrategy::sync() const {
  DTRAIN_CHECK(sync_ != nullptr, "zero: prepare() the model first");
  return *sync_;
}

std::int64_t ZeroStrategy::shard_elements() const { return sync_ ? sync_->shard_elements() : 0; }

const optim::Optimizer* ZeroStrategy::shard_optimizer() const { return sync_ ? sync_->shard_optimizer() : nullptr; }

void ZeroStrategy::forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                                    StepStats& stats) {
  // Gradient accumulation: only the update's last backward communicates (the sum).
  sync().data_parallel().run_micro_batch(last, [&] { Strategy::forward_backward(batch, weight, last, config, stats); });
}

void ZeroStrategy::exchange_gradients() { sync().finish(); }

ZeroStrategy::WholeParameters::WholeParameters(LayerGatherer* gatherer) : gatherer_(gatherer) {
  if (gatherer_) gatherer_->gather_all();
}

ZeroStrategy::WholeParameters::~WholeParameters() {
  if (gatherer_) gatherer_->release_all();
}

ZeroStrategy::WholeParameters ZeroStrategy::whole_parameters() {
  return WholeParameters(sync_ ? sync_->gatherer() : nullptr);
}

std::size_t ZeroStrategy::gather_units() const { return sync_ && sync_->gatherer() ? sync_->gatherer()->units() : 0; }

std::size_t ZeroStrategy::take_peak_whole_units() {
  return sync_ && sync_->gatherer() ? sync_->gatherer()->take_peak_whole() : 0;
}

optim::Optimizer& ZeroStrategy::stepped_optimizer(optim::Optimizer& given) { return sync().stepped_optimizer(given); }

void ZeroStrategy::apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) {
  Strategy::apply_update(optimizer, config, nonfinite);
  sync().after_update();
}

Capabilities ZeroStrategy::capabilities() {
  if (sync().gatherer()) return {};  // stage 3 keeps no replica of the parameters to compare
  return {.replica_divergence = [this] { return *sync().replica_divergence(); }};
}

CheckpointPlan ZeroStrategy::checkpoint_plan() const {
  const int rank = comm_->rank();
  // Under hybrid sharding the first group writes; the others hold the same chunks.
  const bool writes = !replica_comm_ || replica_comm_->rank() == 0;
  CheckpointPlan plan{.rank = rank,
                      .ranks = comm_->size(),
                      .part = !writes     ? ""
                              : rank == 0 ? "model"
                                          : fmt::format("shard{}", rank),
                      .replicas = comm_->size(),
                      .mesh = mesh_->layout()};
  const bool stage3 = sync().gatherer() != nullptr;
  plan.saves_model = rank == 0 || stage3;  // the replicas' parameters are identical, or each rank holds its own
  // Stage 3: each rank's chunks of the parameters as element ranges; rank 0 adds the buffers.
  sync().share_parameters_through(plan, rank == 0);
  sync().share_exchange_state_through(plan);
  // Each rank's chunks of the optimizer state, as element ranges of whole parameters.
  sync().shards()->share_through(plan);
  return plan;
}

}  // namespace dtrain::dist
