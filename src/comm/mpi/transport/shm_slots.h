// The shared-memory window behind the one-host algorithms (shm_allreduce.h,
// shm_collectives.h): one slot per rank of a host, each holding a few counters and two
// chunk buffers (double buffering, so that a rank can fill chunk k+1 while slower ranks
// still read chunk k).
//
// The ranks step through generations together (one per chunk, the same count on every
// rank of the host) and synchronize through the counters: release stores, acquire loads,
// waited on with a Backoff, so that a small message costs a few cache-line handshakes and
// no call into the MPI library.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrain::dist::mpi {

class ShmSlots {
 public:
  // The counters in each slot: the last generation for which its rank has posted its
  // data, written its reduced slice, and finished reading the other slots.
  enum Counter : int { kPosted, kReduced, kFinished, kCounters };
  // Reductions over the slots run in blocks this size, which stay in L1 while every rank's
  // copy is combined in.
  static constexpr std::size_t kReduceBlockBytes = 16 << 10;

  // Collective over `host` (at least two ranks that share memory); keeps a duplicate of it.
  // chunk_bytes (at least 64) per buffer.
  ShmSlots(MPI_Comm host, std::size_t chunk_bytes);
  ~ShmSlots();
  ShmSlots(const ShmSlots&) = delete;
  ShmSlots& operator=(const ShmSlots&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t chunk_bytes() const { return chunk_bytes_; }

  // Starts the next chunk and returns its generation. A rank that will write its buffer
  // (`writes`) first waits until every rank has finished reading the chunk that last used
  // it (two generations ago). `step_bytes`: about what the peers copy meanwhile.
  std::uint64_t begin_chunk(std::size_t step_bytes, bool writes = true);
  // Rank `rank`'s buffer for `generation`.
  std::byte* buffer(int rank, std::uint64_t generation) const;
  // Waits until counter c of every other rank (or of `rank` alone) reaches generation; the
  // peers are busy with about `step_bytes` of copying (see spin_for).
  void wait_for(Counter c, std::uint64_t generation, std::size_t step_bytes, int rank = -1) const;
  void publish(Counter c, std::uint64_t generation) const;

  // Every rank's `data` (bytes) receives rank `root`'s, chunk by chunk through root's slot:
  // the root copies in, the others copy out. Every rank of the host calls it alike.
  void broadcast(std::byte* data, std::size_t bytes, int root);

 private:
  std::size_t chunk_bytes_;
  MPI_Comm host_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<std::byte*> slots_;  // each rank's slot in this process's address space
  std::uint64_t generation_ = 0;   // chunks begun; the same on every rank of the host
};

}  // namespace dtrain::dist::mpi
