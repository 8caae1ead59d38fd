#include "comm/mpi/transport/shm_slots.h"

#include "comm/backoff.h"
#include "comm/mpi/transport/mpi_runtime.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

namespace dtrain::dist::mpi {
namespace {
// A slot starts with its counters, padded so that the chunk buffers stay page-aligned.
constexpr std::size_t kHeaderBytes = 4096;

// One cache line per counter, so writers never share a line. Padded rather than
// alignas(64): MPI only guarantees 8-byte alignment for the window, and an 8-byte
// counter at an 8-byte-aligned address never straddles a line.
struct CounterLine {
  std::uint64_t value = 0;
  std::byte pad[56] = {};
};
static_assert(sizeof(CounterLine) == 64 && alignof(CounterLine) == 8);
struct Header {
  CounterLine counters[ShmSlots::kCounters];
};
static_assert(sizeof(Header) <= kHeaderBytes);

std::atomic_ref<std::uint64_t> counter(std::byte* slot, int c) {
  return std::atomic_ref<std::uint64_t>(reinterpret_cast<Header*>(slot)->counters[c].value);
}
}  // namespace

ShmSlots::ShmSlots(MPI_Comm host, std::size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  DTRAIN_CHECK(chunk_bytes >= 64, "shared-memory collectives: chunks of {} bytes are too small", chunk_bytes);
  check(MPI_Comm_dup(host, &host_), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(host_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_Comm_rank(host_, &rank_);
  MPI_Comm_size(host_, &size_);

  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each slot in memory local to its owner
  void* mine = nullptr;
  int rc =
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(kHeaderBytes + 2 * chunk_bytes_), 1, info, host_, &mine, &window_);
  MPI_Info_free(&info);
  check(rc, "MPI_Win_allocate_shared");
  check(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN), "MPI_Win_set_errhandler");
  slots_.resize(static_cast<std::size_t>(size_));
  for (int q = 0; q < size_; ++q) {
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    check(MPI_Win_shared_query(window_, q, &bytes, &unit, &base), "MPI_Win_shared_query");
    slots_[static_cast<std::size_t>(q)] = static_cast<std::byte*>(base);
  }
  new (mine) Header{};
  check(MPI_Barrier(host_), "MPI_Barrier");  // every header is zero before anyone polls one
}

ShmSlots::~ShmSlots() {
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
  MPI_Comm_free(&host_);
}

std::uint64_t ShmSlots::begin_chunk(std::size_t step_bytes, bool writes) {
  const std::uint64_t g = ++generation_;
  if (writes && g > 2) wait_for(kFinished, g - 2, step_bytes);
  return g;
}

std::byte* ShmSlots::buffer(int rank, std::uint64_t generation) const {
  return slots_[static_cast<std::size_t>(rank)] + kHeaderBytes + (generation % 2) * chunk_bytes_;
}

void ShmSlots::wait_for(Counter c, std::uint64_t generation, std::size_t step_bytes, int rank) const {
  auto reached = [&] {
    for (int q = 0; q < size_; ++q) {
      if (q == rank_ || (rank >= 0 && q != rank)) continue;
      if (counter(slots_[static_cast<std::size_t>(q)], c).load(std::memory_order_acquire) < generation) return false;
    }
    return true;
  };
  wait_with_backoff(reached, spin_for(step_bytes));
}

void ShmSlots::publish(Counter c, std::uint64_t generation) const {
  counter(slots_[static_cast<std::size_t>(rank_)], c).store(generation, std::memory_order_release);
}

void ShmSlots::broadcast(std::byte* data, std::size_t bytes, int root) {
  for (std::size_t offset = 0; offset < bytes; offset += chunk_bytes_) {
    const std::size_t len = std::min(chunk_bytes_, bytes - offset);
    const std::uint64_t g = begin_chunk(len, rank_ == root);  // only the root writes its buffer
    if (rank_ == root) {
      std::memcpy(buffer(root, g), data + offset, len);
      publish(kPosted, g);
    } else {
      wait_for(kPosted, g, len, root);
      std::memcpy(data + offset, buffer(root, g), len);
    }
    publish(kFinished, g);
  }
}

}  // namespace dtrain::dist::mpi
