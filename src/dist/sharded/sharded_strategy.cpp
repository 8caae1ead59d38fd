#include "dtrain/dist/sharded/sharded_strategy.h"

#include "dist/sharded/layer_gatherer.h"
#include "dist/sharded/optimizer_shards.h"
#include "dist/sharded/reduce_scatter_exchange.h"
#include "dtrain/core/trace.h"
#include "dtrain/dist/core/parallel_dims.h"
#include "dtrain/dist/comm/nccl.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace dtrain::dist {

namespace {

void check_options(const ShardedDataParallelOptions& o) {
  DTRAIN_CHECK(o.stage >= 1 && o.stage <= 3,
               "sharded data parallel: stage {} is not a ZeRO stage (1: the optimizer state sharded, 2: the "
               "gradients too, 3: the parameters too)",
               o.stage);
  DTRAIN_CHECK(o.bucket_bytes > 0, "sharded data parallel: bucket_bytes must be positive");
}

// The factory's mesh over `comm` (parallel_dims.h), row-major: groups of shard_ranks
// consecutive ranks shard the model; the dp_replicate groups link the ranks that hold the
// same chunks.
std::shared_ptr<const DeviceMesh> shard_mesh(const CommunicatorPtr& comm, const ShardedDataParallelOptions& o) {
  DTRAIN_CHECK(comm != nullptr, "sharded data parallel: no communicator given");
  check_options(o);
  const int ranks = comm->size(), group = o.shard_ranks == 0 ? ranks : o.shard_ranks;
  DTRAIN_CHECK(group >= 1 && ranks % group == 0,
               "sharded data parallel: shard groups of {} rank(s) do not divide the {} ranks (hybrid sharding needs "
               "as many ranks on every host)",
               o.shard_ranks, ranks);
  return ParallelDims{.dp_replicate = ranks / group, .dp_shard = group, .zero = o.stage}.mesh(comm);
}

}  // namespace

ShardedDataParallelStrategy::ShardedDataParallelStrategy(CommunicatorPtr comm, Device device,
                                                         ShardedDataParallelOptions options)
    : ShardedDataParallelStrategy(shard_mesh(comm, options), device, options) {}

ShardedDataParallelStrategy::ShardedDataParallelStrategy(std::shared_ptr<const DeviceMesh> mesh, Device device,
                                                         ShardedDataParallelOptions options)
    : Strategy("sharded_data_parallel", device, mesh ? mesh->world() : nullptr),
      mesh_(std::move(mesh)),
      comm_(world_),
      options_(options) {
  check_options(options_);
  DTRAIN_CHECK(mesh_->size("dp_replicate") * mesh_->size("dp_shard") == comm_->size(),
               "sharded data parallel: the mesh {} has dimensions besides dp_replicate and dp_shard of more than one "
               "rank",
               mesh_->describe());
  options_.shard_ranks = mesh_->size("dp_shard");
  shard_comm_ = mesh_->group("dp_shard");  // the world itself when a shard spans it
  if (mesh_->size("dp_replicate") > 1) replica_comm_ = mesh_->group("dp_replicate");
  set_model_parts(shard_comm_);
}

ShardedDataParallelStrategy::~ShardedDataParallelStrategy() = default;

DataParallel& ShardedDataParallelStrategy::data_parallel() const {
  DTRAIN_CHECK(ddp_ != nullptr, "sharded data parallel: prepare() the model first");
  return *ddp_;
}

std::shared_ptr<nn::Module> ShardedDataParallelStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "sharded data parallel: prepare() needs a model");
  DTRAIN_CHECK(ddp_ == nullptr, "sharded data parallel: prepare() was already called");
  model->to(device_);
  DataParallelOptions o;
  o.bucket_bytes = options_.bucket_bytes;
  o.overlap = options_.overlap;
  o.keep_gradients = options_.stage < 2;  // stage 2: only this rank's chunks outlive the exchange
  std::vector<UnitPlan> units;
  if (options_.stage == 3) {
    // The gather units are the buckets, so one flat layout serves parameters and gradients.
    units = plan_units(*model, options_.unit_bytes);
    for (const UnitPlan& u : units) o.buckets.push_back(u.parameters);
  }
  // The chunks' mean across the shard groups travels through NCCL too for a CUDA model.
  CommunicatorPtr across = replica_comm_;
  if (across && !device_.is_cpu() && across->backend() != "nccl") across = nccl_communicator(across, device_);
  o.exchange_factory = reduce_scatter_factory(device_, &exchange_, across, options_.wire);
  ddp_ = std::make_unique<DataParallel>(model, shard_comm_, o);
  if (across) {
    // DataParallel made each group equal to its first rank; this makes the groups equal.
    for (const Variable& p : model->parameters()) {
      Tensor t = p.data();
      across->broadcast(t, 0);
    }
    for (auto& [name, b] : model->named_buffers()) across->broadcast(b, 0);
  }

  check_every_rank_owns_elements(*exchange_, shard_comm_->size());
  flat_ = flatten_buckets(*model, *exchange_, device_);
  const CommunicatorPtr& comm = data_parallel().tensor_communicator();
  std::vector<Tensor> chunks = own_chunks(flat_, comm->rank(), comm->size());
  // Stage 3: from here on this rank keeps only its chunks; the flat buffers are whole only
  // while the gatherer needs them.
  if (options_.stage == 3) {
    gatherer_ = std::make_unique<LayerGatherer>(comm, std::move(units), exchange_->buckets(), std::move(flat_), model);
    flat_.clear();
    chunks.clear();
    for (std::size_t b = 0; b < exchange_->buckets().size(); ++b) chunks.push_back(gatherer_->chunk(b));
  }
  shards_ = std::make_unique<OptimizerShards>(shard_comm_, *exchange_, chunks);
  module_ = std::move(model);
  return module_;
}

std::int64_t ShardedDataParallelStrategy::shard_elements() const { return shards_ ? shards_->elements() : 0; }

const optim::Optimizer* ShardedDataParallelStrategy::shard_optimizer() const {
  return shards_ ? shards_->optimizer() : nullptr;
}

void ShardedDataParallelStrategy::forward_backward(const MicroBatch& batch, double weight, bool last,
                                                   const StepConfig& config, StepStats& stats) {
  // Gradient accumulation: only the update's last backward communicates (the sum).
  data_parallel().run_micro_batch(last, [&] { Strategy::forward_backward(batch, weight, last, config, stats); });
}

void ShardedDataParallelStrategy::exchange_gradients() {
  data_parallel().finish_gradient_sync();
  // A unit whose parameters got no gradient (unused in this step) is still whole.
  if (gatherer_) gatherer_->release_all();
}

ShardedDataParallelStrategy::WholeParameters::WholeParameters(LayerGatherer* gatherer) : gatherer_(gatherer) {
  if (gatherer_) gatherer_->gather_all();
}

ShardedDataParallelStrategy::WholeParameters::~WholeParameters() {
  if (gatherer_) gatherer_->release_all();
}

std::size_t ShardedDataParallelStrategy::gather_units() const { return gatherer_ ? gatherer_->units() : 0; }

std::size_t ShardedDataParallelStrategy::take_peak_whole_units() {
  return gatherer_ ? gatherer_->take_peak_whole() : 0;
}

optim::Optimizer& ShardedDataParallelStrategy::stepped_optimizer(optim::Optimizer& given) {
  DTRAIN_CHECK(shards_ != nullptr, "sharded data parallel: prepare() the model first");
  return shards_->optimizer(given);
}

void ShardedDataParallelStrategy::apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) {
  Strategy::apply_update(optimizer, config, nonfinite);
  if (!gatherer_)
    all_gather_chunks(*data_parallel().tensor_communicator(),
                      flat_);  // stage 3: the next forward gathers the updated chunks
}

Capabilities ShardedDataParallelStrategy::capabilities() {
  if (gatherer_) return {};  // stage 3 keeps no replica of the parameters to compare
  return {.replica_divergence = [this] { return data_parallel().check_replicas(); }};
}

CheckpointPlan ShardedDataParallelStrategy::checkpoint_plan() const {
  const int rank = comm_->rank();
  // Under hybrid sharding the first group writes; the others hold the same chunks.
  const bool writes = !replica_comm_ || replica_comm_->rank() == 0;
  CheckpointPlan plan{.rank = rank,
                      .ranks = comm_->size(),
                      .part = !writes     ? ""
                              : rank == 0 ? "model"
                                          : fmt::format("shard{}", rank),
                      .replicas = comm_->size()};
  plan.saves_model = rank == 0 || gatherer_;  // the replicas' parameters are identical, or each rank holds its own
  if (gatherer_) {
    // Each rank's chunks of the parameters as element ranges; rank 0 adds the buffers.
    plan.model_share = [this] {
      nn::StateDict out = shards_->parameter_ranges();
      if (comm_->rank() == 0) {
        for (auto& [name, b] : module_->named_buffers()) out.emplace_back(name, b);
      }
      return out;
    };
    // The hooks run later, from the Checkpointer's restore, on this same (non-const) strategy.
    plan.load_model_share = [self = const_cast<ShardedDataParallelStrategy*>(this)](const nn::StateDict& whole) {
      const std::map<std::string, Tensor> by_name(whole.begin(), whole.end());
      self->shards_->load_parameters(by_name);
      NoGradGuard no_grad;
      for (auto& [name, b] : self->module_->named_buffers()) b.copy_(by_name.at(name));
    };
  }
  // Each rank's chunks of the optimizer state, as element ranges of whole parameters.
  shards_->share_through(plan);
  return plan;
}

}  // namespace dtrain::dist
