#include "comm/mpi/transport/byte_messages.h"

#include "comm/backoff.h"
#include "comm/mpi/transport/mpi_runtime.h"
#include "comm/mpi/transport/request_wait.h"
#include "comm/reduce_kernels.h"

#include <algorithm>

namespace dtrain::dist::mpi {
namespace {
constexpr std::size_t kMaxMessage = std::size_t{1} << 30;

template <class Post>
void post_pieces(std::size_t bytes, Post post) {
  for (std::size_t off = 0; off < bytes; off += kMaxMessage)
    post(off, static_cast<int>(std::min(kMaxMessage, bytes - off)));
}
}  // namespace

void post_send(const std::byte* data, std::size_t bytes, int peer, MPI_Comm comm, std::vector<MPI_Request>& out) {
  post_pieces(bytes, [&](std::size_t off, int n) {
    out.emplace_back();
    check(MPI_Isend(data + off, n, MPI_BYTE, peer, 0, comm, &out.back()), "MPI_Isend");
  });
}

void post_recv(std::byte* data, std::size_t bytes, int peer, MPI_Comm comm, std::vector<MPI_Request>& out) {
  post_pieces(bytes, [&](std::size_t off, int n) {
    out.emplace_back();
    check(MPI_Irecv(data + off, n, MPI_BYTE, peer, 0, comm, &out.back()), "MPI_Irecv");
  });
}

void exchange(const std::byte* send, std::size_t send_bytes, std::byte* recv, std::size_t recv_bytes, int peer,
              MPI_Comm comm, const char* what) {
  std::vector<MPI_Request> requests;
  post_recv(recv, recv_bytes, peer, comm, requests);
  post_send(send, send_bytes, peer, comm, requests);
  wait_transfer(requests, std::max(send_bytes, recv_bytes), what);
}

void wait_transfer(std::vector<MPI_Request>& requests, std::size_t bytes, const char* what) {
  wait_all(requests.data(), static_cast<int>(requests.size()), what, spin_for_network(bytes));
}

void post_chunks(bool send, std::byte* data, std::size_t bytes, std::size_t chunk, int peer, MPI_Comm comm,
                 std::vector<MPI_Request>& out) {
  for (std::size_t off = 0; off < bytes; off += chunk) {
    const int n = static_cast<int>(std::min(chunk, bytes - off));
    out.emplace_back();
    check(send ? MPI_Isend(data + off, n, MPI_BYTE, peer, 0, comm, &out.back())
               : MPI_Irecv(data + off, n, MPI_BYTE, peer, 0, comm, &out.back()),
          send ? "MPI_Isend" : "MPI_Irecv");
  }
}

void receive_combining(std::byte* dst, const std::byte* mine, std::size_t count, DType dtype, ReduceOp op, int peer,
                       MPI_Comm comm, std::vector<std::byte>& scratch) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t chunk = kRingChunkBytes / esize;
  const std::size_t chunks = (count + chunk - 1) / chunk;
  if (scratch.size() < 2 * kRingChunkBytes) scratch.resize(2 * kRingChunkBytes);
  MPI_Request pending[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  auto length = [&](std::size_t k) { return std::min(chunk, count - k * chunk); };
  auto post = [&](std::size_t k) {
    check(MPI_Irecv(scratch.data() + (k % 2) * kRingChunkBytes, static_cast<int>(length(k) * esize), MPI_BYTE, peer, 0,
                    comm, &pending[k % 2]),
          "MPI_Irecv");
  };
  for (std::size_t k = 0; k < std::min<std::size_t>(2, chunks); ++k) post(k);
  for (std::size_t k = 0; k < chunks; ++k) {
    wait_all(&pending[k % 2], 1, "ring reduce-scatter (receive)", spin_for_network(length(k) * esize));
    const std::size_t at = k * chunk * esize;
    combine(dst + at, mine + at, scratch.data() + (k % 2) * kRingChunkBytes, length(k), dtype, op);
    if (k + 2 < chunks) post(k + 2);
  }
}

}  // namespace dtrain::dist::mpi
