// The process's device and the device guard on a real device: no context is left on a
// device nobody asked for (each test case runs in a process of its own under ctest, so
// "no context yet" holds at its start).
#include "cuda/cuda_test.h"
#include "dtrain/core/cuda/device_guard.h"

#include <thread>

namespace dtrain::test {

TEST_CASE("cuda::use_device makes the device current and the process's home", "[cuda]") {
  if (!cuda_ready()) return;
  const int last = cuda::device_count() - 1;
  cuda::use_device(last);
  int current = -1;
  DTRAIN_CUDA_CHECK(cudaGetDevice(&current));
  CHECK(current == last);
  CHECK(cuda::home_device() == last);
  CHECK(cuda::primary_context_active(last));
}

TEST_CASE("a device guard on a thread with no device leaves no context on device 0", "[cuda]") {
  if (!cuda_ready()) return;
  if (cuda::device_count() < 2) {
    skip_test_case("needs two CUDA devices (one cannot tell device 0 from the guard's)");
    return;
  }
  REQUIRE_FALSE(cuda::primary_context_active(0));
  std::thread([] {
    {
      cuda::DeviceGuard guard(1);
      DTRAIN_CUDA_CHECK(cudaFree(nullptr));  // makes the context of device 1
    }
    int current = -1;
    DTRAIN_CUDA_CHECK(cudaGetDevice(&current));
    CHECK(current == 1);  // kept, not "restored" to a device 0 it never had
  }).join();
  CHECK_FALSE(cuda::primary_context_active(0));
  CHECK(cuda::primary_context_active(1));
}

}  // namespace dtrain::test
