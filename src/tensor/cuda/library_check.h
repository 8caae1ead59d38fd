// DTRAIN_CUBLAS_CHECK(call) and DTRAIN_CUDNN_CHECK(call): the cuBLAS and cuDNN
// counterparts of DTRAIN_CUDA_CHECK (dtrain/core/cuda/check.h). A failed status becomes a
// dtrain::Error naming the call, the status and the library's message; nothing exits.
#pragma once

#include "dtrain/core/error.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include <source_location>

namespace dtrain::detail::gpu {

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call,
                                            std::source_location where = std::source_location::current()) {
  throw Error(fmt::format("cuda: {} failed: {} ({})", call, cublasGetStatusString(status), static_cast<int>(status)),
              where);
}

// cuDNN keeps a message about its last failure on this thread that says more than the
// status (which parameter it rejected, say).
[[noreturn]] inline void throw_cudnn_error(cudnnStatus_t status, const char* call,
                                           std::source_location where = std::source_location::current()) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  throw Error(fmt::format("cuda: {} failed: {} ({}){}{}", call, cudnnGetErrorString(status), static_cast<int>(status),
                          detail[0] ? ": " : "", detail),
              where);
}

}  // namespace dtrain::detail::gpu

#define DTRAIN_CUBLAS_CHECK(call)                                                 \
  do {                                                                            \
    const cublasStatus_t dtrain_cublas_status_ = (call);                          \
    if (dtrain_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {            \
      ::dtrain::detail::gpu::throw_cublas_error(dtrain_cublas_status_, #call);    \
    }                                                                             \
  } while (0)

#define DTRAIN_CUDNN_CHECK(call)                                                  \
  do {                                                                            \
    const cudnnStatus_t dtrain_cudnn_status_ = (call);                            \
    if (dtrain_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] {              \
      ::dtrain::detail::gpu::throw_cudnn_error(dtrain_cudnn_status_, #call);      \
    }                                                                             \
  } while (0)
