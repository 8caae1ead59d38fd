// A cache of freed memory blocks, keyed by rounded size, for any device: the backend
// passes the system's allocate/free functions. A training step allocates the same
// activation and gradient sizes every time; handing back last step's blocks avoids, on
// the CPU, the page faults of fresh memory (glibc returns large blocks to the kernel on
// free, and touching a fresh 16 MB block costs ~6 ms of faults here) and, on a GPU, the
// device-wide synchronisation of cudaMalloc/cudaFree. Freed blocks beyond `limit` bytes
// go back to the system. It also counts the bytes it has handed out (by rounded size) and
// their peak, for memory_stats() (dtrain/tensor/memory_stats.h).
#pragma once

#include "dtrain/tensor/memory_stats.h"

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dtrain::detail {

class CachingAllocator {
 public:
  using AllocFn = void* (*)(std::size_t bytes);  // nullptr when out of memory
  using FreeFn = void (*)(void* ptr);

  CachingAllocator(std::size_t limit, AllocFn alloc, FreeFn free) : limit_(limit), alloc_(alloc), free_(free) {}
  ~CachingAllocator() { release(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The block size a request is served with: sizes repeat exactly from step to step, so a
  // fine granularity wastes little and still lets nearby sizes share blocks.
  static std::size_t rounded(std::size_t bytes);

  // nullptr when the system is out of memory even after the cache was released.
  void* allocate(std::size_t bytes);
  void deallocate(void* ptr, std::size_t bytes);
  // Returns every cached block to the system.
  void release();
  std::size_t cached_bytes() const;
  MemoryStats stats() const;
  // Starts a new high-water mark from the bytes in use now.
  void reset_peak();

 private:
  std::size_t limit_;
  AllocFn alloc_;
  FreeFn free_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks_;  // by rounded size
  std::size_t cached_ = 0;
  std::size_t in_use_ = 0;  // handed out, by rounded size
  std::size_t peak_ = 0;    // the most in_use_ since construction or reset_peak()
  void count_in_use(std::size_t size);  // mutex_ held
};

}  // namespace dtrain::detail
