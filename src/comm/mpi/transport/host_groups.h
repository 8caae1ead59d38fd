// Which ranks share a host: what MPI finds, or what the caller says (host_id), for the
// shared-memory and hierarchical all-reduce.
#pragma once

#include <mpi.h>

#include <vector>

namespace dtrain::dist::mpi {

// Collective over comm: the communicator of the ranks of comm on this rank's host, in the
// order of their ranks in comm. host_id -1: the ranks that share memory
// (MPI_COMM_TYPE_SHARED); an id >= 0: the ranks given the same id, which is how emulated
// hosts on one machine (network namespaces) are told apart. Every rank passes -1 or every
// rank an id, and ranks given one id must share memory; otherwise throws dtrain::Error on
// every rank, naming DTRAIN_HOST_ID.
MPI_Comm split_hosts(MPI_Comm comm, int host_id);

// Where every rank of comm is. Hosts are numbered in the order of their first ranks in
// comm (as MPI_Comm_split orders the hosts' leaders); ranks within a host in their order
// in comm. Collective over comm; `host` from split_hosts.
struct HostLayout {
  std::vector<int> host_of;               // each rank's host
  std::vector<int> host_rank_of;          // each rank's rank in its host
  std::vector<std::vector<int>> members;  // each host's ranks of comm, in host-rank order
};
HostLayout host_layout(MPI_Comm comm, MPI_Comm host);

}  // namespace dtrain::dist::mpi
