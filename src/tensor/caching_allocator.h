// A cache of freed memory blocks, keyed by rounded size, for any device: the backend
// passes the system's allocate/free functions. A training step allocates the same
// activation and gradient sizes every time; handing back last step's blocks avoids, on
// the CPU, the page faults of fresh memory (glibc returns large blocks to the kernel on
// free, and touching a fresh 16 MB block costs ~6 ms of faults here) and, on a GPU, the
// device-wide synchronisation of cudaMalloc/cudaFree. Freed blocks beyond `limit` bytes
// go back to the system.
#pragma once

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

 private:
  std::size_t limit_;
  AllocFn alloc_;
  FreeFn free_;
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_blocks_;  // by rounded size
  std::size_t cached_ = 0;
};

}  // namespace dtrain::detail
