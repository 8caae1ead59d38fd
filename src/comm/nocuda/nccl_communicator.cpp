// NCCL in a build without CUDA: there is none, and asking for it says so.
#include "dtrain/comm/nccl.h"

namespace dtrain::dist {

bool nccl_built() { return false; }

CommunicatorPtr nccl_communicator(const CommunicatorPtr&, Device device, const CommunicatorOptions&) {
  DTRAIN_FAIL("nccl_communicator on {}: this build of dtrain has no CUDA, so no NCCL (rebuild with DTRAIN_USE_CUDA=ON)",
              device.str());
}

}  // namespace dtrain::dist
