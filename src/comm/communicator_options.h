// The options every backend applies: the caller's, with DTRAIN_TIMEOUT (seconds) over the
// timeout, DTRAIN_CHECK_COLLECTIVES (0 or 1) over check_collectives and DTRAIN_HOST_ID
// (>= 0) over host_id when they are set.
#pragma once

#include "dtrain/comm/collective_table.h"
#include "dtrain/comm/communicator.h"

namespace dtrain::dist::detail {

// Throws dtrain::Error naming DTRAIN_TIMEOUT when it is not a number of seconds in
// [1, 10000000] (capped so that deadlines stay representable), or naming
// DTRAIN_CHECK_COLLECTIVES when it is neither 0 nor 1, or naming DTRAIN_HOST_ID when it
// is not an integer >= 0.
CommunicatorOptions with_environment(CommunicatorOptions options);

// The algorithm the options force on a collective (Auto: the table's choice).
CollectiveAlgorithm forced_algorithm(const CommunicatorOptions& options, TunedCollective which);
// Throws naming the option when one forces an algorithm its collective does not run.
void check_collective_algorithms(const CommunicatorOptions& options);
// Whether some collective's algorithm comes from the table.
bool uses_table(const CommunicatorOptions& options);

}  // namespace dtrain::dist::detail
