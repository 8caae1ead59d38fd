#include "dtrain/dist/data_parallel/data_parallel_strategy.h"

#include "dtrain/dist/strategy/parallel_dims.h"
#include "dtrain/dist/data_parallel/sync_batch_norm.h"

namespace dtrain::dist {

namespace {

std::shared_ptr<const DeviceMesh> replicas_mesh(const CommunicatorPtr& comm) {
  DTRAIN_CHECK(comm != nullptr, "data_parallel strategy: no communicator given");
  return ParallelDims{.dp_replicate = comm->size()}.mesh(comm);  // the factory's layout
}

}  // namespace

DataParallelStrategy::DataParallelStrategy(CommunicatorPtr comm, Device device, DataParallelStrategyOptions options)
    : DataParallelStrategy(replicas_mesh(comm), device, std::move(options)) {}

DataParallelStrategy::DataParallelStrategy(std::shared_ptr<const DeviceMesh> mesh, Device device,
                                           DataParallelStrategyOptions options)
    : Strategy("data_parallel", device, mesh ? mesh->world() : nullptr),
      mesh_(std::move(mesh)),
      options_(std::move(options)) {
  const int tp = mesh_->has("tp") ? mesh_->size("tp") : 1;
  DTRAIN_CHECK(mesh_->size("dp") * tp == mesh_->world()->size(),
               "data_parallel strategy: the mesh {} has dimensions besides dp and tp of more than one rank",
               mesh_->describe());
  comm_ = mesh_->group("dp");  // the world itself without tensor parallelism (the dimension spans it)
  if (tp > 1) {
    // A tensor-parallel group reads one shard, computes one loss and holds the parts of one
    // replica's gradients.
    place({.shard = {comm_->rank(), comm_->size(), 1},
           .reports = world_->rank() == 0,
           .sums = comm_,
           .copies = mesh_->group("tp")});
    set_model_parts(mesh_->group("tp"));
  }
}

std::shared_ptr<nn::Module> DataParallelStrategy::prepare(std::shared_ptr<nn::Module> model) {
  DTRAIN_CHECK(model != nullptr, "data_parallel strategy: prepare() needs a model");
  DTRAIN_CHECK(ddp_ == nullptr, "data_parallel strategy: prepare() was already called");
  apply_tensor_parallel(*model);
  model->to(device_);
  // The communicator for the model's tensors (NCCL on GPUs, the mesh's one), which
  // DataParallel and SyncBatchNorm (activations' statistics) share.
  const CommunicatorPtr& replicas = mesh_->tensor_group("dp", device_);
  if (options_.sync_batch_norm) convert_sync_batch_norm(*model, replicas);
  ddp_ = std::make_unique<DataParallel>(model, replicas, options_.data_parallel);
  module_ = std::move(model);
  return module_;
}

DataParallel& DataParallelStrategy::data_parallel() {
  DTRAIN_CHECK(ddp_ != nullptr, "data_parallel strategy: prepare() the model first");
  return *ddp_;
}

void DataParallelStrategy::forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                                            StepStats& stats) {
  // Gradient accumulation: only the update's last backward communicates (the sum).
  data_parallel().run_micro_batch(last, [&] { Strategy::forward_backward(batch, weight, last, config, stats); });
}

void DataParallelStrategy::exchange_gradients() { data_parallel().finish_gradient_sync(); }

Capabilities DataParallelStrategy::capabilities() {
  return {.replica_divergence = [this] { return data_parallel().check_replicas(); }};
}

CheckpointPlan DataParallelStrategy::checkpoint_plan() const {
  // The replicas' parameters are identical: rank 0 saves for all (its buffers too; see the
  // header).
  CheckpointPlan plan{.rank = world_->rank(),
                      .ranks = world_->size(),
                      .part = comm_->rank() == 0 ? "model" + tensor_parallel_part() : "",
                      .whole_model = tensor_parallel() == nullptr,
                      .replicas = comm_->size(),
                      .mesh = mesh_->layout()};
  share_tensor_parallel_slices(plan);
  if (ddp_ != nullptr) {
    plan.rank_state = [ddp = ddp_.get()] { return ddp->exchange_state(); };
    plan.load_rank_state = [ddp = ddp_.get()](const std::vector<std::pair<std::string, Tensor>>& state) {
      ddp->load_exchange_state(state);
    };
  }
  return plan;
}

}  // namespace dtrain::dist
