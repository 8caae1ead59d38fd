// One epoch's running state (private to train): shared by the epoch's loop
// (trainer_epoch.cpp) and the guard (trainer_guard.cpp).
#pragma once

#include "dtrain/train/trainer.h"
#include "train/epoch_sums.h"

namespace dtrain::train {

// One epoch's running state.
struct Trainer::Epoch {
  int epoch = 0;  // 1-based
  optim::Optimizer& optimizer;
  const optim::LrSchedule* schedule;
  std::int64_t updates = 0;  // per epoch (of all ranks where batches are handed out)
  // On the CPU reading a step's loss costs nothing, so divergence stops the very step; on a
  // GPU the loss is read only when an observer wants it (TrainObserver::wants_loss) and at
  // the end.
  bool read_each_step = true;
  EpochSums sums;
  // Evaluation points split the epoch into `parts` stretches of `span` updates each.
  int parts = 1;
  std::int64_t span = 1;
  bool stop = false;           // an evaluation reached the target, or the launcher asked for a stop
  double evaluating_s = 0;     // evaluations inside the epoch: not training time
  dist::EpochReport report{};  // the strategy's, for the epoch so far
  int rollbacks = 0;           // by the guard, this epoch
};

}  // namespace dtrain::train
