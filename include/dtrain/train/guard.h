// GuardOptions: what the Trainer does when training goes wrong (TrainerOptions::guard).
//
// Every check_every updates (and at an epoch's last) the Trainer checks the update's training
// loss, as the mean over the ranks that step together (one all-reduce of four numbers; on a
// GPU reading it waits for the device), with the non-finite losses since the last check, and
// finds:
// - a non-finite loss: at once without a loss scaler (a non-finite gradient norm too); with
//   one, after nonfinite_patience consecutive checks (the scaler skips overflowing steps and
//   lowers its scale: a loss that stays non-finite is past what it can fix);
// - a spike: a loss above spike_factor times the median of the last `window` checked ones
//   that were finite (never less than a tenth of the loss's starting level: the median of
//   the first window);
// - a loss that stays at its starting level (a classifier at chance) or grows well above its
//   best running median for stall_updates updates.
// The first two are divergence. With rollback (the default) the Trainer returns the model
// and the optimizer's state to its last good snapshot (an in-memory copy taken every
// snapshot_every updates, good once a later loss was healthy; held on the parameter servers
// for their shards; the loss scaler keeps its scale, the optimizer its learning rate), skips the batches of the updates
// since (the data goes on from where it was, as PaLM's and OPT's restarts skipped the batches around a spike), runs the
// next `cooldown` updates at lr_factor times the learning rate, and goes on. Each rollback is printed (the step, the
// loss, the snapshot, the updates skipped) and written to the metrics file ("rollback"); more than max_rollbacks end
// the run with a message. Without rollback, divergence ends the run with a message naming the step and the loss. A
// stalled or growing loss is reported (a warning and a "divergence" metrics event) and training goes on.
//
// Where ranks step together (data parallel, ZeRO, pipelines, sync parameter servers) they
// agree on every check (one small all-reduce of the loss per checked update) and roll back
// together; where they do not (asynchronous parameter servers) a worker decides from its own
// loss, the chief keeps the servers' copies, and any worker's rollback returns every
// server's shard (pushes computed from the values before it are dropped).
#pragma once

#include <cstdint>

namespace dtrain::train {

struct GuardOptions {
  bool rollback = true;              // false: divergence ends the run with a message
  double spike_factor = 5;           // > 1; 0: no spike check
  std::int64_t window = 10;          // checked losses in the running median (the spike check starts once full)
  std::int64_t snapshot_every = 50;  // updates between in-memory snapshots
  int max_rollbacks = 3;             // one more ends the run
  double lr_factor = 0.5;            // in (0, 1]: the learning rate's factor after a rollback
  std::int64_t cooldown = 50;        // updates at the lowered learning rate
  int nonfinite_patience = 3;        // with a loss scaler: consecutive non-finite losses it may skip
  std::int64_t stall_updates = 100;  // updates a stalled or growing loss runs before it is reported (0: never)
  std::int64_t check_every = 10;     // updates between checks (rarer: cheaper, later)
};

// Throws naming the field and the expectation when a value is out of range.
void check_guard_options(const GuardOptions& options);

}  // namespace dtrain::train
