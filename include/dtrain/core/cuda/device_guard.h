// Makes a CUDA device current for a scope and gives the thread its previous device back,
// so that a call on cuda:1 neither runs on nor leaves behind the wrong device for the
// caller's thread; a thread that had no device yet keeps this one (see
// cuda::restore_previous_device: restoring "device 0" would create a context there).
// For CUDA-built translation units only, like dtrain/core/cuda/check.h.
#pragma once

#include "dtrain/core/cuda/check.h"

namespace dtrain::cuda {

// Whether `device`'s primary context is active in this process (cuDevicePrimaryCtxGetState,
// reached through the runtime: dtrain does not link the driver library). False when the
// driver cannot say.
bool primary_context_active(int device);

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  // Restoring cannot fail for a device that had a context a moment ago; a destructor must
  // not throw in any case.
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace dtrain::cuda
