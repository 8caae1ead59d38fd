// Reduce-scatter, all-gather and broadcast through a shared-memory window (shm_slots.h)
// inside each host (CollectiveAlgorithm::SharedMemory). On one host a handshake through
// cache lines costs less than a message through the MPI library, which is where MPI's own
// collectives lose at small sizes. Per chunk:
// - reduce-scatter: each rank copies the pieces of its input that the others reduce into
//   its slot (rank j's piece at position j), then reduces its own piece, its input with
//   every other rank's copy, straight into its output. Each element is reduced on one rank
//   only, so the ranks' orders of combining need not agree.
// - all-gather: each rank copies its piece of its block into its slot, then copies every
//   other rank's piece out as soon as that rank has posted it.
// - broadcast: the root copies into its slot and the others copy out.
// Across hosts (all-gather and broadcast), the hierarchical scheme: the window inside each
// host, MPI's own collective among the hosts' first ranks (the leaders: MPI_Allgatherv of
// each host's blocks, MPI_Bcast), and the window again to hand the leaders' result on.
// Every link between hosts then carries the message once per host, not once per rank.
// Reduce-scatter across hosts (every host holding the same number of ranks, L) runs the
// other way round: the window first, where host rank l reduces over its host the blocks of
// every host's rank l (its "region", H blocks for H hosts), then the ring reduce-scatter
// (p2p_collectives.h) among the ranks of host rank l, one per host, which hands each its
// own block. A host's link then carries (H-1)/H of the message, against about all of it in
// a ring over every rank, and all of a host's ranks use the link at once. (Not
// MPI_Reduce_scatter_block there: Open MPI's takes 3x the ring's time from 4 MB up.)
#pragma once

#include "comm/mpi/transport/host_groups.h"
#include "comm/mpi/algorithms/p2p_collectives.h"
#include "comm/mpi/transport/shm_slots.h"
#include "dtrain/comm/communicator.h"

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
  // divides). Across hosts, every host must hold the same number of ranks (even_hosts();
  // throws otherwise, on every rank, before any step).
  void reduce_scatter(const void* in, void* out, std::size_t block, DType dtype, ReduceOp op);
  // Block r of `out` (size x block_bytes) receives rank r's `in`, which may be this rank's
  // block of `out` itself.
  void all_gather(const void* in, void* out, std::size_t block_bytes);
  // Every rank's `data` receives the root's (a rank of comm).
  void broadcast(void* data, std::size_t bytes, int root);

  // Every host holds the same number of ranks (reduce_scatter's condition across hosts).
  bool even_hosts() const { return peers_ != MPI_COMM_NULL || layout_.members.size() == 1; }

 private:
  // Inside this host: `region` (hosts x block elements) receives the reduction over the
  // host's ranks of this rank's region of `in` (see copy_region).
  void host_reduce_scatter(const std::byte* in, std::byte* region, std::size_t block, DType dtype, ReduceOp op);
  // Elements [from, from + len) of host rank j's region of `in` into `to`: element e of it
  // is in block members[e / block][j], so the region holds every host's rank j's block.
  void copy_region(const std::byte* in, int j, std::size_t from, std::size_t len, std::size_t block, std::size_t esize,
                   std::byte* to) const;
  // Every host rank's block (`own`, at its comm rank's place in out) into everyone's out.
  void host_all_gather(std::byte* out, std::size_t block_bytes);
  // Leaders only: the other hosts' blocks into out.
  void leaders_all_gather(std::byte* out, std::size_t block_bytes);

  int rank_ = 0;       // in comm
  int host_rank_ = 0;  // in this host
  int host_size_ = 1;
  HostLayout layout_;
  MPI_Comm leaders_ = MPI_COMM_NULL;           // the hosts' first ranks, across hosts only
  MPI_Comm peers_ = MPI_COMM_NULL;             // the ranks of this host rank, one per host in host order,
                                               // across hosts of equal size only
  std::unique_ptr<P2pCollectives> peer_ring_;  // over peers_
  std::unique_ptr<ShmSlots> slots_;            // null on a host of one rank
  std::vector<int> host_counts_;               // across hosts: each host's ranks
  std::vector<int> host_firsts_;               // and the place of its first block among all, host after host
  std::vector<std::byte> packed_;              // the leaders' all-gather, host by host
  std::vector<std::byte> region_;              // reduce_scatter across hosts: this host's sum of the region
};

}  // namespace dtrain::dist::mpi
