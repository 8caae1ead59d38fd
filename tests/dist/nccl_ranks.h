// The guard of the multi-rank NCCL test cases ([nccl]): they need two ranks or more, each
// with a CUDA device of its own on its host.
#pragma once

#include "dtrain/core/environment.h"
#include "dtrain/comm/communicator.h"
#include "support/test_support.h"

#include <fmt/format.h>

namespace dtrain::test {

// True when the world can run a multi-rank NCCL case; otherwise the case is skipped, with
// the reason (ranks, devices, why CUDA is unusable).
inline bool nccl_ranks_ready(const dist::CommunicatorPtr& world) {
  if (world->size() >= 2 && cuda::device_count() >= env::local_world_size()) return true;
  skip_test_case(
      fmt::format("needs 2 ranks or more with a CUDA device each: {} rank(s), {} on this host, {} "
                  "CUDA device(s){}",
                  world->size(), env::local_world_size(), cuda::device_count(),
                  cuda::available() ? "" : " (" + cuda::unavailable_reason() + ")"));
  return false;
}

}  // namespace dtrain::test
