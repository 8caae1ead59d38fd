// The elastic launcher's request to stop at a checkpoint (scripts/dtrain-launch, elastic
// mode): it sets DTRAIN_ELASTIC_CONTROL to a file on a filesystem rank 0 sees and writes
// "relaunch" into it when hosts have come back, so that the job ends at its next checkpoint
// and is relaunched on more ranks from it.
#pragma once

#include <cstdint>

namespace dtrain::train {

// Whether DTRAIN_ELASTIC_CONTROL is set (the same on every rank under the launcher).
bool elastic_control_enabled();
// Whether the control file asks for a relaunch (read on the rank that calls it).
bool relaunch_requested();
// The job's answer, written by rank 0 once it stops for the relaunch with its checkpoint on
// disk: the launcher relaunches whatever exit status the job's launcher reports.
void acknowledge_relaunch(std::int64_t global_step);

}  // namespace dtrain::train
