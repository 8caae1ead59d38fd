#include "dtrain/tensor/storage.h"

#include "tensor/backend.h"

namespace dtrain {
namespace {
void* allocate(std::size_t nbytes, Device device, bool pinned) {
  if (!pinned) return detail::backend(device).allocate(nbytes);
  DTRAIN_CHECK(device.is_cpu(), "pinned memory is host memory: expected the CPU, got {}", device.str());
  return detail::pinned_allocate(nbytes);
}
}  // namespace

Storage::Storage(std::size_t nbytes, Device device, bool pinned)
    : data_(allocate(nbytes, device, pinned)), nbytes_(nbytes), device_(device), pinned_(pinned) {}

Storage::~Storage() {
  if (pinned_) detail::pinned_deallocate(data_, nbytes_);
  else detail::backend(device_).deallocate(data_, nbytes_);
}

}  // namespace dtrain
