#include "tensor/backend.h"

namespace dtrain::detail {

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  return cuda_backend(device.index);
}

}  // namespace dtrain::detail
