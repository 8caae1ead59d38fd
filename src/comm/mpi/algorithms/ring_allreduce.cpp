#include "comm/mpi/algorithms/ring_allreduce.h"

#include "comm/mpi/transport/byte_messages.h"
#include "comm/mpi/transport/mpi_runtime.h"
#include "comm/mpi/transport/request_wait.h"
#include "dtrain/comm/partition.h"

#include <algorithm>

namespace dtrain::dist::mpi {

RingAllReduce::RingAllReduce(MPI_Comm comm) {
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

RingAllReduce::~RingAllReduce() { MPI_Comm_free(&comm_); }

void RingAllReduce::run(void* data, std::size_t count, DType dtype, ReduceOp op) {
  const int n = size_;
  if (n == 1 || count == 0) return;
  const std::size_t esize = dtype_size(dtype);
  auto* base = static_cast<std::byte*>(data);
  const int right = (rank_ + 1) % n, left = (rank_ - 1 + n) % n;
  std::vector<MPI_Request> requests;

  // Reduce-scatter: after step s, the segment received holds the sum over s + 2 ranks; after
  // n-1 steps rank r holds the full reduction of segment r+1.
  for (int s = 0; s < n - 1; ++s) {
    Range out = slice(count, (rank_ - s + n) % n, n);
    Range in = slice(count, (rank_ - s - 1 + n) % n, n);
    requests.clear();
    post_chunks(true, base + out.begin * esize, out.size() * esize, kRingChunkBytes, right, comm_, requests);
    std::byte* target = base + in.begin * esize;
    receive_combining(target, target, in.size(), dtype, op, left, comm_, scratch_);
    wait_all(requests.data(), static_cast<int>(requests.size()), "ring reduce-scatter (send)",
             spin_for_network(out.size() * esize));
  }
  // All-gather: pass the reduced segments around, received straight into place.
  for (int s = 0; s < n - 1; ++s) {
    Range out = slice(count, (rank_ + 1 - s + n) % n, n);
    Range in = slice(count, (rank_ - s + n) % n, n);
    requests.clear();
    post_chunks(false, base + in.begin * esize, in.size() * esize, kRingChunkBytes, left, comm_, requests);
    post_chunks(true, base + out.begin * esize, out.size() * esize, kRingChunkBytes, right, comm_, requests);
    wait_all(requests.data(), static_cast<int>(requests.size()), "ring all-gather",
             spin_for_network((in.size() + out.size()) * esize));
  }
}

}  // namespace dtrain::dist::mpi
