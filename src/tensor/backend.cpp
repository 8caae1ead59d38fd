#include "tensor/backend.h"

#include "dtrain/tensor/stream.h"

namespace dtrain {
namespace detail {

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  return cuda_backend(device.index);
}

}  // namespace detail

void* device_stream(Device device) { return detail::backend(device).stream(); }

void synchronize(Device device) { detail::backend(device).synchronize(); }

}  // namespace dtrain
