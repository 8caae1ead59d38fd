// CUDA memory: the block cache hands freed blocks back and counts them, and every dtype
// survives the round trip host -> device -> host bit for bit.
#include "cuda_test.h"
#include "dtrain/tensor/memory_stats.h"
#include "support/test_support.h"
#include "tensor/backend.h"

#include <cstdint>
#include <limits>
#include <vector>

namespace dtrain::test {

TEST_CASE("CUDA allocator reuses a freed block of the same size", "[cuda]") {
  if (!cuda_ready()) return;
  detail::Backend& gpu = detail::backend(kGpu);
  constexpr std::size_t kBytes = 3 << 20;
  void* a = gpu.allocate(kBytes);
  REQUIRE(a != nullptr);
  gpu.deallocate(a, kBytes);
  void* b = gpu.allocate(kBytes);
  CHECK(b == a);  // from the cache: no cudaMalloc
  gpu.deallocate(b, kBytes);

  // The same through tensors: a step's activations come back for the next step.
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({256, 1024}, {DType::f32, kGpu});
    first = t.raw_data();
  }
  Tensor again = Tensor::empty({256, 1024}, {DType::f32, kGpu});
  CHECK(again.raw_data() == first);
}

TEST_CASE("CUDA memory_stats counts device blocks, their peak and the cache", "[cuda]") {
  if (!cuda_ready()) return;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  reset_peak_memory(kGpu);
  const MemoryStats before = memory_stats(kGpu);
  const std::size_t cpu_in_use = memory_stats(Device::cpu()).in_use_bytes;
  MemoryStats held;
  {
    const Tensor t = Tensor::empty({256, 1024}, {DType::f32, kGpu});
    held = memory_stats(kGpu);
    CHECK(held.in_use_bytes == before.in_use_bytes + kMiB);
    const Tensor pinned = Tensor::empty({256, 1024}, {DType::f32, Device::cpu(), /*pinned=*/true});
    CHECK(memory_stats(Device::cpu()).in_use_bytes == cpu_in_use);  // page-locked memory is not counted
  }
  const MemoryStats after = memory_stats(kGpu);
  CHECK(after.in_use_bytes == before.in_use_bytes);
  CHECK(after.peak_bytes == before.in_use_bytes + kMiB);
  // Against `held`: the block may have come from the cache. The device cache has no limit.
  CHECK(after.cached_bytes == held.cached_bytes + kMiB);
  reset_peak_memory(kGpu);
  CHECK(memory_stats(kGpu).peak_bytes == before.in_use_bytes);
}

TEST_CASE("CUDA round trip keeps every dtype's values", "[cuda]") {
  if (!cuda_ready()) return;
  const double inf = std::numeric_limits<double>::infinity();
  auto round_trip = [](const Tensor& host) {
    Tensor back = host.to(kGpu).to(Device::cpu());
    CHECK(back.dtype() == host.dtype());
    CHECK(back.to_vector<double>() == host.to_vector<double>());
  };
  round_trip(Tensor::from_vector<float>({1.5f, -2.25f, 3e38f, -0.0f, static_cast<float>(inf)}, {5}));
  round_trip(Tensor::from_vector<double>({1e-300, -7.125, 1e300, -inf}, {2, 2}));
  round_trip(Tensor::from_vector<std::int64_t>({-(std::int64_t{1} << 40), 0, std::int64_t{1} << 62}, {3}));
  round_trip(Tensor::from_vector<std::int32_t>({std::numeric_limits<std::int32_t>::min(), -5, 2147483647}, {3}));
  round_trip(Tensor::from_vector<std::uint8_t>({0, 1, 128, 255}, {4}));
  round_trip(Tensor::zeros({0, 3}, {DType::f32}));  // empty: no transfer at all
  // A large transfer, and a strided source (made contiguous on the device first).
  const Tensor big = random_tensor({1024, 1031}, 5);
  round_trip(big);
  CHECK(big.to(kGpu).t().to(Device::cpu()).to_vector<float>() == big.t().contiguous().to_vector<float>());
}

TEST_CASE("CUDA copy_ uploads into a strided device view", "[cuda]") {
  if (!cuda_ready()) return;
  Tensor dev = Tensor::zeros({4, 6}, {DType::f64, kGpu});
  Tensor view = dev.slice(1, 1, 6, 2);  // columns 1, 3, 5
  const Tensor src = Tensor::arange(0, 12, 1, {DType::f32}).reshape({4, 3});
  view.copy_(src);  // converts f32 -> f64 on the host, then a strided device copy
  Tensor expected = Tensor::zeros({4, 6}, {DType::f64});
  expected.slice(1, 1, 6, 2).copy_(src);
  require_close(dev.to(Device::cpu()), expected, 0, 0);
}

}  // namespace dtrain::test
