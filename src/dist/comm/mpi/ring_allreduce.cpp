#include "dist/comm/mpi/ring_allreduce.h"

#include "dist/comm/mpi/mpi_runtime.h"
#include "dist/comm/mpi/request_wait.h"
#include "dist/comm/partition.h"
#include "dist/comm/reduce_kernels.h"

#include <algorithm>

namespace dtrain::dist::mpi {
namespace {
// Bytes per message: large enough that MPI's per-message cost is small against the copy,
// small enough that a chunk and its twin stay in the 1 MB L2 while they are reduced.
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

// Posts one MPI_Isend per chunk of [data, data + bytes) to `dst`.
void send_chunks(const std::byte* data, std::size_t bytes, int dst, MPI_Comm comm, std::vector<MPI_Request>& out) {
  for (std::size_t off = 0; off < bytes; off += kChunkBytes) {
    int n = static_cast<int>(std::min(kChunkBytes, bytes - off));
    out.emplace_back();
    check(MPI_Isend(data + off, n, MPI_BYTE, dst, 0, comm, &out.back()), "MPI_Isend");
  }
}
}  // namespace

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
  const int right = (rank_ + 1) % n;
  std::vector<MPI_Request> requests;

  // Reduce-scatter: after step s, the segment received holds the sum over s + 2 ranks; after
  // n-1 steps rank r holds the full reduction of segment r+1.
  for (int s = 0; s < n - 1; ++s) {
    Range out = slice(count, (rank_ - s + n) % n, n);
    Range in = slice(count, (rank_ - s - 1 + n) % n, n);
    requests.clear();
    send_chunks(base + out.begin * esize, out.size() * esize, right, comm_, requests);
    receive_and_reduce(base + in.begin * esize, in.size(), dtype, op);
    wait_all(requests.data(), static_cast<int>(requests.size()), "ring reduce-scatter (send)",
             spin_for_network(out.size() * esize));
  }
  // All-gather: pass the reduced segments around, received straight into place.
  const int left = (rank_ - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    Range out = slice(count, (rank_ + 1 - s + n) % n, n);
    Range in = slice(count, (rank_ - s + n) % n, n);
    requests.clear();
    std::byte* dst = base + in.begin * esize;
    const std::size_t bytes = in.size() * esize;
    for (std::size_t off = 0; off < bytes; off += kChunkBytes) {
      int len = static_cast<int>(std::min(kChunkBytes, bytes - off));
      requests.emplace_back();
      check(MPI_Irecv(dst + off, len, MPI_BYTE, left, 0, comm_, &requests.back()), "MPI_Irecv");
    }
    send_chunks(base + out.begin * esize, out.size() * esize, right, comm_, requests);
    wait_all(requests.data(), static_cast<int>(requests.size()), "ring all-gather",
             spin_for_network((in.size() + out.size()) * esize));
  }
}

// Receives `count` elements from the left neighbour chunk by chunk into the two scratch
// buffers and combines each into dst; chunk k+1 arrives while chunk k is reduced.
void RingAllReduce::receive_and_reduce(std::byte* dst, std::size_t count, DType dtype, ReduceOp op) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t chunk = kChunkBytes / esize;
  const std::size_t chunks = (count + chunk - 1) / chunk;
  if (scratch_.size() < 2 * kChunkBytes) scratch_.resize(2 * kChunkBytes);
  const int left = (rank_ - 1 + size_) % size_;
  MPI_Request pending[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  auto length = [&](std::size_t k) { return std::min(chunk, count - k * chunk); };
  auto post = [&](std::size_t k) {
    check(MPI_Irecv(scratch_.data() + (k % 2) * kChunkBytes, static_cast<int>(length(k) * esize), MPI_BYTE, left, 0,
                    comm_, &pending[k % 2]),
          "MPI_Irecv");
  };
  for (std::size_t k = 0; k < std::min<std::size_t>(2, chunks); ++k) post(k);
  for (std::size_t k = 0; k < chunks; ++k) {
    wait_all(&pending[k % 2], 1, "ring reduce-scatter (receive)", spin_for_network(length(k) * esize));
    std::byte* target = dst + k * chunk * esize;
    combine(target, target, scratch_.data() + (k % 2) * kChunkBytes, length(k), dtype, op);
    if (k + 2 < chunks) post(k + 2);
  }
}

}  // namespace dtrain::dist::mpi
