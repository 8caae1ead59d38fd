// What the CUDA tests share: the skip-with-a-reason guard and the device under test.
#pragma once

#include "dtrain/core/device.h"
#include "support/test_support.h"

#include <string>

namespace dtrain::test {

inline constexpr Device kGpu = Device::cuda(0);

// True when a CUDA device is present; otherwise the test case is skipped, with the reason
// (the GPU machine runs these for real).
inline bool cuda_ready() {
  if (cuda::available()) return true;
  skip_test_case("no CUDA device: " + cuda::unavailable_reason());
  return false;
}

}  // namespace dtrain::test
