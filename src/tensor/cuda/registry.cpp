// One CudaBackend per device, created on first use: creating one creates the device's
// context (hundreds of milliseconds and some memory), which a process should pay only for
// the devices it uses.
#include "tensor/cuda/cuda_backend.h"

#include <atomic>
#include <mutex>

namespace dtrain::detail {

Backend& cuda_backend(int index) {
  const int count = cuda::device_count();
  DTRAIN_CHECK(count > 0, "device cuda:{} requested: {}", index, cuda::unavailable_reason());
  DTRAIN_CHECK(index >= 0 && index < count, "device cuda:{} requested: this machine has {} CUDA device(s)", index,
               count);
  // The backends are never destroyed: tensors in static storage may be freed after they
  // would have been, when the CUDA runtime may already be unloaded. device_count() is
  // probed once, so `count` is the same on every call.
  static auto* slots = new std::atomic<CudaBackend*>[count]();
  static std::mutex create_mutex;
  std::atomic<CudaBackend*>& slot = slots[index];
  if (CudaBackend* b = slot.load(std::memory_order_acquire)) return *b;
  std::lock_guard lock(create_mutex);
  if (CudaBackend* b = slot.load(std::memory_order_relaxed)) return *b;
  auto* created = new CudaBackend(index);
  slot.store(created, std::memory_order_release);
  return *created;
}

}  // namespace dtrain::detail
