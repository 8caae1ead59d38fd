// Makes a CUDA device current for a scope and restores the previous one, so that a call
// on cuda:1 neither runs on nor leaves behind the wrong device for the caller's thread.
// For CUDA-built translation units only, like dtrain/core/cuda/check.h.
#pragma once

#include "dtrain/core/cuda/check.h"

namespace dtrain::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    DTRAIN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      DTRAIN_CUDA_CHECK(cudaSetDevice(device));
      changed_ = true;
    }
  }
  // Restoring cannot fail for a device that was current a moment ago; a destructor must
  // not throw in any case.
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace dtrain::cuda
