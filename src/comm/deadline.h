// A deadline for a blocking call that no watchdog sees: NCCL's communicator set-up
// (ncclCommInitRank, ncclCommSplit) waits for every rank, so a rank that failed before it
// would leave the others blocked for ever. Not NCCL-specific, so that it is tested here.
#pragma once

#include "dtrain/comm/communicator.h"

#include <chrono>
#include <functional>
#include <string>

namespace dtrain::dist {

// Runs `body` on a thread of its own and waits for it at most `timeout`; rethrows what it
// throws. When the time is up, the report "<what> waited <s> s for <waiting_for>" ends
// the job (OnTimeout::AbortJob: abort_job with "; aborting the job", which returns only
// without MPI) or is thrown as dtrain::Error with "; the communicator was not made"
// (OnTimeout::Throw, and AbortJob without MPI). The body keeps running then (a blocking
// call cannot be cancelled), on its detached thread: it must own everything it touches.
void run_with_deadline(const std::string& what, const std::string& waiting_for, std::chrono::milliseconds timeout,
                       OnTimeout policy, std::function<void()> body);

}  // namespace dtrain::dist
