#include "comm/mpi/algorithms/flat_allreduce.h"

#include "comm/mpi/transport/mpi_runtime.h"

#include <climits>

namespace dtrain::dist::mpi {

void mpi_all_reduce(MPI_Comm comm, void* data, std::size_t count, DType dtype, ReduceOp op) {
  DTRAIN_CHECK(count <= INT_MAX, "all_reduce: {} elements exceed MPI's int count", count);
  check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), datatype(dtype), reduce_op(op, dtype), comm),
        "MPI_Allreduce");
}

FlatAllReduce::FlatAllReduce(MPI_Comm comm) : comm_(comm), ring_(comm), halving_(comm) {}

void FlatAllReduce::run(AllReduceAlgorithm algorithm, void* data, std::size_t count, DType dtype, ReduceOp op) {
  switch (algorithm) {
    case AllReduceAlgorithm::Ring: ring_.run(data, count, dtype, op); return;
    case AllReduceAlgorithm::RecursiveDoubling: halving_.recursive_doubling(data, count, dtype, op); return;
    case AllReduceAlgorithm::Rabenseifner: halving_.rabenseifner(data, count, dtype, op); return;
    case AllReduceAlgorithm::Mpi: mpi_all_reduce(comm_, data, count, dtype, op); return;
    default: DTRAIN_FAIL("all_reduce: {} is not a flat algorithm", algorithm_name(algorithm));
  }
}

}  // namespace dtrain::dist::mpi
