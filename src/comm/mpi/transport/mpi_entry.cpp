// The MPI entry points of a build with MPI (see comm/mpi_entry.h).
#include "comm/mpi_entry.h"

#include "comm/mpi/transport/mpi_communicator.h"

#include <atomic>

namespace dtrain::dist::detail {
namespace {
std::atomic<int> host_rank{-1};
}  // namespace

CommunicatorPtr mpi_world(const CommunicatorOptions& options) {
  mpi::ensure_initialized();
  MPI_Comm comm;
  mpi::check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "dist::world: MPI_Comm_dup");
  auto world = std::make_shared<mpi::MpiCommunicator>(comm, options, "world");
  // Taken here, where every rank comes, from the host split the communicator made anyway:
  // a split where a GPU is picked would be a collective that some ranks may not call.
  int unset = -1;
  host_rank.compare_exchange_strong(unset, world->host_rank());
  return world;
}

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int mpi_world_rank() {
  if (!mpi_running()) return -1;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_host_rank() { return host_rank.load(); }

void abort_mpi_job(int code) {
  if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
}

}  // namespace dtrain::dist::detail
