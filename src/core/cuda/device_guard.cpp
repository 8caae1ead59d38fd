#include "dtrain/core/cuda/device_guard.h"

#include "core/device_restore.h"

#include <cuda.h>

namespace dtrain::cuda {

bool primary_context_active(int device) {
  using GetState = CUresult (*)(CUdevice, unsigned int*, int*);
  static const GetState get_state = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t status = cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &fn, cudaEnableDefault, &found);
#endif
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return GetState{nullptr};
    }
    return reinterpret_cast<GetState>(fn);
  }();
  unsigned int flags = 0;
  int active = 0;
  return get_state != nullptr && get_state(device, &flags, &active) == CUDA_SUCCESS && active != 0;
}

DeviceGuard::DeviceGuard(int device) {
  DTRAIN_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ == device) return;
  restore_ = restore_previous_device(previous_, device, primary_context_active(previous_));
  DTRAIN_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  if (restore_) cudaSetDevice(previous_);
}

}  // namespace dtrain::cuda
