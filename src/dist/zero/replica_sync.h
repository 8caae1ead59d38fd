// ReplicaSync (private to dist): how the data-parallel replicas of one model stay one, the
// component that ZeroStrategy (a whole model) and PipelineStrategy (a
// stage's layers) share. Over the replicas' mesh groups it owns the bucketed gradient
// exchange and the update:
//
//   zero 0  the buckets all-reduced (DataParallel, with any exchange of its registry);
//           every replica steps the whole optimizer
//   zero 1  the buckets reduce-scattered among the `shard` group; each rank steps its
//           chunks (OptimizerShards) and the updated chunks are all-gathered
//   zero 2  the same, each bucket's whole gradient freed once its chunk is reduced
//   zero 3  the parameters sharded too, each gather unit all-gathered before its layers'
//           forward and backward (LayerGatherer)
//
// With a `replicate` group (hybrid sharding), each chunk's mean also crosses the groups
// that hold the same chunks. The module is the caller's; the component keeps its pieces.
#pragma once

#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/dist/data_parallel/data_parallel.h"

#include <memory>
#include <vector>

namespace dtrain::dist {

class LayerGatherer;
class OptimizerShards;
class ReduceScatterExchange;

struct ReplicaSyncOptions {
  int zero = 0;                       // ZeRO stage, 0 for none
  DataParallelOptions data_parallel;  // buckets, overlap, and (zero 0) the exchange
  std::size_t unit_bytes = 4u << 20;  // zero 3: the gather units' least size
  DType wire = DType::f32;            // zero 1-3: f16 or bf16 shares
  // Zero 3 under a pipeline: the parameters are freed after each pass (end_pass), not when
  // their gradients are in (LayerGatherer::release_on_gradients).
  bool release_after_passes = false;
  // Zero 1 and 2: an exchange of the registry (gradient_exchange.h: "powersgd:R[:W]") that
  // averages each whole bucket instead of the reduce-scatter, each rank keeping its chunk
  // (ReduceScatterExchange); empty: none. Zero 3 holds no whole gradients: refused.
  std::string codec = {};
};

class ReplicaSync {
 public:
  // `module` on `device` already. Collective over `shard` (and `replicate`): broadcasts
  // the first rank's state, plans the buckets, and for zero >= 1 cuts this rank's chunks.
  // `replicate` carries the model's tensors (the mesh's tensor_group: NCCL for a CUDA
  // model); `shard` is the host-side group, which DataParallel takes as its users give it.
  ReplicaSync(std::shared_ptr<nn::Module> module, CommunicatorPtr shard, CommunicatorPtr replicate, Device device,
              ReplicaSyncOptions options);
  ~ReplicaSync();
  ReplicaSync(const ReplicaSync&) = delete;
  ReplicaSync& operator=(const ReplicaSync&) = delete;

  DataParallel& data_parallel() { return *ddp_; }
  // After the step's last backward: every bucket's exchange done (and at zero 3 every
  // unit released, even one no gradient reached).
  void finish();
  // The optimizer the update steps: the given one, or (zero >= 1) rebound to this rank's slices.
  optim::Optimizer& stepped_optimizer(optim::Optimizer& given);
  // After the update: zero 1 and 2 all-gather the updated chunks (zero 3's next forward
  // gathers them).
  void after_update();
  // After each pipeline pass, with release_after_passes: zero 3 frees the parameters.
  void end_pass();
  // The largest difference between the replicas (none to compare at zero 3: nullopt).
  std::optional<double> replica_divergence();
  // Elements this rank updates and holds optimizer state for (0 at zero 0).
  std::int64_t shard_elements() const;
  const optim::Optimizer* shard_optimizer() const;
  OptimizerShards* shards() const { return shards_.get(); }
  LayerGatherer* gatherer() const { return gatherer_.get(); }
  int zero() const { return options_.zero; }
  // At zero 3, where the parameters live only as this rank's chunks: `plan` saves them as
  // element ranges of whole parameters (with the module's buffers where `buffers`: on the
  // one rank of the group that writes them) and loads whole tensors back into the chunks.
  // Below zero 3 the module's own state is whole on every rank: nothing changes.
  void share_parameters_through(CheckpointPlan& plan, bool buffers);
  // With a codec that keeps state of this rank's own (PowerSGD's error feedback): `plan`
  // saves it with each checkpoint and takes it back on the same layout.
  void share_exchange_state_through(CheckpointPlan& plan);

 private:
  ReplicaSyncOptions options_;
  std::shared_ptr<nn::Module> module_;
  std::unique_ptr<DataParallel> ddp_;
  ReduceScatterExchange* exchange_ = nullptr;  // owned by ddp_'s reducer
  std::vector<Tensor> flat_;                   // per bucket: the parameters, padded (zero 1 and 2)
  std::unique_ptr<OptimizerShards> shards_;    // this rank's slices and their optimizer
  std::unique_ptr<LayerGatherer> gatherer_;    // zero 3 (declared after ddp_: it goes first)
};

}  // namespace dtrain::dist
