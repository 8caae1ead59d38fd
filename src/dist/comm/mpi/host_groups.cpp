#include "dist/comm/mpi/host_groups.h"

#include "dist/comm/mpi/mpi_runtime.h"
#include "dtrain/core/error.h"

namespace dtrain::dist::mpi {
namespace {
int comm_size(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}

// How many ranks of comm pass a true `mine`.
int count_true(MPI_Comm comm, bool mine) {
  int one = mine ? 1 : 0, total = 0;
  check(MPI_Allreduce(&one, &total, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce");
  return total;
}
}  // namespace

MPI_Comm split_hosts(MPI_Comm comm, int host_id) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const int size = comm_size(comm);
  // Checked before any split: ranks that disagree would call different collectives.
  const int given = count_true(comm, host_id >= 0);
  DTRAIN_CHECK(given == 0 || given == size,
               "DTRAIN_HOST_ID (CommunicatorOptions::host_id) is set on {} of the {} ranks: set it on every rank or "
               "on none",
               given, size);
  MPI_Comm shared;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared), "MPI_Comm_split_type");
  if (given == 0) return shared;

  MPI_Comm host, host_in_shared;
  check(MPI_Comm_split(comm, host_id, rank, &host), "MPI_Comm_split");
  // The ranks with this id that share memory with this one: all of them, unless the id
  // spans machines (the shared-memory window could not be allocated).
  check(MPI_Comm_split(shared, host_id, rank, &host_in_shared), "MPI_Comm_split");
  const bool spans_machines = comm_size(host_in_shared) != comm_size(host);
  MPI_Comm_free(&host_in_shared);
  MPI_Comm_free(&shared);
  const int bad = count_true(comm, spans_machines);
  if (bad > 0) MPI_Comm_free(&host);
  DTRAIN_CHECK(bad == 0,
               "DTRAIN_HOST_ID (CommunicatorOptions::host_id): {} rank(s) share a host id with ranks on another "
               "machine (this is rank {} with id {}); ranks given one id must share memory",
               bad, rank, host_id);
  return host;
}

}  // namespace dtrain::dist::mpi
