// Which ranks share a host: what MPI finds, or what the caller says (host_id), for the
// shared-memory and hierarchical all-reduce.
#pragma once

#include <mpi.h>

namespace dtrain::dist::mpi {

// Collective over comm: the communicator of the ranks of comm on this rank's host, in the
// order of their ranks in comm. host_id -1: the ranks that share memory
// (MPI_COMM_TYPE_SHARED); an id >= 0: the ranks given the same id, which is how emulated
// hosts on one machine (network namespaces) are told apart. Every rank passes -1 or every
// rank an id, and ranks given one id must share memory; otherwise throws dtrain::Error on
// every rank, naming DTRAIN_HOST_ID.
MPI_Comm split_hosts(MPI_Comm comm, int host_id);

}  // namespace dtrain::dist::mpi
