#include "dist/comm/mpi/byte_messages.h"

#include "dist/comm/backoff.h"
#include "dist/comm/mpi/mpi_runtime.h"
#include "dist/comm/mpi/request_wait.h"

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

}  // namespace dtrain::dist::mpi
