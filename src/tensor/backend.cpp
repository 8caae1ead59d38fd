#include "tensor/backend.h"

namespace dtrain::detail {

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  // The CUDA tensor backend is not part of dtrain yet; say so instead of failing obscurely.
  std::string reason = cuda::available() ? "dtrain has no CUDA tensor backend yet"
                                         : cuda::unavailable_reason();
  DTRAIN_FAIL("device {} requested: {}", device.str(), reason);
}

}  // namespace dtrain::detail
