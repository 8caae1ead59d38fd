#include "comm/mpi_entry.h"
#include "dtrain/core/environment.h"
#include "dtrain/comm/nccl.h"

namespace dtrain::dist {

int host_local_rank() {
  // MPI's count holds under any launcher; the variables only under the ones env knows.
  const int from_mpi = detail::mpi_host_rank();
  return from_mpi >= 0 ? from_mpi : env::local_rank();
}

Device rank_cuda_device() {
  const int count = cuda::device_count();
  DTRAIN_CHECK(count > 0, "rank_cuda_device: {}", cuda::unavailable_reason());
  const int index = host_local_rank() % count;
  cuda::use_device(index);  // once per process, not device 0 by default in each thread
  return Device::cuda(index);
}

}  // namespace dtrain::dist
