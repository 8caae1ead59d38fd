// Ring all-reduce over MPI point-to-point: a reduce-scatter then an all-gather, each in
// n-1 steps between ring neighbours (rank r sends to r+1 and receives from r-1). Every rank
// sends and receives 2(n-1)/n of the message, the bandwidth optimum. Segments are split
// into chunks received into two scratch buffers, so that the receive of chunk k+1 is in
// flight while chunk k is reduced. Sizes need not divide by the rank count.
#pragma once

#include "dtrain/comm/communicator.h"

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace dtrain::dist::mpi {

class RingAllReduce {
 public:
  // Collective over `comm`, which it duplicates so that its messages never meet others.
  explicit RingAllReduce(MPI_Comm comm);
  ~RingAllReduce();
  RingAllReduce(const RingAllReduce&) = delete;
  RingAllReduce& operator=(const RingAllReduce&) = delete;

  // In place over `count` elements; op is Sum, Max or Min (Mean is the caller's division).
  void run(void* data, std::size_t count, DType dtype, ReduceOp op);

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::byte> scratch_;  // two chunks
};

}  // namespace dtrain::dist::mpi
