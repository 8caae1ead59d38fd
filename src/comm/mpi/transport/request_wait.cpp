#include "comm/mpi/transport/request_wait.h"

#include "comm/mpi/transport/mpi_runtime.h"

namespace dtrain::dist::mpi {

void wait_all(MPI_Request* requests, int n, const char* what, std::chrono::microseconds spin) {
  Backoff backoff(spin);
  for (;;) {
    int done = 0;
    check(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), what);
    if (done) return;
    backoff.pause();
  }
}

}  // namespace dtrain::dist::mpi
