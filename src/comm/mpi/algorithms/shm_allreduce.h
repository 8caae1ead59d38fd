// All-reduce through an MPI-3 shared-memory window (shm_slots.h), for ranks on one host,
// with a hierarchical scheme across hosts.
//
// On one host, per chunk, rank r copies the slices of its input that the others reduce
// into its slot, reduces slice r of every rank's input into its tensor and into its slot,
// and copies the other reduced slices out of their owners' slots. No step goes through the
// MPI library.
//
// Across hosts: the shared-memory all-reduce inside each host, an all-reduce among the
// hosts' first ranks (the leaders: any flat algorithm, the caller's choice), and a
// shared-memory broadcast from each leader.
#pragma once

#include "comm/mpi/algorithms/flat_allreduce.h"
#include "comm/mpi/transport/shm_slots.h"

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::dist::mpi {

class ShmAllReduce {
 public:
  // Collective over `comm`. `host` groups the ranks that share memory (a sub-communicator
  // of comm, normally from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)). chunk_bytes (at
  // least 64) per buffer; each rank's slot holds two.
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
  void reduce_slice(std::byte* chunk, std::size_t chunk_count, std::uint64_t generation, DType dtype,
                    ReduceOp op) const;
  void host_all_reduce(std::byte* data, std::size_t count, DType dtype, ReduceOp op);

  int host_rank_ = 0;
  int host_size_ = 1;
  int world_size_ = 1;                    // ranks of comm, on every host
  std::unique_ptr<ShmSlots> slots_;       // null on a host of one rank
  std::unique_ptr<FlatAllReduce> hosts_;  // the leaders' algorithms; null on other ranks and on one host
  MPI_Comm leaders_ = MPI_COMM_NULL;
  bool multi_host_ = false;
};

}  // namespace dtrain::dist::mpi
