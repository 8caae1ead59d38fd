// The queue on which a device's tensor ops run, for code that orders its own GPU work with
// them (the NCCL communicator; uploads that overlap compute). Every op of one CUDA device
// is queued on its one stream, in the order the host issues it.
#pragma once

#include "dtrain/core/device.h"

namespace dtrain {

// The device's cudaStream_t, as void* so that this header needs no CUDA headers; nullptr
// for the CPU, whose ops are done when they return. Throws for a CUDA device that this
// build or machine lacks.
void* device_stream(Device device);

// Blocks until every op queued on the device so far is done (for timing, and before the
// host touches memory another library filled). A no-op for the CPU.
void synchronize(Device device);

}  // namespace dtrain
