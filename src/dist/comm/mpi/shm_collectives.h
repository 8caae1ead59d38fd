// Reduce-scatter, all-gather and broadcast through a shared-memory window (shm_slots.h)
// inside each host (CollectiveAlgorithm::SharedMemory). On one host a handshake through
// cache lines costs less than a message through the MPI library, which is where MPI's own
// collectives lose at small sizes. Per chunk:
// - reduce-scatter: each rank copies the pieces of its input that the others reduce into
//   its slot (rank j's piece at position j), then reduces its own piece, its input with
//   every other rank's copy, straight into its output. Each element is reduced on one rank
//   only, so the ranks' orders of combining need not agree. One host only.
// - all-gather: each rank copies its piece of its block into its slot, then copies every
//   other rank's piece out as soon as that rank has posted it.
// - broadcast: the root copies into its slot and the others copy out.
// Across hosts (all-gather and broadcast), the hierarchical scheme: the window inside each
// host, MPI's own collective among the hosts' first ranks (the leaders: MPI_Allgatherv of
// each host's blocks, MPI_Bcast), and the window again to hand the leaders' result on.
// Every link between hosts then carries the message once per host, not once per rank.
#pragma once

#include "dist/comm/mpi/host_groups.h"
#include "dist/comm/mpi/shm_slots.h"
#include "dtrain/dist/comm/communicator.h"

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace dtrain::dist::mpi {

class ShmCollectives {
 public:
  // Collective over `comm`. `host`: the ranks of comm that share this host's memory (from
  // split_hosts). chunk_bytes (at least 8 per rank of a host) per buffer.
  ShmCollectives(MPI_Comm comm, MPI_Comm host, std::size_t chunk_bytes);
  ~ShmCollectives();
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  // Rank r's `out` (`block` elements) receives the reduction of every rank's block r of
  // `in` (size x block elements). op: Sum, Max or Min (a Mean runs as a Sum: the caller
  // divides). Every rank of comm on one host (throws otherwise).
  void reduce_scatter(const void* in, void* out, std::size_t block, DType dtype, ReduceOp op);
  // Block r of `out` (size x block_bytes) receives rank r's `in`, which may be this rank's
  // block of `out` itself.
  void all_gather(const void* in, void* out, std::size_t block_bytes);
  // Every rank's `data` receives the root's (a rank of comm).
  void broadcast(void* data, std::size_t bytes, int root);

 private:
  // Every host rank's block (`own`, at its comm rank's place in out) into everyone's out.
  void host_all_gather(std::byte* out, std::size_t block_bytes);
  // Leaders only: the other hosts' blocks into out.
  void leaders_all_gather(std::byte* out, std::size_t block_bytes);

  int rank_ = 0;       // in comm
  int host_rank_ = 0;  // in this host
  int host_size_ = 1;
  HostLayout layout_;
  MPI_Comm leaders_ = MPI_COMM_NULL;  // the hosts' first ranks, across hosts only
  std::unique_ptr<ShmSlots> slots_;   // null on a host of one rank
  std::vector<int> host_counts_;      // across hosts: each host's ranks
  std::vector<int> host_firsts_;      // and the place of its first block among all, host after host
  std::vector<std::byte> packed_;     // the leaders' all-gather, host by host
};

}  // namespace dtrain::dist::mpi
