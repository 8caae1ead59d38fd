// ZeroStrategy: data parallelism whose optimizer state (ZeRO stage 1) and
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
// Stage 3 shards the parameters too, as PyTorch FSDP's fully_shard: the layers are grouped
// into gather units of at least `unit_bytes` (whole layers, the last ones first), which are
// also the gradient buckets. A rank keeps only its chunk of each unit; a unit's parameters
// are all-gathered just before its layers' forward (the next unit prefetched meanwhile),
// freed after it, gathered again before their backward, and freed once their gradients are
// in the bucket (dist/zero/layer_gatherer.h). Between steps a rank holds 1/N of the
// parameters, gradients and optimizer state; during one, at most two units more. The
// updated chunks are not all-gathered after the step: the next forward gathers them. The
// model's layers must be called through Module::operator() (containers do), and no module
// may read another's parameters: what stage 3 cannot gather is refused with the layer's name.
//
// The reduce-scatter and the all-gather move the bytes one all-reduce moves (stage 3
// gathers twice, in forward and in backward: 1.5 times those bytes). Clipping by
// the global norm (the squared norms of the chunks summed over the ranks), the loss scaler
// (an inf or NaN in any chunk skips the step on every rank) and mixed precision work as
// under data parallelism. The optimizer given to train_step is not stepped: it is rebound
// (Optimizer::rebind_slices) to this rank's slices at the first step and lends them its
// learning rate at every step. Every optimizer works: SGD, Adam and AdamW update element by
// element; LARS and LAMB, whose trust ratios are norms of whole tensors, sum their slices'
// squared norms over the ranks (one small all-reduce per step).
//
// Checkpoints: at stages 1 and 2 rank 0 writes the model, at stage 3 every rank writes its
// chunks of the parameters as element ranges ("<name>[begin:end]") and rank 0 the buffers;
// every rank writes its chunks' optimizer state as element ranges of each parameter
// ("<name>[begin:end]/<buffer>"). Both load into any number of ranks at any stage, into
// plain data parallelism and into one process.
//
// Hybrid sharding (shard_ranks, or the spec's `hybrid`: the ranks of a host) shards inside
// each group of ranks and replicates across the groups: a bucket's reduce-scatter inside the
// group is followed by the mean of this rank's chunk across the groups.
//
// Spec: `zero=1`, `zero=2` or `zero=3` (dtrain/dist/strategy/strategy_factory.h), with the dp
// keys `bucket_mb` (stages 1 and 2) and `overlap`, `gather_mb` (stage 3's unit size), and
// `hybrid` (shard inside each host: MPI's shared-memory split, or DTRAIN_HOST_ID) or
// `shard=N` (inside each N consecutive ranks).
#pragma once

#include "dtrain/dist/strategy/device_mesh.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/dist/data_parallel/data_parallel.h"

#include <memory>

namespace dtrain::dist {

class LayerGatherer;
class ReplicaSync;

struct ZeroOptions {
  int stage = 1;                        // ZeRO stage: 1 (optimizer state), 2 (gradients too), 3 (parameters too)
  std::size_t bucket_bytes = 4u << 20;  // gradient bytes per reduce-scatter (stages 1 and 2)
  // Stage 3: consecutive layers are gathered together until their parameters hold at
  // least this many bytes (0: every layer alone). Fewer, larger all-gathers suit small
  // models; smaller units hold less memory.
  std::size_t unit_bytes = 4u << 20;
  bool overlap = true;  // false: reduce-scatter every bucket after backward
  // Hybrid sharding: the ranks in groups of this many consecutive ones (0: one group of
  // all), each group sharding the model among its ranks, the groups replicas of each other
  // (FSDP's HYBRID_SHARD, on a 2-D mesh "replica" x "shard"). The reduce-scatters and the
  // all-gathers stay inside a group (a host's fast links); only each chunk's gradient mean
  // crosses between the groups, one all-reduce of 1/group of the bytes per bucket.
  int shard_ranks = 0;
  // f16 or bf16: each f32 bucket is reduce-scattered as 16-bit shares (each rank's gradient
  // divided by the ranks, cast, summed in 16 bits, the chunk cast back), half the bytes,
  // as data parallelism's fp16/bf16 exchanges (spec `exchange=fp16|bf16`); f32: as it is.
  DType wire = DType::f32;
  // Stages 1 and 2: a gradient exchange of the registry that averages each whole bucket
  // instead of the reduce-scatter ("powersgd:R[:W]", spec `exchange=powersgd:R`), each rank
  // keeping its chunk: PowerSGD needs the whole gradient matrices, which stages 1 and 2 hold
  // until their exchange; stage 3 refuses it. Empty: the reduce-scatter.
  std::string codec = {};
};

class ZeroStrategy final : public Strategy {
 public:
  // `comm`: the ranks (normally dist::world()); for a model on CUDA the buckets travel
  // through an NCCL communicator built over it. Throws naming the stage for one out of 1-3,
  // and naming shard_ranks when it does not divide the ranks (collective: the mesh).
  ZeroStrategy(CommunicatorPtr comm, Device device, ZeroOptions options = {});
  // On a mesh built by the caller (dist::make_strategy): its "dp_shard" dimension holds the
  // ranks a shard spans and "dp_replicate" the groups that replicate each other
  // (options.shard_ranks is the mesh's); together they must span the mesh.
  ZeroStrategy(std::shared_ptr<const DeviceMesh> mesh, Device device, ZeroOptions options = {});
  ~ZeroStrategy() override;

  // Broadcasts rank 0's state (DataParallel), then moves each bucket's parameters into one
  // flat buffer (the parameters become views of it) and makes this rank's slices; at stage
  // 3, keeps only this rank's chunk of each buffer. Throws, naming it, for a layer stage 3
  // cannot gather (layer_gatherer.h's plan_units).
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override;
  CheckpointPlan checkpoint_plan() const override;
  Capabilities capabilities() override;  // the replica check

  const ZeroOptions& options() const { return options_; }
  const DeviceMesh& mesh() const { return *mesh_; }
  // Elements of the flat parameter vector this rank updates (and holds optimizer state for).
  std::int64_t shard_elements() const;
  // The optimizer over this rank's slices (null before the first step).
  const optim::Optimizer* shard_optimizer() const;
  // Stage 3: every parameter whole (all-gathered) while the returned guard lives, to read
  // the model outside a training step (FSDP's summon_full_params); a collective, and so is
  // the guard's end. Writes to the parameters meanwhile are lost, and the model must not
  // run inside. Stages 1 and 2 hold whole parameters anyway: the guard does nothing.
  class WholeParameters {
   public:
    explicit WholeParameters(LayerGatherer* gatherer);
    ~WholeParameters();
    WholeParameters(const WholeParameters&) = delete;
    WholeParameters& operator=(const WholeParameters&) = delete;

   private:
    LayerGatherer* gatherer_;
  };
  [[nodiscard]] WholeParameters whole_parameters();
  // Stage 3: the gather units, and the most that were whole at once since the last call.
  std::size_t gather_units() const;
  std::size_t take_peak_whole_units();

 protected:
  void forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                        StepStats& stats) override;
  void exchange_gradients() override;
  optim::Optimizer& stepped_optimizer(optim::Optimizer& given) override;
  // The optimizer's step on the slices, then the all-gather of the updated chunks.
  void apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) override;

 private:
  ReplicaSync& sync() const;
  // Under tensor parallelism: its gradient sums and replicated parameters on the optimizer's slices.
  void view_tensor_parallel_slices(const nn::Module& model, const TensorParallel& tp);

  std::shared_ptr<const DeviceMesh> mesh_;
  CommunicatorPtr comm_;          // every rank
  CommunicatorPtr shard_comm_;    // the ranks that share the model out (all of comm_ unless hybrid)
  CommunicatorPtr replica_comm_;  // the ranks holding the same chunks in the other groups (hybrid)
  ZeroOptions options_;
  std::unique_ptr<ReplicaSync> sync_;  // the gradient exchange, the slices and (stage 3) the gatherer
};

}  // namespace dtrain::dist
