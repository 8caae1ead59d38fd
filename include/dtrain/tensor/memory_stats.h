// How much memory a device's tensors hold, like torch.cuda.memory_allocated and
// max_memory_allocated: for sizing activations, e.g. a pipeline stage's peak.
//
// What counts: every block served by the device's block cache, that is tensor storage and
// the library's internal buffers (oneDNN scratchpads, convolution workspaces, kernel
// scratch; on a GPU also the cuBLAS workspace, held from the first matmul on), each at its
// rounded block size (a multiple of 64 bytes, or of 4 KiB above 64 KiB), so a count is at
// least the bytes asked for. Page-locked host memory (non_blocking uploads) is not
// counted. On the CPU the cache is process-wide: the counts are all threads' together.
#pragma once

#include "dtrain/core/device.h"

#include <cstddef>

namespace dtrain {

struct MemoryStats {
  std::size_t in_use_bytes = 0;  // held by live blocks now
  std::size_t peak_bytes = 0;    // the most in use since the start or reset_peak_memory()
  std::size_t cached_bytes = 0;  // freed blocks the cache keeps for reuse (not in use)
};

// Throws for a CUDA device that this build or machine lacks.
MemoryStats memory_stats(Device device);

// Starts a new high-water mark: peak_bytes becomes in_use_bytes.
void reset_peak_memory(Device device);

}  // namespace dtrain
