#include "dtrain/core/cuda/check.h"

#include "dtrain/core/error.h"

namespace dtrain::cuda {
namespace {

// The errors after which the CUDA context is unusable: every later call in this process
// fails with the same error (CUDA runtime API documentation, "sticky" errors).
bool is_sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

}  // namespace

void throw_error(cudaError_t status, const char* call, std::source_location where) {
  cudaGetLastError();
  throw Error(fmt::format("cuda: {} failed: {} ({}): {}{}", call, cudaGetErrorName(status), static_cast<int>(status),
                          cudaGetErrorString(status),
                          is_sticky(status) ? "; the CUDA context is unusable, restart the process" : ""),
              where);
}

}  // namespace dtrain::cuda
