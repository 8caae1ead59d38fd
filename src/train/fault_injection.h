// Fault injection for the tests of checkpoints and restarts: DTRAIN_FAULT makes one rank
// die by SIGKILL at a chosen point, as a crashed node would, or stop for a while, deterministically.
//   DTRAIN_FAULT=kill-at-step:<rank>:<global step>   after that update's step
//   DTRAIN_FAULT=kill-host-at-step:<host>:<step>     every rank whose DTRAIN_HOST_ID is the
//                                                    number <host>, after that update's step
//                                                    (an emulated host lost)
//   DTRAIN_FAULT=kill-in-epoch:<rank>:<epoch>:<n>    after the rank's n-th update of the epoch
//                                                    (1-based; where ranks take batches at run
//                                                    time, a rank's global step may fall in
//                                                    either epoch)
//   DTRAIN_FAULT=kill-in-save:<rank>:<n>             in its n-th save, between two files
//   DTRAIN_FAULT=stop-at-step:<rank>:<step>:<seconds> SIGSTOP after that step, SIGCONT after
//                                                    the seconds (a node that freezes)
//   DTRAIN_FAULT=loss-spike:<rank>:<step>[:<factor>]  that update's training loss times the
//                                                    factor (1000), its gradients with it
//   DTRAIN_FAULT=loss-nan:<rank>:<step>              that update's training loss and
//                                                    gradients NaN (a bad batch)
// (<step>: the rank's global update, 1-based.)
// Only in a job's first attempt (DTRAIN_RESTART_COUNT unset or 0; dtrain-launch counts the
// restarts), so that the restarted job runs through. A malformed value is an error.
#pragma once

#include "dtrain/dist/strategy/strategy.h"

#include <cstdint>
#include <functional>

namespace dtrain::train::fault {

void maybe_kill_at_step(int rank, std::int64_t global_step, int epoch, std::int64_t step_in_epoch);
void maybe_kill_in_save(int rank, int save);
// `loss` as it is, or, when DTRAIN_FAULT names a loss fault of `rank`, the loss with the
// fault applied at the update whose global step is step() + 1 (step(): the updates done).
dist::LossFn corrupt_loss(dist::LossFn loss, int rank, std::function<std::int64_t()> step);

}  // namespace dtrain::train::fault
