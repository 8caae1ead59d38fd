// What the CUDA tests share: the skip-with-a-reason guard and the device under test.
#pragma once

#include "dtrain/core/device.h"

#include <catch2/catch.hpp>

namespace dtrain::test {

inline constexpr Device kGpu = Device::cuda(0);

// True when a CUDA device is present; otherwise says why the test is skipped (ctest then
// passes the test: the GPU machine runs these for real).
inline bool cuda_ready() {
  if (cuda::available()) return true;
  WARN("skipped, no CUDA device: " << cuda::unavailable_reason());
  return false;
}

}  // namespace dtrain::test
