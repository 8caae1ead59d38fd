// Messages of any byte count over MPI point-to-point, for the collective algorithms: MPI
// counts are ints, so a larger range goes as several messages (same tag: they arrive in
// order), and the waits poll for about as long as the transfer takes (spin_for_network).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

namespace dtrain::dist::mpi {

// Posts the sends (receives) of [data, data + bytes) to (from) `peer`, appending their
// requests to `out`; nothing for 0 bytes.
void post_send(const std::byte* data, std::size_t bytes, int peer, MPI_Comm comm, std::vector<MPI_Request>& out);
void post_recv(std::byte* data, std::size_t bytes, int peer, MPI_Comm comm, std::vector<MPI_Request>& out);

// Sends [send, send + send_bytes) to `peer` and receives recv_bytes from it into `recv`;
// returns when both are done. `what` names the step in an error.
void exchange(const std::byte* send, std::size_t send_bytes, std::byte* recv, std::size_t recv_bytes, int peer,
              MPI_Comm comm, const char* what);

// Waits for the requests, polling for as long as `bytes` take to cross a network link.
void wait_transfer(std::vector<MPI_Request>& requests, std::size_t bytes, const char* what);

}  // namespace dtrain::dist::mpi
