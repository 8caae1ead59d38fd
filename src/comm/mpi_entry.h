// The MPI side of world() and abort_job(). Defined in mpi/ when dtrain is built with MPI
// (DTRAIN_USE_MPI) and in nompi/ otherwise, so that communicator.cpp needs no #ifdef.
#pragma once

#include "dtrain/comm/communicator.h"

namespace dtrain::dist::detail {

// The world communicator over MPI (initializing MPI on first use). Without MPI: throws.
CommunicatorPtr mpi_world(const CommunicatorOptions& options);
// Whether MPI is initialized and not yet finalized (by the application or by dtrain).
bool mpi_running();
// This process's rank in MPI_COMM_WORLD, or -1 when MPI is not running.
int mpi_world_rank();
// This process's rank among the MPI processes on its host (those that share its memory, or
// those given its DTRAIN_HOST_ID), found when the first world() was made (every rank makes
// it: a collective point); -1 before that, or without MPI.
int mpi_host_rank();
// MPI_Abort(MPI_COMM_WORLD, code) when MPI is running (does not return); otherwise returns.
void abort_mpi_job(int code);
// A communicator forgot a lost peer (communicator.cpp keeps the flag: peer_was_lost).
void note_peer_lost();

}  // namespace dtrain::dist::detail
