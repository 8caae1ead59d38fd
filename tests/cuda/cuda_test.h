// What the CUDA tests share: the skip-with-a-reason guard and the device under test.
#pragma once

#include "dtrain/core/device.h"

#include <string>

namespace dtrain::test {

inline constexpr Device kGpu = Device::cuda(0);

// Marks the running test case skipped and says why (defined with the Catch session, in
// tests/catch_impl.cpp). ctest reports the case as skipped unless it also failed.
void skip_test_case(const std::string& reason);

// True when a CUDA device is present; otherwise the test case is skipped, with the reason
// (the GPU machine runs these for real).
inline bool cuda_ready() {
  if (cuda::available()) return true;
  skip_test_case("no CUDA device: " + cuda::unavailable_reason());
  return false;
}

}  // namespace dtrain::test
