// The answers of a build without CUDA: there is never a device.
#include "dtrain/core/device.h"
#include "dtrain/core/error.h"

namespace dtrain::cuda {
int device_count() { return 0; }
std::string unavailable_reason() { return "dtrain was built without CUDA (DTRAIN_USE_CUDA=OFF)"; }
void use_device(int index) { DTRAIN_FAIL("cuda::use_device({}): {}", index, unavailable_reason()); }
int home_device() { return 0; }
}  // namespace dtrain::cuda
