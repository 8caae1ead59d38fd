// ParameterServerStrategy: training with parameter-server ranks (dist::ParameterServer) as
// a Strategy, the counterpart of tf.distribute's ParameterServerStrategy. Of the job's
// ranks the last `servers` serve (the Trainer calls serve() there instead of training) and
// the others are workers; worker 0 (rank 0) is the chief that prints and writes metrics.
//
// A worker's step: forward and loss as any strategy; the last micro-batch's backward
// pushes each bucket of gradients as it fills (after the whole backward instead, when a
// loss scaler or clipping must see all of the gradients first: the worker unscales, clips
// its own gradient by its norm, and skips a push with inf/NaN); update() waits for the
// servers' fresh values. The optimizer given to train_step is not stepped on a worker:
// the servers run one like it (Optimizer::rebind) at the learning rate it holds.
//
// Data: sync mode reads fixed shards, one per worker (every worker pushes every step); in
// async and ssp modes batches are claimed one at a time from server 0 (claim_batch), so
// that a fast worker takes more of the epoch, and so in sync mode with backup workers,
// where a handed-out batch is a worker's share of an update (the batch size over the
// workers) and a straggler's late batches are dropped, not waited for at the epoch's end.
// At the end of an epoch every worker takes the servers' final values (evaluation sees one
// model), and the chief reports server 0's staleness histogram ("staleness" in the metrics
// file).
#pragma once

#include "dtrain/dist/strategy/device_mesh.h"
#include "dtrain/dist/ps/parameter_server.h"
#include "dtrain/dist/strategy/strategy.h"

namespace dtrain::dist {

class ParameterServerStrategy final : public Strategy,
                                      private ServerLoop,
                                      private BatchDispenser,
                                      private EpochHooks,
                                      private RemoteState {
 public:
  // `world`: every rank of the job (MPI), laid out as the mesh worker[dp=W] + ps[ps=S]
  // (device_mesh.h). A model on a GPU trains there; its gradients and values travel through
  // host memory.
  ParameterServerStrategy(CommunicatorPtr world, Device device, PsOptions options);
  ~ParameterServerStrategy() override;

  // Placed from the mesh: worker w reads shard w of the workers' (servers read nothing:
  // index 0, for the record), the chief reports, evaluation sums add up over the workers
  // (from prepare(); after a worker is lost, over the survivors, who then share the test
  // set).
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override;
  // The chief writes the model (its values are the servers' after each sync step and at
  // every epoch's end), each server its share of the optimizer state (by parameter name
  // and element range, so that it loads onto another number of servers). In async and ssp
  // modes only at the end of an epoch, where the workers meet.
  CheckpointPlan checkpoint_plan() const override;
  StepStats train_step(std::span<const MicroBatch> micro, optim::Optimizer& optimizer,
                       const StepConfig& config) override;
  // Servers: the server loop. Workers: epoch hooks (meeting the servers), the servers'
  // copies for rollback (remote_state), and in async and ssp modes and sync with backup
  // workers the batch dispenser (server 0 hands batches out).
  Capabilities capabilities() override;

  // Whether this rank is a worker (the others serve).
  bool trains() const;
  // The parameter server, after prepare().
  ParameterServer& parameter_server();
  const DeviceMesh& mesh() const { return mesh_; }
  const PsOptions& options() const { return options_; }

 protected:
  void forward_backward(const MicroBatch& batch, double weight, bool last, const StepConfig& config,
                        StepStats& stats) override;
  // Pushes the checked gradients (skipped by the servers when `nonfinite`) and takes the
  // servers' fresh values; the local optimizer is not stepped.
  void apply_update(optim::Optimizer& optimizer, const StepConfig& config, bool nonfinite) override;

 private:
  void serve(optim::Optimizer& optimizer, const SaveShare& save_share) override;
  std::optional<std::int64_t> claim_batch(std::int64_t queue, std::int64_t batches) override;
  bool shares_update() const override;
  void begin_epoch(std::int64_t epoch) override;
  EpochReport end_epoch() override;
  EpochReport end_training() override;
  // Rollback: the chief asks the servers to keep copies; any worker may ask them to return.
  bool keeps_copies() const override;
  void keep_copy(std::int64_t id) override;
  std::optional<Restored> restore_copy(std::int64_t id, std::int64_t window) override;
  // Places this rank among the workers (after prepare(): the live ones).
  void place_among_workers();

  PsOptions options_;
  DeviceMesh mesh_;
  std::unique_ptr<ParameterServer> ps_;
  double lr_ = 0;             // of the step in progress
  std::int64_t batches_ = 0;  // the step's micro-batches: claimed batches in async and ssp modes
  // The chief: server 0's staleness counts since the start of the epoch, and of the run.
  std::int64_t epoch_ = -1;
  StalenessStats staleness_, run_staleness_;
};

}  // namespace dtrain::dist
