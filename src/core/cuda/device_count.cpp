// CUDA device discovery through the runtime API, which loads the driver lazily: a binary
// built with CUDA still starts on a machine without a driver and just finds no device.
#include "dtrain/core/device.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

namespace dtrain::cuda {
namespace {
struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    int n = 0;  // cudaGetDeviceCount leaves the count unwritten on error
    cudaError_t status = cudaGetDeviceCount(&n);
    if (status != cudaSuccess) {
      cudaGetLastError();  // clear the sticky error so later calls start clean
      p.reason = fmt::format("no usable CUDA device ({})", cudaGetErrorString(status));
      return p;
    }
    p.count = n;
    if (n == 0) p.reason = "no CUDA device present";
    return p;
  }();
  return result;
}
}  // namespace

int device_count() { return probe().count; }
std::string unavailable_reason() { return probe().reason; }

}  // namespace dtrain::cuda
