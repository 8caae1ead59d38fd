// DTRAIN_CUDA_CHECK(call): every CUDA runtime status becomes a dtrain::Error naming the
// call, the error's name and code and the runtime's message; nothing exits.
// For CUDA-built translation units only (the files under cuda/ folders): it includes the
// CUDA runtime's headers, which a CPU-only build or consumer does not have, and so is not
// in dtrain/dtrain.h. A consumer that includes it links CUDA::cudart itself.
#pragma once

#include <cuda_runtime_api.h>

#include <source_location>

namespace dtrain::cuda {

// Throws the dtrain::Error for a failed `call`. Clears the runtime's last-error slot first,
// so that a later, unrelated cudaGetLastError() does not report this error again; an error
// that corrupts the context (an illegal address in a kernel, say) cannot be cleared, and
// the message then says that the process must restart.
[[noreturn]] void throw_error(cudaError_t status, const char* call,
                              std::source_location where = std::source_location::current());

}  // namespace dtrain::cuda

#define DTRAIN_CUDA_CHECK(call)                                                  \
  do {                                                                           \
    const cudaError_t dtrain_cuda_status_ = (call);                              \
    if (dtrain_cuda_status_ != cudaSuccess) [[unlikely]] {                       \
      ::dtrain::cuda::throw_error(dtrain_cuda_status_, #call);                   \
    }                                                                            \
  } while (0)
