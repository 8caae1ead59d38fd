#include "comm/mpi/transport/host_groups.h"

#include "comm/mpi/transport/mpi_runtime.h"
#include "dtrain/core/error.h"

#include <algorithm>

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

HostLayout host_layout(MPI_Comm comm, MPI_Comm host) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  // Every rank learns its leader's rank in comm, which names its host, and tells its rank
  // in the host (whatever order `host` gives its ranks).
  int mine[2] = {rank, 0};
  MPI_Comm_rank(host, &mine[1]);
  check(MPI_Bcast(&mine[0], 1, MPI_INT, 0, host), "MPI_Bcast");
  const auto n = static_cast<std::size_t>(comm_size(comm));
  std::vector<int> all(2 * n);
  check(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm), "MPI_Allgather");
  std::vector<int> firsts;
  for (std::size_t r = 0; r < n; ++r) firsts.push_back(all[2 * r]);
  std::sort(firsts.begin(), firsts.end());
  firsts.erase(std::unique(firsts.begin(), firsts.end()), firsts.end());
  HostLayout layout;
  layout.members.resize(firsts.size());
  for (std::size_t r = 0; r < n; ++r) {
    const auto h =
        static_cast<std::size_t>(std::lower_bound(firsts.begin(), firsts.end(), all[2 * r]) - firsts.begin());
    layout.host_of.push_back(static_cast<int>(h));
    layout.host_rank_of.push_back(all[2 * r + 1]);
    auto& members = layout.members[h];
    const auto k = static_cast<std::size_t>(all[2 * r + 1]);
    if (members.size() <= k) members.resize(k + 1, -1);
    members[k] = static_cast<int>(r);
  }
  return layout;
}

}  // namespace dtrain::dist::mpi
