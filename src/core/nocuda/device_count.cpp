// The answers of a build without CUDA: there is never a device.
#include "dtrain/core/device.h"

namespace dtrain::cuda {
int device_count() { return 0; }
std::string unavailable_reason() { return "dtrain was built without CUDA (DTRAIN_USE_CUDA=OFF)"; }
}  // namespace dtrain::cuda
