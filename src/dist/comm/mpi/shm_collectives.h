// Reduce-scatter, all-gather and broadcast through a shared-memory window (shm_slots.h),
// for a communicator whose ranks all share one host (CollectiveAlgorithm::SharedMemory).
// On one host a handshake through cache lines costs less than a message through the MPI
// library, which is where MPI's own collectives lose at small sizes. Per chunk:
// - reduce-scatter: each rank copies the pieces of its input that the others reduce into
//   its slot (rank j's piece at position j), then reduces its own piece, its input with
//   every other rank's copy, straight into its output. Each element is reduced on one rank
//   only, so the ranks' orders of combining need not agree.
// - all-gather: each rank copies its piece of its block into its slot, then copies every
//   other rank's piece out as soon as that rank has posted it.
// - broadcast: the root copies into its slot and the others copy out.
#pragma once

#include "dist/comm/mpi/shm_slots.h"
#include "dtrain/dist/comm/communicator.h"

#include <mpi.h>

#include <cstddef>
#include <memory>

namespace dtrain::dist::mpi {

class ShmCollectives {
 public:
  // Collective over `host`: ranks that share memory, numbered as in the communicator the
  // caller serves (the whole of it). chunk_bytes (at least 64) per buffer.
  ShmCollectives(MPI_Comm host, std::size_t chunk_bytes);

  // Rank r's `out` (`block` elements) receives the reduction of every rank's block r of
  // `in` (size x block elements). op: Sum, Max or Min (a Mean runs as a Sum: the caller
  // divides).
  void reduce_scatter(const void* in, void* out, std::size_t block, DType dtype, ReduceOp op);
  // Block r of `out` (size x block_bytes) receives rank r's `in`, which may be this rank's
  // block of `out` itself.
  void all_gather(const void* in, void* out, std::size_t block_bytes);
  // Every rank's `data` receives the root's.
  void broadcast(void* data, std::size_t bytes, int root);

 private:
  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<ShmSlots> slots_;  // null with one rank
};

}  // namespace dtrain::dist::mpi
