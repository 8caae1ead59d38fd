// The CUDA error paths: a device that is not there, and ops the CUDA backend does not
// have yet, each fail with one clear dtrain::Error.
#include "cuda_test.h"
#include "support/test_support.h"

namespace dtrain::test {

using Catch::Contains;

// Runs everywhere: on machines without a device (CI) this is the path users hit.
TEST_CASE("asking for a missing CUDA device names the device and the reason", "[cuda]") {
  const Tensor x = Tensor::ones({2, 3});
  if (!cuda::available()) {
    const std::string reason = cuda::unavailable_reason();
    CHECK_THROWS_WITH(x.to(Device::cuda(0)), Contains("device cuda:0 requested") && Contains(reason));
    CHECK_THROWS_WITH(Tensor::zeros({4}, {DType::f32, Device::cuda(1)}), Contains("cuda:1") && Contains(reason));
    return;
  }
  const int count = cuda::device_count();
  const std::string expected = fmt::format("device cuda:{} requested: this machine has {} CUDA device(s)", count, count);
  CHECK_THROWS_WITH(x.to(Device::cuda(count)), Contains(expected));
}

TEST_CASE("CUDA ops that are not implemented yet name the op", "[cuda]") {
  if (!cuda_ready()) return;
  const Tensor x = Tensor::ones({4, 4}, {DType::f32, kGpu});
  CHECK_THROWS_WITH(sum(x), Contains("cuda: sum is not implemented on CUDA tensors yet"));
  CHECK_THROWS_WITH(matmul(x, x), Contains("cuda: matmul is not implemented"));
  CHECK_THROWS_WITH(softmax(x, 1), Contains("cuda: softmax is not implemented"));
  // The backend is still usable afterwards.
  CHECK(add(x, x).to(Device::cpu()).to_vector<float>() == std::vector<float>(16, 2.0f));
}

}  // namespace dtrain::test
