// Small pieces the CUDA reduction, softmax, indexing and random kernels share: launch
// sizes and per-call scratch memory from the backend's block cache.
#pragma once

#include "tensor/backend.h"
#include "tensor/cuda/strided_kernel.cuh"

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dtrain::detail::gpu {

// The smallest power of two >= n (1 for n <= 1), capped at `cap` (itself a power of two):
// the lane counts of the block-wide tree reductions, which halve down to one lane.
inline int pow2_at_least(std::int64_t n, int cap) {
  int p = 1;
  while (p < cap && p < n) p *= 2;
  return p;
}

// Blocks of kThreads for a grid-stride loop over n elements (n > 0).
inline unsigned blocks_for(std::int64_t n) {
  return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Device memory for the duration of one backend call, from the backend's cache. Giving it
// back when the call returns is safe while kernels that use it are still queued: every
// later user of the block queues behind them on the same stream (see cuda_backend.h).
class Scratch {
 public:
  Scratch(Backend& backend, std::size_t nbytes)
      : backend_(backend), nbytes_(nbytes), ptr_(backend.allocate(nbytes)) {}
  ~Scratch() { backend_.deallocate(ptr_, nbytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Backend& backend_;
  std::size_t nbytes_;
  void* ptr_;
};

}  // namespace dtrain::detail::gpu
