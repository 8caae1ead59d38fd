// Strategy: where distribution lives. A strategy decides, for this rank, how the model is
// prepared (placed, wrapped, cut), which shard of the data the rank reads, how one
// training step runs (forward, loss, backward, gradient exchange, update), how evaluation
// sums are added up across ranks, and what a checkpoint must save. The training loop
// (train::Trainer) is the same whichever strategy runs it, as tf.distribute's `model.fit`
// is the same under every tf.distribute.Strategy.
//
//   auto strategy = dist::make_strategy("", dist::world(), device);  // Local or DataParallel
//   auto model = strategy->prepare(nn::lenet_cnn());                 // then the optimizer
//   optim::SGD sgd(model->parameters(), {...});
//   dist::StepStats s = strategy->train_step(micro_batches, sgd, config);
//
// Statistics stay on the model's device (StepStats), so a step on a GPU never waits for the
// host; reading them (item()) waits for the step. Implementations: LocalStrategy (one
// process, strategy.h), DataParallelStrategy (data_parallel_strategy.h),
// PipelineStrategy (pipeline_strategy.h, which overrides train_step and eval_step),
// ParameterServerStrategy (ps_strategy.h) and ZeroStrategy (ZeRO stages 1
// and 2, zero_strategy.h); dist::make_strategy builds any of them from a spec
// (strategy_factory.h).
//
// The shape: a small core every strategy has (five public virtuals below, and four hooks
// for the parts of the base train_step), plus optional capabilities (a server loop, a
// batch dispenser, epoch hooks, a replica check, state held remotely) that a strategy
// returns from capabilities(). Where a rank stands among those that read data (its shard,
// whether it reports, which ranks add up evaluation sums) is not a virtual: each strategy
// places the rank from its mesh (place()), and the base class answers from that. Adding a
// strategy: docs/ARCHITECTURE.md, "Adding a strategy".
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/dist/strategy/device_mesh.h"
#include "dtrain/dist/tensor_parallel/parallelize.h"
#include "dtrain/layers/module.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/optimizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist {

// The loss of a model's output against a batch's targets, averaged over the batch.
using LossFn = std::function<Variable(const Variable& output, const Tensor& targets)>;
// How many of a batch's outputs are right: an i64 scalar on the output's device.
using CorrectFn = std::function<Tensor(const Tensor& output, const Tensor& targets)>;

// What the training loop asks of every step; the strategy decides where each part runs.
struct StepConfig {
  LossFn loss;                          // required
  CorrectFn correct = {};               // optional: counted into StepStats::correct
  std::optional<DType> autocast = {};   // forward and loss under AutocastGuard (f16 or bf16)
  optim::LossScaler* scaler = nullptr;  // loss scaled; a step with inf/NaN gradients is skipped
  double clip_grad_norm = 0;            // > 0: clip the gradients' global norm (after unscaling)
};

// One micro-batch of this rank, on the model's device.
struct MicroBatch {
  Tensor inputs, targets;
};

// What one optimizer update did on this rank. The tensors are scalars on the model's
// device; reading them waits for the step.
struct StepStats {
  Tensor loss;                           // f32: the update's mean loss (undefined where no loss is computed)
  Tensor correct;                        // i64: correct outputs over the micro-batches (undefined without CorrectFn)
  std::int64_t samples = 0;              // this rank's samples in the update
  std::optional<double> grad_norm = {};  // the global gradient norm before clipping, when clipping
};

// Sums of an evaluation over this rank's batches (scalars on the model's device).
struct EvalSums {
  Tensor loss_sum;  // f64: sum over samples of the per-sample loss
  Tensor correct;   // i64 (undefined without CorrectFn)
  std::int64_t samples = 0;
};

// ---- capabilities: what only some strategies do -------------------------------------
// A strategy returns these from capabilities(); the Trainer and the Checkpointer ask for
// them instead of knowing strategy kinds.

// What a strategy measured over an epoch (or the run), for the epoch line and the metrics.
struct EpochReport {
  std::string text;  // appended to the epoch line ("" for nothing)
  std::vector<std::pair<std::string, double>> values;
  std::vector<std::pair<std::string, std::vector<double>>> series;  // e.g. a histogram
};

// Ranks that serve instead of training (parameter servers).
class ServerLoop {
 public:
  virtual ~ServerLoop() = default;
  // Where a serving rank hands its share of a checkpoint (the Checkpointer's save_share).
  using SaveShare = std::function<void(std::int64_t step, optim::NamedTensors share)>;
  // Serves the training ranks until all of them are done, updating the parameters with
  // optimizers like `optimizer`.
  virtual void serve(optim::Optimizer& optimizer, const SaveShare& save_share) = 0;
};

// Training batches handed out while an epoch runs, so that a fast rank takes more of them,
// instead of each rank reading the fixed shard data_shard() names.
class BatchDispenser {
 public:
  virtual ~BatchDispenser() = default;
  // The next of `batches` batches of queue `queue` (the same numbering on every rank), or
  // nullopt when every batch has been handed out. Called from the loader's threads, one
  // call at a time.
  virtual std::optional<std::int64_t> claim_batch(std::int64_t queue, std::int64_t batches) = 0;
  // Whether a handed-out batch is one rank's share of an update (the update's batch split
  // over data_shard().count ranks, as with fixed shards) rather than a rank's whole update.
  virtual bool shares_update() const { return false; }
};

// Around each stretch of an epoch's training steps (the whole epoch, or the part before an
// evaluation inside it; end_epoch comes before the evaluation), and after the last epoch.
class EpochHooks {
 public:
  virtual ~EpochHooks() = default;
  virtual void begin_epoch(std::int64_t epoch) = 0;  // 0-based
  virtual EpochReport end_epoch() = 0;
  virtual EpochReport end_training() = 0;
};

// Training state that other ranks hold for this one (parameter servers' shards of the
// parameters and of the optimizer's state): the Trainer's rollback (train::GuardOptions)
// keeps and restores its copies there instead of on this rank.
class RemoteState {
 public:
  virtual ~RemoteState() = default;
  // Whether this rank asks the holders to keep copies (one rank asks for the job).
  virtual bool keeps_copies() const = 0;
  // The holders keep a copy of their state as copy `id` (the Trainer's global step).
  virtual void keep_copy(std::int64_t id) = 0;
  // The copy the holders returned to, and how many of this rank's updates that took back
  // (its pushes the holders took in since the copy: where ranks do not step together the
  // copy's id counts another rank's steps).
  struct Restored {
    std::int64_t copy = -1;
    std::int64_t undone = 0;
  };
  // The holders return to copy `id` (where they no longer have it, or id < 0, to an older
  // one they keep) and this rank takes their state; nullopt when another rank's request had
  // returned them already since the state this rank's latest `window` updates (those whose
  // losses found the trouble) were computed from: the trouble may be what it took back, and
  // this rank now has the returned state.
  virtual std::optional<Restored> restore_copy(std::int64_t id, std::int64_t window) = 0;
};

struct Capabilities {
  ServerLoop* server = nullptr;         // set on a rank that serves instead of training
  BatchDispenser* dispenser = nullptr;  // set where batches are handed out at run time
  EpochHooks* epochs = nullptr;
  // The largest |parameter - replica 0's| over the replicas (collective); empty for a
  // strategy without replicas.
  std::function<double()> replica_divergence = {};
  RemoteState* remote_state = nullptr;  // set where other ranks hold the training state
};

// Who saves what in a checkpoint (train::Checkpointer). Every rank writes its own record
// (random-number state, epoch sums); the ranks with a `part` write their module's state.
struct CheckpointPlan {
  int rank = 0, ranks = 1;  // this rank among the job's
  // The part of the model this rank writes ("model" for a whole replica, "stage1" for a
  // pipeline's second stage; "" on a rank whose state another rank writes).
  std::string part = "model";
  // Whether this rank's module is the whole model (else a part: the other parts' tensors in
  // a checkpoint are not an error).
  bool whole_model = true;
  bool saves_model = true;      // the part includes the module's state (not on ranks that only hold optimizer shards)
  bool saves_optimizer = true;  // the part includes the optimizer's state (not where servers hold it)
  // Where the optimizer's state is sharded over the ranks: what this rank saves instead of
  // the given optimizer's state (entries "<parameter>[begin:end]/<buffer>", "<parameter>/updates",
  // "lr", "steps"), and what takes the whole state back at a restore (by parameter name, the
  // ranges of every rank's file joined).
  std::function<optim::NamedTensors(const optim::Optimizer& given)> optimizer_share = {};
  std::function<void(optim::Optimizer& given, const optim::NamedTensors& whole)> load_optimizer_share = {};
  // Where the parameters themselves are sharded (sharded data parallelism's stage 3): what
  // this rank saves instead of the module's state (entries "<parameter>[begin:end]", and
  // the buffers), and what takes the whole state (every rank's ranges joined) back at a
  // restore instead of Module::load_state_dict.
  std::function<nn::StateDict()> model_share = {};
  std::function<void(const nn::StateDict& whole)> load_model_share = {};
  // What every rank saves of its own besides (a gradient exchange's error feedback, which
  // differs per rank), in its own file, and what takes it back when the job resumes on the
  // same layout (on another, it starts afresh). Empty: nothing.
  std::function<std::vector<std::pair<std::string, Tensor>>()> rank_state = {};
  std::function<void(const std::vector<std::pair<std::string, Tensor>>&)> load_rank_state = {};
  bool step_saves = true;  // the ranks can save inside an epoch, all at the same update
  // The job's layout as the manifest records it (checkpoint/manifest.h); a resume on the
  // same layout continues the epoch's sums.
  int stages = 1, replicas = 1, servers = 0;
  // The strategy's mesh, its dimensions of more than one rank (DeviceMesh::layout()): the
  // manifest records it, and a restore refuses a saved mesh with a dimension it cannot
  // reslice (restorable_dimension), naming both meshes.
  std::vector<MeshDim> mesh = {};
  // Where this rank holds slices of parameters (tensor parallelism): `slice_entries` names
  // the saved entries of a sliced parameter ("<name><suffix>", its values or its optimizer
  // state) by their place in the whole tensor ("<name>[d<dim>:<begin>:<end>]<suffix>", a
  // piece each) and leaves out, on all but the group's first rank, the entries every rank of
  // the group holds alike; `local_entries` cuts this rank's slices out of whole tensors (any
  // suffix) at a restore; `whole_shapes` are the sliced parameters' whole shapes, by every
  // name they have. Empty where no parameter is sliced.
  std::function<optim::NamedTensors(optim::NamedTensors)> slice_entries = {};
  std::function<optim::NamedTensors(optim::NamedTensors)> local_entries = {};
  std::map<std::string, Shape> whole_shapes = {};
  // After this rank's snapshot for the checkpoint of `step`: ranks that serve take their
  // shares (collective over the training ranks). Empty: nothing.
  std::function<void(std::int64_t step)> after_snapshot = {};
  // Rank 0, at each save: ranks that have left the job (parameter-server workers dropped as
  // lost), whose records are not waited for; on resume their ranks start from rank 0's.
  // Empty: every rank saves.
  std::function<std::vector<int>()> absent_ranks = {};
};

// ---- the core ------------------------------------------------------------------------

class Strategy {
 public:
  // `name`: "local", "data_parallel", "pipeline", ... (the checkpoint's manifest records
  // it). `world`: the job's ranks (the strategy's mesh is laid over it). Until the strategy
  // places it otherwise, rank r reads shard r of the world's size, rank 0 reports, and
  // evaluation sums add up over the world.
  Strategy(std::string name, Device device, CommunicatorPtr world);
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  const std::string& name() const { return name_; }

  // Places, wraps or cuts `model` for this rank and returns the module this rank trains.
  // Call it once, before building the optimizer over the returned module's parameters
  // (DataParallel may replace BatchNorm layers and broadcasts rank 0's state). Collective
  // for distributed strategies.
  virtual std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) = 0;
  // The prepared module; throws before prepare().
  nn::Module& module() const;
  Device device() const { return device_; }
  // This rank among the job's, and their number.
  int rank() const { return world_->rank(); }
  int ranks() const { return world_->size(); }

  // The shard of every dataset that this rank reads: shard `index` of `count` (for data
  // parallelism, the rank and the number of replicas). Rates shown to users are per
  // `count` shards. `splits`: each micro-batch this rank trains on is split again into
  // this many equal parts (a pipeline's micro-batches), so its rows must be a multiple.
  // It may change as training goes (parameter servers that lost a worker: the survivors
  // share the test set); the Trainer re-splits its test set when it does.
  struct Shard {
    int index = 0;
    int count = 1;
    int splits = 1;
  };
  Shard data_shard() const { return placement_.shard; }
  // Whether this rank prints progress and writes metrics (one rank per job).
  bool reports() const { return placement_.reports; }

  // One optimizer update from this rank's micro-batches (at least one; more is gradient
  // accumulation): forward and loss of each, weighted by its share of the update's samples
  // so that the gradients are those of the mean loss, backward, the gradient exchange, and
  // the update (unscaled and clipped as configured). Without a scaler, a non-finite loss
  // or gradient norm is not an error here: the caller decides (the Trainer stops with
  // "diverged"); a non-finite norm (clipping) skips the optimizer step.
  virtual StepStats train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                               const StepConfig& config);
  // Forward and loss of one batch in eval mode without gradients (the caller sets the
  // mode and NoGradGuard).
  virtual EvalSums eval_step(const MicroBatch& batch, const StepConfig& config);
  // Adds up `sums` (a CPU f64 tensor) in place over the ranks holding evaluation shards,
  // so that every rank gets the totals. Collective over placement's `sums` group (then the
  // largest over its `copies`, which computed the same sums).
  void reduce_sums(Tensor& sums);
  // What a checkpoint holds from this rank.
  virtual CheckpointPlan checkpoint_plan() const { return {.rank = rank(), .ranks = ranks()}; }
  // What this strategy does beyond the core (the pointers live as long as the strategy).
  virtual Capabilities capabilities() { return {}; }

  // Tensor parallelism, the mesh's tp dimension: before prepare(), the plan that splits the
  // model over `group` (the factory sets it from StrategyHints::tensor_parallel_plan);
  // prepare() applies it before the strategy wraps or cuts the model, and every update sums
  // the gradients its ranks hold parts of and counts replicated parameters once in the norm.
  void set_tensor_parallel(CommunicatorPtr group, TensorParallelPlan plan, TensorParallelOptions options);
  // What prepare() did (the vocabulary-parallel loss, the slices); null without tp.
  const TensorParallel* tensor_parallel() const { return tensor_parallel_.get(); }
  TensorParallel* tensor_parallel() { return tensor_parallel_.get(); }

 protected:
  // Where this rank stands among the ranks that read data, from the strategy's mesh.
  struct Placement {
    Shard shard;
    bool reports = false;
    // The ranks whose evaluation sums add up (ranks without an evaluation shard add
    // zeros); null on a rank that evaluates nothing (a parameter server).
    CommunicatorPtr sums;
    // The ranks that compute the same sums as this one (a tensor-parallel group): after the
    // addition they take the largest of each number, which is the same sums, and a flag
    // (a failed save) that any of them raised. Null: none.
    CommunicatorPtr copies = nullptr;
  };
  // Sets what data_shard(), reports() and reduce_sums() answer; a strategy may place the
  // rank again as training goes (parameter servers that lost a worker).
  void place(Placement placement);
  // The ranks that hold the other parts of the model's gradients (a pipeline's stages, a
  // shard group), or null when this rank holds all of them: the norm for clipping is summed
  // over them, and an inf/NaN found by one rank's loss scaler skips the step on all of them.
  void set_model_parts(CommunicatorPtr parts) { model_parts_ = std::move(parts); }
  // Parameters whose gradient another model part holds too (a weight tied across pipeline
  // stages, summed there and here): left out of this rank's share of the clipping norm, so
  // that the norm counts them once.
  void add_counted_elsewhere(const std::vector<Variable>& params) {
    counted_elsewhere_.insert(counted_elsewhere_.end(), params.begin(), params.end());
  }
  // ".tp1" on tensor-parallel rank 1 (its checkpoint part holds its slices), "" without tp.
  std::string tensor_parallel_part() const;
  // Sets the plan's slice_entries, local_entries and whole_shapes for the prepared module's
  // sliced parameters (nothing without tensor parallelism).
  void share_tensor_parallel_slices(CheckpointPlan& plan) const;
  // The first thing a strategy's prepare() does: the tensor-parallel plan applied to `model`
  // (nothing without one).
  void apply_tensor_parallel(nn::Module& model);
  // Where the stepped optimizer holds other variables than the module's parameters (sharded
  // data parallelism's slices): `slices_of` maps parameters to them, for the tensor-parallel
  // gradient sums and the norm's replicated parameters.
  void set_tensor_parallel_view(const std::function<std::vector<Variable>(const std::vector<Variable>&)>& slices_of);

  // ---- the step's parts, for strategies that run the base train_step ----
  // Forward, loss (times `weight`, scaled by the config's scaler) and backward of one
  // micro-batch; adds its loss and correct count to `stats`. `last`: the update's last
  // micro-batch, after whose backward the gradients are exchanged.
  virtual void forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                                StepStats& stats);
  // After the last micro-batch's backward: make every replica's gradients the same.
  virtual void exchange_gradients() {}
  // The optimizer that update() steps: by default the one given to train_step; a strategy
  // that shards the optimizer's state (sharded data parallelism) returns its own over this
  // rank's slices, following the given one's learning rate.
  virtual optim::Optimizer& stepped_optimizer(optim::Optimizer& given) { return given; }
  // Applies the checked gradients: by default the optimizer's step (through the scaler
  // when there is one, which skips a step with inf/NaN gradients) and the scaler's
  // update. `nonfinite`: the norm was checked and is inf or NaN.
  virtual void apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite);
  // The update from the exchanged gradients (used by train_step): unscale and clip as
  // configured, then apply_update. The one place for precision and clipping.
  void update(optim::Optimizer& optimizer, const StepConfig& config, StepStats& stats);

  // What train_step does with each micro-batch's loss, shared with strategies that run
  // their own micro-batches: its share of the update's samples (1 for a single one),
  static double sample_share(std::int64_t rows, std::int64_t total, std::size_t count);
  // the loss times `weight`, added with the correct count to `stats` (when given), and
  // returned scaled by the config's scaler, ready for backward;
  static Variable weighted_loss(const Variable& output, const Tensor& targets, double weight, const StepConfig& config,
                                StepStats* stats);
  // and the running sum `total` (undefined at first) plus `value`.
  static Tensor accumulate(const Tensor& total, const Tensor& value);

  std::shared_ptr<nn::Module> module_;
  Device device_;
  CommunicatorPtr world_;
  // False where the optimizer is stepped elsewhere (parameter servers): update() then
  // checks the gradients' finiteness whenever a scaler is set, and never stops early.
  bool steps_optimizer_here_ = true;

 private:
  std::string name_;
  Placement placement_;
  CommunicatorPtr model_parts_;
  std::vector<Variable> counted_elsewhere_;
  struct TensorParallelSetting {
    CommunicatorPtr group;
    TensorParallelPlan plan;
    TensorParallelOptions options;
  };
  std::optional<TensorParallelSetting> tensor_parallel_setting_;
  std::shared_ptr<TensorParallel> tensor_parallel_;
  std::vector<Variable>
      tensor_parallel_partial_;  // what update() sums over the group (the partial parameters, or their slices)
};

// One process: the model on `device`, no communication.
class LocalStrategy final : public Strategy {
 public:
  explicit LocalStrategy(Device device = Device::cpu());
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override;
};

}  // namespace dtrain::dist
