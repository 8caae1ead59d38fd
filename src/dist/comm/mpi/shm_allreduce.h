// All-reduce through an MPI-3 shared-memory window, for ranks on one host, with a
// hierarchical scheme across hosts.
//
// On one host each rank owns a slot of the window: a few flags and two chunk buffers
// (double buffering, so a rank can fill chunk k+1 while slower ranks still read chunk k).
// Per chunk, rank r copies the slices of its input that the others reduce into its slot,
// reduces slice r of every rank's input into its tensor and into its slot, and copies the
// other reduced slices out of their owners' slots. No step goes through the MPI library:
// ranks synchronize through generation counters in the slots (each chunk is one
// generation; release stores, acquire loads), waited on with a Backoff, so a small
// message costs a few cache-line handshakes.
//
// Across hosts: the shared-memory all-reduce inside each host, an all-reduce among the
// hosts' first ranks (the leaders: any flat algorithm, the caller's choice), and a
// shared-memory broadcast from each leader.
#pragma once

#include "dist/comm/mpi/flat_allreduce.h"

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::dist::mpi {

class ShmAllReduce {
 public:
  // Collective over `comm`. `host` groups the ranks that share memory (a sub-communicator
  // of comm, normally from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)); the object keeps a
  // duplicate of it. chunk_bytes (at least 64) per buffer; each rank's slot holds two.
  ShmAllReduce(MPI_Comm comm, MPI_Comm host, std::size_t chunk_bytes);
  ~ShmAllReduce();
  ShmAllReduce(const ShmAllReduce&) = delete;
  ShmAllReduce& operator=(const ShmAllReduce&) = delete;

  // In place over `count` elements; op is Sum, Mean, Max or Min. On one host each rank
  // divides its own reduced slice while it is still in cache, so an average costs no
  // extra pass over the data. Across hosts the leaders run `leaders` (Mpi, Ring,
  // RecursiveDoubling or Rabenseifner; the same on every rank).
  void run(void* data, std::size_t count, DType dtype, ReduceOp op,
           AllReduceAlgorithm leaders = AllReduceAlgorithm::Ring);

 private:
  // The counters in each slot: the last generation for which its rank has posted its
  // input slices, written its reduced slice, and finished reading the other slots.
  enum Counter : int { kPosted, kReduced, kFinished, kCounters };
  std::byte* buffer(int host_rank, std::uint64_t generation) const;
  // Waits until counter c of every other host rank (or only of `rank`) reaches generation;
  // the peers are busy with about `step_bytes` of copying (see spin_for).
  void wait_for(Counter c, std::uint64_t generation, std::size_t step_bytes, int rank = -1) const;
  void publish(Counter c, std::uint64_t generation) const;
  void reduce_slice(std::byte* chunk, std::size_t chunk_count, std::uint64_t generation, DType dtype,
                    ReduceOp op) const;
  void host_all_reduce(std::byte* data, std::size_t count, DType dtype, ReduceOp op);
  void host_broadcast(std::byte* data, std::size_t bytes);

  std::size_t chunk_bytes_;
  MPI_Comm host_ = MPI_COMM_NULL;
  int host_rank_ = 0;
  int host_size_ = 1;
  int world_size_ = 1;  // ranks of comm, on every host
  MPI_Win window_ = MPI_WIN_NULL;
  std::vector<std::byte*> slots_;         // each host rank's slot in this process's address space
  std::uint64_t generation_ = 0;          // chunks processed; the same on every rank of the host
  std::unique_ptr<FlatAllReduce> hosts_;  // the leaders' algorithms; null on other ranks and on one host
  MPI_Comm leaders_ = MPI_COMM_NULL;
  bool multi_host_ = false;
};

}  // namespace dtrain::dist::mpi
