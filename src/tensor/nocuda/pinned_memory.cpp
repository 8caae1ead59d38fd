// A build without CUDA has no page-locked memory to offer (nothing would upload from it).
#include "tensor/backend.h"

namespace dtrain::detail {

void* pinned_allocate(std::size_t) {
  DTRAIN_FAIL("pinned host memory needs CUDA: {}", cuda::unavailable_reason());
}

// Unreachable: nothing was ever allocated.
void pinned_deallocate(void*, std::size_t) {}

}  // namespace dtrain::detail
