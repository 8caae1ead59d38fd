// StateSnapshot: an in-memory copy of what this rank trains, for the Trainer's rollback
// (private to train; dtrain/train/guard.h). It holds what a checkpoint would take of this
// rank (Strategy::checkpoint_plan): the module's state or this rank's share of it (with the
// buffers), the optimizer's state or this rank's share, and the rank's own exchange state
// (error feedback), every rank its own, copied into host memory. Not the loss scaler: its
// scale now is the one that fits (the snapshot's overflowed since). Where other ranks hold
// the state (parameter servers), the Trainer asks them instead (dist::RemoteState).
#pragma once

#include "dtrain/dist/strategy/strategy.h"

#include <cstdint>
#include <vector>

namespace dtrain::train {

class StateSnapshot {
 public:
  // Copies the current state (reusing this snapshot's buffers where shapes allow).
  void take(dist::Strategy& strategy, const dist::CheckpointPlan& plan, const optim::Optimizer& optimizer);
  // Puts it back (collective-free: every rank restores its own copy).
  void restore(dist::Strategy& strategy, const dist::CheckpointPlan& plan, optim::Optimizer& optimizer) const;
  bool empty() const { return !taken_; }

  // Where it was taken: the global step after which, and the epoch and update in it.
  std::int64_t global_step = 0;
  int epoch = 0;
  std::int64_t step_in_epoch = 0;

 private:
  bool taken_ = false;
  optim::NamedTensors model_, optimizer_, rank_state_;
};

// Entries "<parameter>[begin:end]<suffix>" (a rank's flat element range of a parameter, as
// CheckpointPlan's shares name them) as "<parameter><suffix>" tensors of the parameter's
// shape that hold the ranges and zeros elsewhere: what the plan's load functions take the
// rank's slices from. Other entries pass through.
optim::NamedTensors spread_ranges(const optim::NamedTensors& ranges, const nn::Module& module);

}  // namespace dtrain::train
