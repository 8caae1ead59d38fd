#include "dist/comm/mpi/shm_allreduce.h"

#include "dist/comm/backoff.h"
#include "dist/comm/mpi/mpi_runtime.h"
#include "dist/comm/partition.h"
#include "dist/comm/reduce_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

namespace dtrain::dist::mpi {
namespace {
// A slot starts with its counters, padded so that the chunk buffers stay page-aligned.
constexpr std::size_t kHeaderBytes = 4096;
// The reduction runs in blocks that stay in L1 between the combine and the copy to the slot.
constexpr std::size_t kBlockBytes = 16 << 10;

// One cache line per counter, so writers never share a line. Padded rather than
// alignas(64): MPI only guarantees 8-byte alignment for the window, and an 8-byte
// counter at an 8-byte-aligned address never straddles a line.
struct CounterLine {
  std::uint64_t value = 0;
  std::byte pad[56] = {};
};
static_assert(sizeof(CounterLine) == 64 && alignof(CounterLine) == 8);
struct Header {
  CounterLine counters[3];
};
static_assert(sizeof(Header) <= kHeaderBytes);
}  // namespace

ShmAllReduce::ShmAllReduce(MPI_Comm comm, MPI_Comm host, std::size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  DTRAIN_CHECK(chunk_bytes >= 64, "shared-memory all-reduce: chunks of {} bytes are too small", chunk_bytes);
  check(MPI_Comm_dup(host, &host_), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(host_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(host_, &host_rank_);
  MPI_Comm_size(host_, &host_size_);
  int size = 0;
  MPI_Comm_size(comm, &size);
  // Host groups partition comm, so either every group is all of comm or none is.
  multi_host_ = host_size_ < size;
  world_size_ = size;
  if (multi_host_) {
    check(MPI_Comm_split(comm, host_rank_ == 0 ? 0 : MPI_UNDEFINED, 0, &leaders_), "MPI_Comm_split");
    if (leaders_ != MPI_COMM_NULL) hosts_ = std::make_unique<FlatAllReduce>(leaders_);
  }
  if (host_size_ == 1) return;

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each slot in memory local to its owner
  void* mine = nullptr;
  int rc =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(kHeaderBytes + 2 * chunk_bytes_), 1, info, host_, &mine, &window_);
  MPI_Info_free(&info);
  check(rc, "MPI_Win_allocate_shared");
  check(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  slots_.resize(static_cast<std::size_t>(host_size_));
  for (int q = 0; q < host_size_; ++q) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    check(MPI_Win_shared_query(window_, q, &bytes, &unit, &base), "MPI_Win_shared_query");
    slots_[static_cast<std::size_t>(q)] = static_cast<std::byte*>(base);
  }
  new (mine) Header{};
  check(MPI_Barrier(host_), "MPI_Barrier");  // every header is zero before anyone polls one
}

ShmAllReduce::~ShmAllReduce() {
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
  hosts_.reset();
  if (leaders_ != MPI_COMM_NULL) MPI_Comm_free(&leaders_);
  MPI_Comm_free(&host_);
}

std::byte* ShmAllReduce::buffer(int host_rank, std::uint64_t generation) const {
  return slots_[static_cast<std::size_t>(host_rank)] + kHeaderBytes + (generation % 2) * chunk_bytes_;
}

namespace {
std::atomic_ref<std::uint64_t> counter(std::byte* slot, int c) {
  return std::atomic_ref<std::uint64_t>(reinterpret_cast<Header*>(slot)->counters[c].value);
}
}  // namespace

void ShmAllReduce::wait_for(Counter c, std::uint64_t generation, std::size_t step_bytes, int rank) const {
  auto reached = [&] {
    for (int q = 0; q < host_size_; ++q) {
      if (q == host_rank_ || (rank >= 0 && q != rank)) continue;
      if (counter(slots_[static_cast<std::size_t>(q)], c).load(std::memory_order_acquire) < generation) return false;
    }
    return true;
  };
  wait_with_backoff(reached, spin_for(step_bytes));
}

void ShmAllReduce::publish(Counter c, std::uint64_t generation) const {
  counter(slots_[static_cast<std::size_t>(host_rank_)], c).store(generation, std::memory_order_release);
}

void ShmAllReduce::run(void* data, std::size_t count, DType dtype, ReduceOp op, AllReduceAlgorithm leaders) {
  auto* bytes = static_cast<std::byte*>(data);
  if (host_size_ > 1) host_all_reduce(bytes, count, dtype, op);
  if (!multi_host_) return;                                  // an average was divided in reduce_slice
  if (hosts_) hosts_->run(leaders, data, count, dtype, op);  // a Mean runs as a Sum, divided below
  if (host_size_ > 1) host_broadcast(bytes, count * dtype_size(dtype));
  if (op == ReduceOp::Mean) divide(data, count, dtype, world_size_);
}

void ShmAllReduce::host_all_reduce(std::byte* data, std::size_t count, DType dtype, ReduceOp op) {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t chunk = chunk_bytes_ / esize;
  const int n = host_size_;
  for (std::size_t offset = 0; offset < count; offset += chunk) {
    const std::size_t m = std::min(chunk, count - offset);
    const std::uint64_t g = ++generation_;
    std::byte* in = data + offset * esize;
    std::byte* mine = buffer(host_rank_, g);
    const std::size_t step = m * esize;
    if (g > 2) wait_for(kFinished, g - 2, step);  // everyone is done with this buffer's last chunk
    for (int j = 0; j < n; ++j) {
      if (j == host_rank_) continue;
      Range s = slice(m, j, n);
      std::memcpy(mine + s.begin * esize, in + s.begin * esize, s.size() * esize);
    }
    publish(kPosted, g);
    wait_for(kPosted, g, step);
    reduce_slice(in, m, g, dtype, op);
    publish(kReduced, g);
    for (int q = 0; q < n; ++q) {
      if (q == host_rank_) continue;
      wait_for(kReduced, g, step, q);
      Range s = slice(m, q, n);
      std::memcpy(in + s.begin * esize, buffer(q, g) + s.begin * esize, s.size() * esize);
    }
    publish(kFinished, g);
  }
}

// Reduces this rank's slice of the chunk: its own input (in place in the tensor) with the
// other ranks' copies of that slice, and copies the result to its slot for the others.
void ShmAllReduce::reduce_slice(std::byte* chunk, std::size_t chunk_count, std::uint64_t generation, DType dtype,
                                ReduceOp op) const {
  const std::size_t esize = dtype_size(dtype);
  const std::size_t block = kBlockBytes / esize;
  const Range s = slice(chunk_count, host_rank_, host_size_);
  std::byte* mine = buffer(host_rank_, generation);
  for (std::size_t b = s.begin; b < s.end; b += block) {
    const std::size_t len = std::min(block, s.end - b);
    std::byte* acc = chunk + b * esize;
    for (int q = 0; q < host_size_; ++q) {
      if (q != host_rank_) combine(acc, acc, buffer(q, generation) + b * esize, len, dtype, op);
    }
    // One host: this sum is final, so average it here, in cache. Across hosts the host
    // leaders still have to add the other hosts' sums: run() divides at the end.
    if (op == ReduceOp::Mean && !multi_host_) divide(acc, len, dtype, host_size_);
    std::memcpy(mine + b * esize, acc, len * esize);
  }
}

void ShmAllReduce::host_broadcast(std::byte* data, std::size_t bytes) {
  for (std::size_t offset = 0; offset < bytes; offset += chunk_bytes_) {
    const std::size_t len = std::min(chunk_bytes_, bytes - offset);
    const std::uint64_t g = ++generation_;
    if (host_rank_ == 0) {
      if (g > 2) wait_for(kFinished, g - 2, len);
      std::memcpy(buffer(0, g), data + offset, len);
      publish(kPosted, g);
    } else {
      wait_for(kPosted, g, len, 0);
      std::memcpy(data + offset, buffer(0, g), len);
    }
    publish(kFinished, g);
  }
}

}  // namespace dtrain::dist::mpi
