// Checkpointer: saves and restores everything a training run needs to go on exactly where
// it stopped, for the Trainer (TrainerOptions::checkpoint) or any loop of one's own.
//
// A save, at a step boundary on every rank (collective):
//  1. waits for the previous save to finish, and agrees with the other ranks that it did;
//  2. snapshots, into host memory: this rank's part of the model (Strategy::checkpoint_plan),
//     the optimizer's state by parameter name, the loss scaler, the training position, the
//     default random-number generator and the Trainer's epoch sums;
//  3. writes the snapshot on a background thread (or at once with async = false) into the
//     checkpoint's incomplete directory; rank 0 then commits it (checkpoint/store.h).
// Training goes on during step 3: the step is held up for steps 1 and 2 only.
//
// A restore reads the checkpoint `resume` names ("auto": the latest one in `dir`, or none)
// after checking sizes and checksums, loads every tensor this rank's module and optimizer
// need by name (from whichever part file holds it, so a data-parallel checkpoint loads on
// any number of ranks and a pipeline's on another cut of the same layers), and returns the
// position to continue from. Errors name the file and the first tensor that is missing or
// of another shape.
#pragma once

#include "dtrain/checkpoint/manifest.h"
#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/optim/loss_scaler.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::train {

struct CheckpointOptions {
  std::filesystem::path dir = {};  // empty: no checkpoints
  std::int64_t every = 0;          // also every N global updates (0: at the end of each epoch only)
  int keep = 0;                    // keep the newest K checkpoints (0: all)
  bool async = true;               // write on a background thread while training goes on
  std::string resume = {};         // "" (start afresh), "auto" (the latest in dir, if any), or a checkpoint directory
};

// What a restore hands back to the training loop.
struct Restored {
  std::filesystem::path from;
  checkpoint::Manifest manifest;
  // The epoch sums of the epoch in progress, when the job has the saving job's shape
  // (they are per rank); nullopt otherwise.
  std::optional<std::vector<double>> epoch_sums;
};

// Timings of the last save, for benchmarks and the log.
struct SaveTimes {
  double held_s = 0;        // the caller waited: agreement and snapshot (plus the write when not async)
  double write_s = 0;       // the background write, commit included (rank 0)
  std::uint64_t bytes = 0;  // written by this rank
};

class Checkpointer {
 public:
  Checkpointer(CheckpointOptions options, dist::Strategy& strategy);
  // Waits for a save in flight, except that rank 0 no longer waits for the other ranks'
  // parts (a save still in flight here is an error's way out); its error, if any, is logged.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  const CheckpointOptions& options() const { return options_; }
  int rank() const { return plan_.rank; }  // this rank among the job's (Strategy::checkpoint_plan)

  // Saves at `position` (collective). `model_summary` goes into the manifest for messages.
  void save(const optim::Optimizer& optimizer, const optim::LossScaler& scaler,
            const checkpoint::TrainingPosition& position, const std::vector<double>& epoch_sums,
            const std::string& model_summary);
  // Waits for the save in flight and agrees with the other ranks that every save succeeded
  // (collective); throws naming the failure otherwise.
  void finish();
  // On a rank that serves (a parameter server): writes its share of the checkpoint of
  // `step` in the background (dist::ServerLoop::SaveShare). Errors go into its record, for rank 0.
  void save_share(std::int64_t step, checkpoint::NamedTensors share);
  // Loads the checkpoint options.resume names into the strategy's module, `optimizer`,
  // `scaler` and the default generator; nullopt when there is nothing to resume ("" or
  // "auto" with no checkpoint). Not collective: every rank reads the files itself.
  std::optional<Restored> restore(optim::Optimizer& optimizer, optim::LossScaler& scaler);

  SaveTimes last_save() const;

 private:
  struct Snapshot;
  struct Writer;
  void write(const Snapshot& snapshot);  // on the writer thread (or the caller's)
  // finish(), and every rank learns rank 0's step (the checkpoint's name).
  std::int64_t finish_and_agree(std::int64_t step);
  void start(Snapshot snapshot);  // write() on the writer thread, or now when not async
  // This rank's record without its epoch sums or files: its rank and generator state.
  checkpoint::RankRecord own_record() const;

  CheckpointOptions options_;
  dist::Strategy& strategy_;
  dist::CheckpointPlan plan_;
  std::unique_ptr<Writer> writer_;
  bool cleaned_ = false;  // rank 0 removed what crashed saves left
};

// The optimizer's state keyed by parameter name ("<name>/<buffer>", "<name>/updates",
// "lr", "steps") instead of position, so that it loads into an optimizer over another cut
// of the model; `module` names the optimizer's parameters (each must be one of its own).
checkpoint::NamedTensors named_optimizer_state(const optim::Optimizer& optimizer, const nn::Module& module);
// The inverse: the entries of `tensors` for the optimizer's parameters (looked up by name
// in `module`), loaded with Optimizer::load_state. `origin` names the files in errors.
void load_named_optimizer_state(optim::Optimizer& optimizer, const nn::Module& module,
                                const checkpoint::NamedTensors& tensors, const std::string& origin);

}  // namespace dtrain::train
