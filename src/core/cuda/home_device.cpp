// The process's device (cuda::use_device): current on the thread that chose it, and where
// threads without one make their context.
#include "dtrain/core/cuda/check.h"
#include "dtrain/core/device.h"
#include "dtrain/core/error.h"

#include <fmt/format.h>

#include <atomic>

namespace dtrain::cuda {
namespace {
std::atomic<int> home{0};
}  // namespace

void use_device(int index) {
  const int count = device_count();
  DTRAIN_CHECK(index >= 0 && index < count, "cuda::use_device({}): {}", index,
               count == 0 ? unavailable_reason() : fmt::format("this machine has {} CUDA device(s)", count));
  DTRAIN_CUDA_CHECK(cudaSetDevice(index));
  home = index;
}

int home_device() { return home.load(); }

}  // namespace dtrain::cuda
