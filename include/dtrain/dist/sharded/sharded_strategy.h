// ShardedDataParallelStrategy: data parallelism whose optimizer state (ZeRO stage 1) and
// gradients (stage 2) are sharded over the replicas, as DeepSpeed's ZeRO and PyTorch's
// ZeroRedundancyOptimizer, but cut by elements, not by whole tensors. Every rank holds the
// whole model and runs forward and backward on its shard of the data, as under
// DataParallelStrategy; then:
//
//   - each gradient bucket is reduce-scattered (the mean) as backward fills it, overlapped
//     with the rest of backward, so that rank r receives chunk r of every bucket;
//   - rank r's optimizer holds state for, and updates, chunk r only: a 1/N slice of the
//     flat parameter vector (a tensor may straddle two ranks; the last chunk of a bucket is
//     padded). With Adam that is 8 bytes of state per parameter divided by N;
//   - the updated chunks are all-gathered into every replica's parameters, which live in one
//     flat buffer per bucket so that the gather runs in place, straight into them.
//
// Stage 1 keeps the full gradient buckets between steps, as plain data parallelism does;
// stage 2 frees each bucket once its reduce-scatter is done (at most two in flight) and
// leaves the parameters without gradients, so that a rank holds its chunks (1/N) plus about
// two buckets of gradients. Under gradient accumulation the micro-batches before the last
// still accumulate whole gradients, as under DataParallel's no_sync().
//
// The reduce-scatter and the all-gather move the bytes one all-reduce moves. Clipping by
// the global norm (the squared norms of the chunks summed over the ranks), the loss scaler
// (an inf or NaN in any chunk skips the step on every rank) and mixed precision work as
// under data parallelism. The optimizer given to train_step is not stepped: it is rebound
// (Optimizer::rebind_slices) to this rank's slices at the first step and lends them its
// learning rate at every step. Every optimizer works: SGD, Adam and AdamW update element by
// element; LARS and LAMB, whose trust ratios are norms of whole tensors, sum their slices'
// squared norms over the ranks (one small all-reduce per step).
//
// Checkpoints: rank 0 writes the model; every rank writes its chunks' optimizer state as
// element ranges of each parameter ("<name>[begin:end]/<buffer>"), which load into any
// number of ranks, into plain data parallelism and into one process.
//
// Spec: `zero=1` or `zero=2` (dtrain/dist/core/strategy_factory.h), with the dp keys
// `bucket_mb` and `overlap`. Stage 3 (parameters sharded too) is not built yet and is
// refused by name.
#pragma once

#include "dtrain/dist/core/strategy.h"
#include "dtrain/dist/core/strategy_factory.h"
#include "dtrain/dist/data_parallel/data_parallel.h"

#include <memory>

namespace dtrain::dist {

class ReduceScatterExchange;

struct ShardedDataParallelOptions {
  int stage = 1;                        // ZeRO stage: 1 (optimizer state sharded) or 2 (gradients too)
  std::size_t bucket_bytes = 4u << 20;  // gradient bytes per reduce-scatter
  bool overlap = true;                  // false: reduce-scatter every bucket after backward
};

class ShardedDataParallelStrategy final : public Strategy {
 public:
  // `comm`: the replicas (normally dist::world()); for a model on CUDA the buckets travel
  // through an NCCL communicator built over it. Throws naming the stage for one not built.
  ShardedDataParallelStrategy(CommunicatorPtr comm, Device device, ShardedDataParallelOptions options = {});
  ~ShardedDataParallelStrategy() override;

  std::string name() const override { return "sharded_data_parallel"; }
  // Broadcasts rank 0's state (DataParallel), then moves each bucket's parameters into one
  // flat buffer (the parameters become views of it) and makes this rank's slices.
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override;
  Shard data_shard() const override { return {comm_->rank(), comm_->size()}; }
  bool reports() const override { return comm_->rank() == 0; }
  void reduce_sums(Tensor& sums) override;
  CheckpointPlan checkpoint_plan() const override;
  Capabilities capabilities() override;  // the replica check

  const ShardedDataParallelOptions& options() const { return options_; }
  // Elements of the flat parameter vector this rank updates (and holds optimizer state for).
  std::int64_t shard_elements() const;
  // The optimizer over this rank's slices (null before the first step).
  const optim::Optimizer* shard_optimizer() const { return shard_optimizer_.get(); }

 protected:
  void forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                        StepStats& stats) override;
  void exchange_gradients() override;
  optim::Optimizer& stepped_optimizer(optim::Optimizer& given) override;
  CommunicatorPtr model_parts() const override { return comm_; }
  // The optimizer's step on the slices, then the all-gather of the updated chunks.
  void apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) override;

 private:
  struct Slice;  // one segment of this rank's chunk: its parameter, range and variable
  DataParallel& data_parallel() const;
  void gather_parameters();

  CommunicatorPtr comm_;
  ShardedDataParallelOptions options_;
  std::unique_ptr<DataParallel> ddp_;
  ReduceScatterExchange* exchange_ = nullptr;  // owned by ddp_'s reducer
  std::vector<Tensor> flat_;                   // per bucket: the parameters, padded
  std::vector<Slice> slices_;
  std::unique_ptr<optim::Optimizer> shard_optimizer_;
};

// The factory for the spec key `zero` (strategy_factory.cpp's table).
std::shared_ptr<Strategy> make_sharded_data_parallel(StrategySpec& spec, const CommunicatorPtr& world, Device device,
                                                     const StrategyHints& hints);

}  // namespace dtrain::dist
