// Messages of any byte count over MPI point-to-point, for the collective algorithms: MPI
// counts are ints, so a larger range goes as several messages (same tag: they arrive in
// order), and the waits poll for about as long as the transfer takes (spin_for_network).
#pragma once

#include "dtrain/comm/communicator.h"

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

// The rings' chunks: large enough that MPI's per-message cost is small against the copy,
// small enough that a chunk and its twin stay in the 1 MB L2 while they are reduced.
inline constexpr std::size_t kRingChunkBytes = std::size_t{1} << 20;

// Posts [data, data + bytes) in `chunk`-byte messages to (send) or from `peer`; both sides
// cut a range alike, so every message meets a receive of its size.
void post_chunks(bool send, std::byte* data, std::size_t bytes, std::size_t chunk, int peer, MPI_Comm comm,
                 std::vector<MPI_Request>& out);

// Receives `count` elements from `peer`, sent in kRingChunkBytes chunks, into the two chunks
// of `scratch` and writes dst = mine (op) received chunk by chunk, while the next chunk
// arrives. dst may be mine.
void receive_combining(std::byte* dst, const std::byte* mine, std::size_t count, DType dtype, ReduceOp op, int peer,
                       MPI_Comm comm, std::vector<std::byte>& scratch);

}  // namespace dtrain::dist::mpi
