// A build without CUDA has no device backend: asking for one says why.
#include "tensor/backend.h"

namespace dtrain::detail {

Backend& cuda_backend(int index) { DTRAIN_FAIL("device cuda:{} requested: {}", index, cuda::unavailable_reason()); }

}  // namespace dtrain::detail
