// Waiting for MPI requests without MPI_Wait's busy polling: MPI_Test under a Backoff, so a
// communication thread that waits for a slow peer leaves the core to the compute threads.
#pragma once

#include "comm/backoff.h"

#include <mpi.h>

#include <chrono>

namespace dtrain::dist::mpi {

// Waits until all n requests are complete, polling for at least `spin` before the first
// sleep (see Backoff); throws naming `what` when one failed.
void wait_all(MPI_Request* requests, int n, const char* what, std::chrono::microseconds spin = Backoff::kSpin);

}  // namespace dtrain::dist::mpi
