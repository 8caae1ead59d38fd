// The Trainer's guard state (private to train; what it does: dtrain/train/guard.h): the
// loss watch, the snapshots (the last good one and one waiting for a healthy loss, here or
// on the ranks that hold the state), the epoch sums at the last healthy check, and the
// rollbacks so far.
#pragma once

#include "dtrain/train/trainer.h"
#include "train/epoch_sums.h"
#include "train/loss_watch.h"
#include "train/state_snapshot.h"

#include <array>
#include <optional>
#include <vector>

namespace dtrain::train {

struct Trainer::Guard {
  Guard(const GuardOptions& o, bool scaled, dist::Strategy& strategy, const dist::Capabilities& caps)
      : options(o),
        watch(o, scaled),
        plan(strategy.checkpoint_plan()),
        remote(caps.remote_state),
        lockstep(caps.dispenser == nullptr) {}

  GuardOptions options;
  LossWatch watch;
  dist::CheckpointPlan plan;
  dist::RemoteState* remote;  // set where other ranks hold the state
  // Whether the training ranks step together (and so agree on every check); otherwise each
  // rank decides from its own loss.
  bool lockstep;
  // Snapshots here: slots of `local`, the good one and the one waiting (-1: none). Held
  // elsewhere (remote): their ids, the global step each was taken after.
  std::array<StateSnapshot, 2> local;
  int good = -1, waiting = -1;
  std::int64_t remote_good = -1, remote_waiting = -1;
  std::int64_t last_snapshot = -1;   // the global step of the latest snapshot
  std::int64_t last_check = 0;       // the global step of the latest check
  std::vector<double> healthy_sums;  // the epoch's sums at the last healthy check
  std::int64_t nonfinite_seen = 0;   // the epoch's non-finite losses at the last check
  int rollbacks = 0;
  std::int64_t cooldown_until = 0;       // global step: updates up to it run at lr_factor
  std::optional<double> unscheduled_lr;  // without a schedule: the learning rate before the cooldown

  // After a rollback: the epoch's sums go back to the last healthy check (the updates undone
  // no longer count), and a run of non-finite losses starts over.
  void forget_trouble(EpochSums& sums) {
    sums.restore(healthy_sums);
    nonfinite_seen = sums.nonfinite();
    watch.after_rollback();
  }
};

}  // namespace dtrain::train
