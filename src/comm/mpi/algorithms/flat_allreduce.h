// The all-reduce algorithms that treat every rank of a communicator alike (no host
// structure): MPI_Allreduce, the ring, recursive doubling and Rabenseifner. The whole
// communicator runs them, or the hosts' leaders inside the hierarchical scheme.
#pragma once

#include "comm/mpi/algorithms/halving_doubling.h"
#include "comm/mpi/algorithms/ring_allreduce.h"

#include <mpi.h>

namespace dtrain::dist::mpi {

// MPI_Allreduce in place over `count` elements (a Mean runs as a Sum); throws past MPI's
// int count.
void mpi_all_reduce(MPI_Comm comm, void* data, std::size_t count, DType dtype, ReduceOp op);

class FlatAllReduce {
 public:
  // Collective over `comm`, which must outlive this object (the ring and the halving
  // algorithms keep duplicates of their own).
  explicit FlatAllReduce(MPI_Comm comm);

  // In place over `count` elements. algorithm: Mpi, Ring, RecursiveDoubling or
  // Rabenseifner; op: Sum, Max or Min (a Mean runs as a Sum: the caller divides).
  void run(AllReduceAlgorithm algorithm, void* data, std::size_t count, DType dtype, ReduceOp op);

 private:
  MPI_Comm comm_;
  RingAllReduce ring_;
  HalvingDoubling halving_;
};

}  // namespace dtrain::dist::mpi
