// Strategy: where distribution lives. A strategy decides, for this rank, how the model is
// prepared (placed, wrapped, cut), which shard of the data the rank reads, how one
// training step runs (forward, loss, backward, gradient exchange, update), how evaluation
// sums are added up across ranks, and what a checkpoint must save. The training loop
// (train::Trainer) is the same whichever strategy runs it, as tf.distribute's `model.fit`
// is the same under every tf.distribute.Strategy.
//
//   auto strategy = dist::default_strategy(dist::world(), device);  // Local or DataParallel
//   auto model = strategy->prepare(nn::lenet_cnn());                 // then the optimizer
//   optim::SGD sgd(model->parameters(), {...});
//   dist::StepStats s = strategy->train_step(micro_batches, sgd, config);
//
// Statistics stay on the model's device (StepStats), so a step on a GPU never waits for the
// host; reading them (item()) waits for the step. Implementations: LocalStrategy (one
// process, strategy.h), DataParallelStrategy (data_parallel_strategy.h) and
// PipelineStrategy (pipeline_strategy.h, which overrides train_step and eval_step) and
// ParameterServerStrategy (ps_strategy.h: server ranks serve(), workers push in update()).
#pragma once

#include "dtrain/dist/communicator.h"
#include "dtrain/layers/module.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/optimizer.h"

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
  Tensor loss;               // f32: the update's mean loss (undefined where no loss is computed)
  Tensor correct;            // i64: correct outputs over the micro-batches (undefined without CorrectFn)
  std::int64_t samples = 0;  // this rank's samples in the update
  std::optional<double> grad_norm = {};  // the global gradient norm before clipping, when clipping
};

// Sums of an evaluation over this rank's batches (scalars on the model's device).
struct EvalSums {
  Tensor loss_sum;  // f64: sum over samples of the per-sample loss
  Tensor correct;   // i64 (undefined without CorrectFn)
  std::int64_t samples = 0;
};

class Strategy {
 public:
  explicit Strategy(Device device) : device_(device) {}
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  virtual std::string name() const = 0;  // "local", "data_parallel", "pipeline"

  // Places, wraps or cuts `model` for this rank and returns the module this rank trains.
  // Call it once, before building the optimizer over the returned module's parameters
  // (DataParallel may replace BatchNorm layers and broadcasts rank 0's state). Collective
  // for distributed strategies.
  virtual std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) = 0;
  // The prepared module; throws before prepare().
  nn::Module& module() const;
  Device device() const { return device_; }

  // The shard of every dataset that this rank reads: shard `index` of `count` (for data
  // parallelism, the rank and the number of replicas). Rates shown to users are per
  // `count` shards.
  struct Shard {
    int index = 0;
    int count = 1;
  };
  virtual Shard data_shard() const = 0;
  // Whether this rank prints progress and writes metrics (one rank per job).
  virtual bool reports() const = 0;
  // Throws, with the reason, when this rank cannot train on micro-batches of `rows`
  // samples (a pipeline splits each into its own micro-batches). The Trainer asks before
  // any work.
  virtual void check_micro_batch(std::int64_t /*rows*/) const {}

  // One optimizer update from this rank's micro-batches (at least one; more is gradient
  // accumulation): forward and loss of each, weighted by its share of the update's samples
  // so that the gradients are those of the mean loss, backward, the gradient exchange, and
  // update(). Without a scaler, a non-finite loss or gradient norm is not an error here:
  // the caller decides (the Trainer stops with "diverged"); a non-finite norm (clipping)
  // skips the optimizer step.
  virtual StepStats train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                               const StepConfig& config);
  // Forward and loss of one batch in eval mode without gradients (the caller sets the
  // mode and NoGradGuard).
  virtual EvalSums eval_step(const MicroBatch& batch, const StepConfig& config);
  // Adds up `sums` (a CPU f64 tensor) in place over the ranks holding evaluation shards,
  // so that every rank gets the totals. Collective.
  virtual void reduce_sums(Tensor& sums) = 0;

  // The largest |parameter - rank 0's| over the replicas (0 when identical); nullopt for
  // a strategy without replicas. Collective.
  virtual std::optional<double> replica_divergence() { return std::nullopt; }

  // ---- ranks that serve, batches handed out at run time, epochs (parameter servers) ----
  // Whether this rank trains. One that does not (a parameter server) runs serve() in
  // place of the training loop.
  virtual bool trains() const { return true; }
  // Serves the training ranks until all of them are done, updating the parameters with
  // optimizers like `optimizer`. Throws on a strategy whose ranks all train.
  // `save_share`: where a server rank hands its share of a checkpoint (the Checkpointer's).
  using SaveShare = std::function<void(std::int64_t step, optim::NamedTensors share)>;
  virtual void serve(optim::Optimizer& optimizer, const SaveShare& save_share = {});
  // Whether training batches are handed out while an epoch runs (claim_batch), so that a
  // fast rank takes more of them, instead of read from the fixed shard data_shard().
  virtual bool hands_out_batches() const { return false; }
  // The next of the `batches` batches of `epoch` (0-based) in the epoch's order, or
  // nullopt when every batch has been handed out.
  virtual std::optional<std::int64_t> claim_batch(std::int64_t epoch, std::int64_t batches);
  // Around each stretch of an epoch's training steps (the whole epoch, or the part before
  // an evaluation inside it; end_epoch comes before the evaluation): what the strategy
  // measured in the epoch so far, for the epoch line and the metrics file.
  struct EpochReport {
    std::string text;  // appended to the epoch line ("" for nothing)
    std::vector<std::pair<std::string, double>> values;
    std::vector<std::pair<std::string, std::vector<double>>> series;  // e.g. a histogram
  };
  virtual void begin_epoch(std::int64_t /*epoch*/) {}
  virtual EpochReport end_epoch() { return {}; }
  // After the last epoch (the servers of a parameter server job stop): what the strategy
  // measured over the whole run, printed and written like an epoch's report.
  virtual EpochReport end_training() { return {}; }

  // What a checkpoint must save from this rank: its module's parameters and buffers by
  // name, or nothing on a rank whose state another rank saves (data-parallel replicas
  // other than rank 0).
  virtual nn::StateDict checkpoint_state() const;
  // Who saves what (train::Checkpointer): this rank among the job's ranks, the name of the
  // part of the model it writes ("model" for a whole replica, "stage<k>" for a pipeline
  // stage; empty on a rank whose state another rank writes), and the job's shape for the
  // manifest. Every rank writes its own record (random-number state, epoch sums).
  // `saves_optimizer`: whether the part includes the optimizer's state (not where servers
  // hold it); `step_saves`: whether the ranks can save inside an epoch (all at the same
  // update), or only at its end.
  struct CheckpointRole {
    int rank = 0, ranks = 1;
    std::string part;
    int stages = 1, replicas = 1, servers = 0;
    bool saves_optimizer = true, step_saves = true;
  };
  virtual CheckpointRole checkpoint_role() const { return {.part = "model"}; }
  // After this rank's snapshot for the checkpoint of `step` (every training rank): ranks
  // that serve take their shares (parameter servers; SaveShare).
  virtual void checkpoint_servers(std::int64_t /*step*/) {}

 protected:
  // Forward, loss (times `weight`, scaled by the config's scaler) and backward of one
  // micro-batch; adds its loss and correct count to `stats`. `last`: the update's last
  // micro-batch, after whose backward the gradients are exchanged.
  virtual void forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                                StepStats& stats);
  // After the last micro-batch's backward: make every replica's gradients the same.
  virtual void exchange_gradients() {}
  // The update from the exchanged gradients: unscale and clip as configured, then the
  // optimizer's step (through the scaler when there is one).
  virtual void update(optim::Optimizer& optimizer, const StepConfig& config, StepStats& stats);
  // This rank's sum of squared gradients, added up over the ranks that hold the other parts
  // of the model (a pipeline's stages), for clipping by the whole model's norm. A strategy
  // whose ranks each hold all of the model's gradients returns `local`.
  virtual double model_squared_norm(double local) { return local; }
  // Whether the model's gradients are spread over ranks, so that an inf/NaN found by one
  // rank's loss scaler must skip the step on the others too (through the summed norm).
  virtual bool gradients_spread() const { return false; }

  // What train_step does with each micro-batch's loss, shared with strategies that run
  // their own micro-batches: its share of the update's samples (1 for a single one),
  static double sample_share(std::int64_t rows, std::int64_t total, std::size_t count);
  // the loss times `weight`, added with the correct count to `stats` (when given), and
  // returned scaled by the config's scaler, ready for backward;
  static Variable weighted_loss(const Variable& output, const Tensor& targets, double weight,
                                const StepConfig& config, StepStats* stats);
  // and the running sum `total` (undefined at first) plus `value`.
  static Tensor accumulate(const Tensor& total, const Tensor& value);

  std::shared_ptr<nn::Module> module_;
  Device device_;
};

// One process: the model on `device`, no communication.
class LocalStrategy final : public Strategy {
 public:
  explicit LocalStrategy(Device device = Device::cpu()) : Strategy(device) {}
  std::string name() const override { return "local"; }
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override;
  Shard data_shard() const override { return {}; }
  bool reports() const override { return true; }
  void reduce_sums(Tensor&) override {}
};

// LocalStrategy for a group of one, DataParallelStrategy over `world` otherwise.
std::shared_ptr<Strategy> default_strategy(const CommunicatorPtr& world, Device device);

}  // namespace dtrain::dist
