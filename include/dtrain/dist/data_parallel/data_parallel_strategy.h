// DataParallelStrategy: synchronous data parallelism as a Strategy. Every rank of the
// communicator holds a replica (dist::DataParallel: rank 0's state broadcast, gradients
// averaged by bucketed all-reduce overlapped with backward), reads shard `rank` of
// `size` of the data, and takes the same update. Under gradient accumulation the
// micro-batches before an update's last run inside no_sync(), so only the last backward
// all-reduces gradients (SyncBatchNorm layers, when asked for, still all-reduce their
// statistics in every forward and backward). Evaluation sums are all-reduced.
//
// Buffers (BatchNorm running statistics) are broadcast from rank 0 once, at prepare();
// without SyncBatchNorm each replica then updates its own, as PyTorch DDP with
// broadcast_buffers=false: rank 0's are the ones a checkpoint saves.
#pragma once

#include "dtrain/dist/strategy/device_mesh.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/dist/data_parallel/data_parallel.h"

namespace dtrain::dist {

struct DataParallelStrategyOptions {
  DataParallelOptions data_parallel = {};
  // Replace BatchNorm layers by SyncBatchNorm (statistics over the global batch).
  bool sync_batch_norm = false;
};

class DataParallelStrategy final : public Strategy {
 public:
  // On a mesh built by the caller (dist::make_strategy): the replicas are its "dp"
  // dimension, which must span the mesh (a dp_shard or pp of size 1 is fine). For a model
  // on CUDA, DataParallel builds an NCCL communicator over them for the gradients.
  DataParallelStrategy(std::shared_ptr<const DeviceMesh> mesh, Device device, DataParallelStrategyOptions options = {});
  // `comm`: the replicas (normally dist::world()), laid out as the mesh dp=size.
  DataParallelStrategy(CommunicatorPtr comm, Device device, DataParallelStrategyOptions options = {});

  // Placed as the base class's default over `comm`: replica r reads shard r, replica 0
  // reports, evaluation sums add up over the replicas.
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override;
  // Rank 0 writes the model and the optimizer state; every replica holds the same.
  CheckpointPlan checkpoint_plan() const override;
  Capabilities capabilities() override;  // the replica check

  // The wrapper, after prepare().
  DataParallel& data_parallel();
  const CommunicatorPtr& communicator() const { return comm_; }
  const DeviceMesh& mesh() const { return *mesh_; }
  const DataParallelStrategyOptions& options() const { return options_; }

 protected:
  void forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                        StepStats& stats) override;
  void exchange_gradients() override;

 private:
  std::shared_ptr<const DeviceMesh> mesh_;
  CommunicatorPtr comm_;
  DataParallelStrategyOptions options_;
  std::unique_ptr<DataParallel> ddp_;
};

}  // namespace dtrain::dist
