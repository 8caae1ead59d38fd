#include "dtrain/tensor/memory_stats.h"

#include "tensor/backend.h"

namespace dtrain {

MemoryStats memory_stats(Device device) { return detail::backend(device).memory_stats(); }

void reset_peak_memory(Device device) { detail::backend(device).reset_peak_memory(); }

}  // namespace dtrain
