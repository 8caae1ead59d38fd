// The options every backend applies: the caller's, with DTRAIN_TIMEOUT (seconds) over the
// timeout when it is set.
#pragma once

#include "dtrain/dist/communicator.h"

namespace dtrain::dist::detail {

// Throws dtrain::Error naming DTRAIN_TIMEOUT when it is not a number of seconds in
// [1, 10000000] (capped so that deadlines stay representable).
CommunicatorOptions with_environment(CommunicatorOptions options);

}  // namespace dtrain::dist::detail
