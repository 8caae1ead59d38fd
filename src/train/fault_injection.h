// Fault injection for the tests of checkpoints and restarts: DTRAIN_FAULT makes one rank
// die by SIGKILL at a chosen point, as a crashed node would, or stop for a while, deterministically.
//   DTRAIN_FAULT=kill-at-step:<rank>:<global step>   after that update's step
//   DTRAIN_FAULT=kill-in-save:<rank>:<n>             in its n-th save, between two files
//   DTRAIN_FAULT=stop-at-step:<rank>:<step>:<seconds> SIGSTOP after that step, SIGCONT after
//                                                    the seconds (a node that freezes)
// Only in a job's first attempt (DTRAIN_RESTART_COUNT unset or 0; dtrain-launch counts the
// restarts), so that the restarted job runs through. A malformed value is an error.
#pragma once

#include <cstdint>

namespace dtrain::train::fault {

void maybe_kill_at_step(int rank, std::int64_t global_step);
void maybe_kill_in_save(int rank, int save);

}  // namespace dtrain::train::fault
