// The MPI entry points of a build without MPI: MPI is never running.
#include "comm/mpi_entry.h"

namespace dtrain::dist::detail {

CommunicatorPtr mpi_world(const CommunicatorOptions&) {
  DTRAIN_FAIL("dist::world: launched by an MPI launcher, but dtrain was built without MPI (DTRAIN_USE_MPI=OFF)");
}
bool mpi_running() { return false; }
int mpi_world_rank() { return -1; }
int mpi_host_rank() { return -1; }
void abort_mpi_job(int) {}

}  // namespace dtrain::dist::detail
