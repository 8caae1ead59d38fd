#include "dtrain/core/environment.h"
#include "dtrain/dist/comm/nccl.h"

namespace dtrain::dist {

Device rank_cuda_device() {
  const int count = cuda::device_count();
  DTRAIN_CHECK(count > 0, "rank_cuda_device: {}", cuda::unavailable_reason());
  return Device::cuda(env::local_rank() % count);
}

}  // namespace dtrain::dist
