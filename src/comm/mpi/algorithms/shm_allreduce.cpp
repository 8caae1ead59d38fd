#include "comm/mpi/algorithms/shm_allreduce.h"

#include "comm/mpi/transport/mpi_runtime.h"
#include "dtrain/comm/partition.h"
#include "comm/reduce_kernels.h"

#include <algorithm>
#include <cstring>

namespace dtrain::dist::mpi {

ShmAllReduce::ShmAllReduce(MPI_Comm comm, MPI_Comm host, std::size_t chunk_bytes) {
  MPI_Comm_rank(host, &host_rank_);
  MPI_Comm_size(host, &host_size_);
  MPI_Comm_size(comm, &world_size_);
  // Host groups partition comm, so either every group is all of comm or none is.
  multi_host_ = host_size_ < world_size_;
  if (multi_host_) {
    check(MPI_Comm_split(comm, host_rank_ == 0 ? 0 : MPI_UNDEFINED, 0, &leaders_), "MPI_Comm_split");
    if (leaders_ != MPI_COMM_NULL) hosts_ = std::make_unique<FlatAllReduce>(leaders_);
  }
  if (host_size_ > 1) slots_ = std::make_unique<ShmSlots>(host, chunk_bytes);
}

ShmAllReduce::~ShmAllReduce() {
  slots_.reset();
  hosts_.reset();
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
}

void ShmAllReduce::run(void* data, std::size_t count, DType dtype, ReduceOp op, AllReduceAlgorithm leaders) {
  auto* bytes = static_cast<std::byte*>(data);
  if (host_size_ > 1) host_all_reduce(bytes, count, dtype, op);
  if (!multi_host_) return;                                  // an average was divided in reduce_slice
  if (hosts_) hosts_->run(leaders, data, count, dtype, op);  // a Mean runs as a Sum, divided below
  if (slots_) slots_->broadcast(bytes, count * dtype_size(dtype), 0);
  if (op == ReduceOp::Mean) divide(data, count, dtype, world_size_);
}

void ShmAllReduce::host_all_reduce(std::byte* data, std::size_t count, DType dtype, ReduceOp op) {
  ShmSlots& slots = *slots_;
  const std::size_t esize = dtype_size(dtype);
  const std::size_t chunk = slots.chunk_bytes() / esize;
  const int n = host_size_;
  for (std::size_t offset = 0; offset < count; offset += chunk) {
    const std::size_t m = std::min(chunk, count - offset);
    const std::size_t step = m * esize;
    const std::uint64_t g = slots.begin_chunk(step);
    std::byte* in = data + offset * esize;
    std::byte* mine = slots.buffer(host_rank_, g);
    for (int j = 0; j < n; ++j) {
      if (j == host_rank_) continue;
      Range s = slice(m, j, n);
      std::memcpy(mine + s.begin * esize, in + s.begin * esize, s.size() * esize);
    }
    slots.publish(ShmSlots::kPosted, g);
    slots.wait_for(ShmSlots::kPosted, g, step);
    reduce_slice(in, m, g, dtype, op);
    slots.publish(ShmSlots::kReduced, g);
    for (int q = 0; q < n; ++q) {
      if (q == host_rank_) continue;
      slots.wait_for(ShmSlots::kReduced, g, step, q);
      Range s = slice(m, q, n);
      std::memcpy(in + s.begin * esize, slots.buffer(q, g) + s.begin * esize, s.size() * esize);
    }
    slots.publish(ShmSlots::kFinished, g);
  }
}

// Reduces this rank's slice of the chunk: its own input (in place in the tensor) with the
// other ranks' copies of that slice, and copies the result to its slot for the others.
void ShmAllReduce::reduce_slice(std::byte* chunk, std::size_t chunk_count, std::uint64_t generation, DType dtype,
                                ReduceOp op) const {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block = ShmSlots::kReduceBlockBytes / esize;
  const Range s = slice(chunk_count, host_rank_, host_size_);
  std::byte* mine = slots_->buffer(host_rank_, generation);
  for (std::size_t b = s.begin; b < s.end; b += block) {
    const std::size_t len = std::min(block, s.end - b);
    std::byte* acc = chunk + b * esize;
    for (int q = 0; q < host_size_; ++q) {
      if (q != host_rank_) combine(acc, acc, slots_->buffer(q, generation) + b * esize, len, dtype, op);
    }
    // One host: this sum is final, so average it here, in cache. Across hosts the host
    // leaders still have to add the other hosts' sums: run() divides at the end.
    if (op == ReduceOp::Mean && !multi_host_) divide(acc, len, dtype, host_size_);
    std::memcpy(mine + b * esize, acc, len * esize);
  }
}

}  // namespace dtrain::dist::mpi
