// PipelineStrategy: pipeline model parallelism, alone or in a grid with data parallelism.
// A Sequential is cut into K stages of consecutive layers, one per rank; each batch is
// split into M micro-batches that flow through the stages (activations forward, their
// gradients backward, by non-blocking point-to-point messages) in the order of a schedule
// (pipeline_schedule.h: GPipe, 1F1B, interleaved 1F1B with V chunks per rank, or the
// zero-bubble ZB-H1 and ZB-V, which split each backward into B and W), so that the stages
// work at once. The last stage computes the loss; gradients accumulate over the
// micro-batches; each stage steps its own optimizer over its own parameters.
//
//   auto strategy = std::make_shared<dist::PipelineStrategy>(dist::world(), device,
//       dist::PipelineOptions{.stages = 2, .micro_batches = 8});
//   auto stage = strategy->prepare(nn::mlp(784, {512, 512, 512, 512}, 10));  // this rank's layers
//   optim::SGD sgd(stage->parameters(), {...});                            // this stage's optimizer
//   train::Trainer trainer(strategy, data, options);                        // as for any strategy
//
// Grid: a world of K x D ranks holds D pipelines (data-parallel replicas); rank r is stage
// r mod K of replica r / K, so a pipeline's stages are neighbouring ranks. Each stage's
// gradients are averaged over its D replicas by DataParallel's bucketed all-reduce, which
// starts during the last backward pass of each chunk. Every stage of a replica reads the
// replica's data shard (the first stage uses the inputs, the last the targets).
//
// Equivalence: the gradients are those of the mean loss over the whole batch, as without
// the pipeline (each micro-batch's loss weighted by its share of the samples), so a
// pipelined step equals the unpipelined one up to rounding. Except with BatchNorm: each
// forward normalizes its own micro-batch (as under gradient accumulation) and the running
// statistics are updated once per micro-batch; SyncBatchNorm (options.data_parallel)
// normalizes a micro-batch over the D replicas of its stage.
//
// Sharded optimizer (zero = 1, 2 or 3): each stage's D replicas shard its optimizer state
// (at 2 its gradients too, at 3 its parameters too), through the component ZeroStrategy's stages 1
// and 2 use (zero_strategy.h), over the replicas as any model's: the
// stage's gradient buckets are reduce-scattered instead of all-reduced, replica d updates
// chunk d of every bucket (the optimizer given to train_step is rebound to those slices at
// the first step and lends them its learning rate), and the updated chunks are
// all-gathered into every replica's parameters. With Adam a rank holds 8 bytes of state per
// parameter of its stage divided by D. Checkpoints: replica 0 writes the stage's model,
// every rank its chunks' optimizer state as element ranges of whole parameters, which load
// into another number of replicas, another cut, or an unsharded optimizer.
//
// Clipping uses the global norm over every stage; with a loss scaler an inf or NaN on any
// stage skips the step on all of them. The learning rate is the Trainer's per global
// update, the same on every stage.
#pragma once

#include "dtrain/dist/data_parallel/data_parallel_strategy.h"
#include "dtrain/dist/strategy/device_mesh.h"
#include "dtrain/dist/pipeline/pipeline_schedule.h"
#include "dtrain/layers/sequential.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class PipelineExecutor;
class ReplicaSync;

struct PipelineOptions {
  int stages = 2;         // K; the world's size must be a multiple of it
  int micro_batches = 4;  // M per batch; the per-rank batch must be divisible by it
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  int virtual_stages = 1;  // V chunks per rank: >= 2 for Interleaved, 2 for ZeroBubbleV, else 1
  // K x V - 1 layer indices where chunks begin (pipeline_partition.h); empty: balanced
  // automatically. Must be the same on every rank (checked).
  std::vector<int> cuts = {};
  enum class Balance : std::uint8_t {
    Parameters,  // equal parameter counts
    Time,        // equal forward + backward time, profiled on `profile_input` by world rank 0
  };
  Balance balance = Balance::Parameters;
  Tensor profile_input = {};  // Balance::Time: a batch of the model's input (e.g. one micro-batch)
  // Keep only each chunk's input; recompute its forward in backward (from the same random
  // numbers, so dropout agrees). BatchNorm's running statistics are then updated twice per
  // micro-batch, as under PyTorch's activation checkpointing. `recompute`: on every stage;
  // `recompute_stages`: on these stages alone (the first stages hold the most micro-batches
  // under 1F1B, so they gain the most memory). Balancing by time counts the second forward
  // in the recomputing stages' cost.
  bool recompute = false;
  std::vector<int> recompute_stages = {};
  DataParallelStrategyOptions data_parallel = {};  // among the replicas of each stage
  // ZeRO over each stage's replicas (the spec's `zero=1|2|3`; 0: all-reduced): 1 shards the
  // optimizer state (Megatron's "distributed optimizer"), 2 the gradients too, 3 the
  // parameters too (whole only around their layers' passes, gathered again for every
  // micro-batch's forward and backward); see "Sharded optimizer" above. The reduce-scatter replaces data_parallel's
  // gradient exchange, whose fp16 and bf16 become `wire`. Where the mesh's "dp_shard" is smaller than its "dp", the
  // shards span dp_shard and the groups of them replicate each other (hybrid).
  int zero = 0;
  DType wire = DType::f32;            // zero >= 1: f16 or bf16 shares
  std::size_t unit_bytes = 4u << 20;  // zero 3: the gather units' least size (0: one per layer)
  // zero 1 and 2: a gradient exchange of the registry that averages whole buckets
  // ("powersgd:R[:W]"), each replica keeping its chunk; empty: the reduce-scatter.
  std::string codec = {};
};

class PipelineStrategy final : public Strategy {
 public:
  // Lays `world` out as the mesh dp=(size / stages) x pp=stages (device_mesh.h): the
  // pipeline of this rank's replica, and the replicas of its stage; throws when the size is
  // not a multiple of the stages or the schedule cannot run.
  PipelineStrategy(CommunicatorPtr world, Device device, PipelineOptions options);
  // On a mesh built by the caller (dist::make_strategy): its "pp" dimension holds the
  // stages (its size must equal options.stages) and its "dp" dimension, if any, the
  // replicas; the mesh must cover the world in one block.
  PipelineStrategy(std::shared_ptr<const DeviceMesh> mesh, Device device, PipelineOptions options);
  ~PipelineStrategy() override;

  // `model` must be a Sequential (throws otherwise). Keeps this rank's layers (their state
  // dict names stay those of the whole model, e.g. "7.weight") and drops the others;
  // returns the stage, whose forward() is not to be called directly (train_step runs it).
  // Collective over the world: checks that every rank cuts the same model the same way.
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override;
  // The same without ever building the whole model on one rank: `layer(i)` makes layer i
  // of `layers` (the same layer on every rank, as Sequential's child i would be). Each
  // layer is made with the default generator seeded with seed + i, so its initial values
  // do not depend on which layers a rank builds (the caller's generator is restored).
  // With cut points given, a rank builds only its own layers; balanced by parameters, it
  // builds each layer once, one at a time, to count them, and keeps its own. Balancing by
  // time needs prepare(). Collective over the world.
  using LayerFactory = std::function<nn::ModulePtr(int index)>;
  std::shared_ptr<nn::Module> prepare_layers(int layers, const LayerFactory& layer, std::uint64_t seed);
  // Placed from the mesh: the replica's shard (each micro-batch split into the options'
  // micro-batches); the loss stage of replica 0 reports (the only rank that sees the loss);
  // evaluation sums add up over the world (only loss stages hold any).
  // The stage whose chunk ends the model and computes the loss: the last (K-1), or the
  // first under ZB-V, whose chunks run down the ranks and back up.
  int loss_stage() const;
  StepStats train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                       const StepConfig& config) override;
  EvalSums eval_step(const MicroBatch& batch, const StepConfig& config) override;
  // The replica check over every stage's replicas (none without data-parallel replicas).
  Capabilities capabilities() override;
  // Replica 0 of each stage writes "stage<k>", its layers under their indices in the whole
  // model, so a checkpoint loads into another cut of the same layers.
  CheckpointPlan checkpoint_plan() const override;

  const DeviceMesh& mesh() const { return *mesh_; }
  const PipelineOptions& options() const { return options_; }
  int stage() const { return stage_; }
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  // Sharded optimizer: the elements of the stage this rank updates and holds optimizer
  // state for (0 without one).
  std::int64_t shard_elements() const;
  // The optimizer over this rank's slices (null without a sharded optimizer, or before the
  // first step).
  const optim::Optimizer* shard_optimizer() const;
  // Where every chunk begins (K x V - 1 layer indices), after prepare().
  const std::vector<int>& cuts() const { return cuts_; }
  // Whether `stage` recomputes its forward passes in backward.
  bool recomputes(int stage) const;
  // This rank's last train_step, in seconds (host clock: on a GPU, the time to queue the
  // work): the whole step, in its forward and backward passes, and waiting for messages.
  // The measured bubble is 1 - compute_s / step_s.
  // compute_s splits into forward_s, backward_s (B alone where the schedule splits the
  // backward) and weight_s (W), from which simulated_bubble gives the schedule's theory.
  // weights_early: the W passes run ahead of the plan while a pass's input was on its way
  // (over MPI; see pipeline_executor.h). chunk_s: forward, backward and weight seconds of
  // each of this rank's chunks (PassTimes), for a theory per virtual stage.
  struct Timing {
    double step_s = 0, compute_s = 0, wait_s = 0;
    double forward_s = 0, backward_s = 0, weight_s = 0;
    int weights_early = 0;
    std::vector<PassTimes> chunk_s;
  };
  Timing last_timing() const { return timing_; }

 protected:
  optim::Optimizer& stepped_optimizer(optim::Optimizer& given) override;
  // The optimizer's step, then (sharded optimizer) the all-gather of the updated chunks.
  void apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) override;

 private:
  // The micro-batches of one step or evaluation: each batch split into M parts.
  std::vector<MicroBatch> split(std::span<const MicroBatch> batches) const;
  int parts() const;                                              // chunks over all ranks: K x V
  std::pair<int, int> chunk_layers(int chunk, int layers) const;  // [begin, end) of virtual stage `chunk`
  std::vector<int> virtual_stages_of(int stage) const;            // its chunks' virtual stages
  bool holds(int layer, int layers) const;                        // whether this rank's stage has it
  void check_layer_count(int layers) const;
  void check_stages_have_parameters(int layers, const std::vector<std::int64_t>& params,
                                    const std::vector<std::string>& names) const;
  // The stage from this rank's layers (by index in the model): DataParallel over the
  // replicas, the chunks and the executor.
  std::shared_ptr<nn::Module> build_stage(std::map<int, nn::ModulePtr> layers, int count);
  // Parameters that layers on different stages share (a GPT's token embedding, tied to its
  // output projection): each holding stage trains its copy on the sum of the stages'
  // gradients (Megatron's embedding group), and the clipping norm counts it once.
  void tie_shared_parameters(const nn::Sequential& model, int layers);
  // After the replicas' exchange: each tied parameter's gradient summed over its stages.
  void sum_tied_gradients();

  std::shared_ptr<const DeviceMesh> mesh_;
  CommunicatorPtr pipe_, replicas_comm_;  // the mesh's "pp" and "dp" groups
  PipelineOptions options_;
  int stage_ = 0, replica_ = 0, replicas_ = 1;
  std::vector<int> cuts_;
  // With data-parallel replicas, or ZeRO: the stage's gradient exchange and update among its
  // replicas (and the sharded optimizer's slices).
  std::unique_ptr<ReplicaSync> sync_;
  std::unique_ptr<PipelineExecutor> executor_;
  Timing timing_;
  struct TiedParameter {
    Variable param;
    CommunicatorPtr stages;  // the stages that hold it, of this rank's pipeline
  };
  std::vector<TiedParameter> tied_;
};

}  // namespace dtrain::dist
