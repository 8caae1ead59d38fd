// The rule by which a cuda::DeviceGuard gives the thread its device back, apart from the
// CUDA calls so that it is tested without a device (tests/core).
#pragma once

namespace dtrain::cuda {

// Whether a guard that made `device` current restores `previous` when it ends: only when
// they differ and `previous` already has a context. cudaGetDevice reports device 0 on a
// thread where nothing was made current, and since CUDA 12 cudaSetDevice creates the
// device's primary context: restoring device 0 there would leave a stray context (about
// 0.5 GB) on GPU 0 in every process of a node, and fail where GPUs are in exclusive-process
// mode. Left unrestored, the thread keeps the device it just used.
constexpr bool restore_previous_device(int previous, int device, bool previous_has_context) {
  return previous != device && previous_has_context;
}

}  // namespace dtrain::cuda
