// Pinned host memory and uploads that do not wait: the data must arrive whole even when
// the source tensor is dropped right after to() returns (its memory must not be reused
// while the copy is queued), and the data loader's pinned batches must upload the same.
// Uploads on the copy stream (upload.h) must arrive whole whether or not get() is called.
#include "cuda_test.h"
#include "support/test_support.h"

#include "dtrain/data/dataloader.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/tensor/stream.h"
#include "dtrain/tensor/upload.h"

#include <vector>

namespace dtrain::test {
namespace {
using Catch::Matchers::Contains;
}  // namespace

TEST_CASE("pinned memory without a device is a clear error", "[cuda]") {
  if (cuda::available()) {
    skip_test_case("a CUDA device is present");
    return;
  }
  REQUIRE_THROWS_WITH(Tensor::zeros({4}).pin_memory(), Contains("pinned host memory needs"));
  auto data = std::make_shared<data::TensorDataset>(Tensor::zeros({8, 2}), Tensor::zeros({8}, {DType::i64}));
  REQUIRE_THROWS_WITH(data::DataLoader(data, {.batch_size = 4, .pin_memory = true}),
                      Contains("pin_memory needs a CUDA device"));
}

TEST_CASE("pinned tensors upload without waiting and arrive whole", "[cuda]") {
  if (!cuda_ready()) return;
  const Tensor host = random_tensor({1024, 257}, 3);
  const Tensor pinned = host.pin_memory();
  REQUIRE(pinned.is_pinned());
  REQUIRE_FALSE(host.is_pinned());
  REQUIRE(pinned.pin_memory().same_storage(pinned));
  require_close(pinned, host, 0, 0);
  require_close(pinned.to(kGpu, /*non_blocking=*/true).to(Device::cpu()), host, 0, 0);

  // Many uploads in flight, each source dropped at once: a reused source block would show
  // up as another upload's values.
  std::vector<Tensor> on_gpu;
  std::vector<Tensor> expected;
  for (int i = 0; i < 64; ++i) {
    Tensor src = random_tensor({256, 1024}, 100 + i);
    expected.push_back(src);
    on_gpu.push_back(src.pin_memory().to(kGpu, /*non_blocking=*/true));
  }
  synchronize(kGpu);
  for (std::size_t i = 0; i < on_gpu.size(); ++i) require_close(on_gpu[i].to(Device::cpu()), expected[i], 0, 0);

  // Strided or non-pinned sources take the waiting path and still arrive.
  require_close(pinned.t().to(kGpu, true).to(Device::cpu()), host.t().contiguous(), 0, 0);
  require_close(host.to(kGpu, true).to(Device::cpu()), host, 0, 0);
  REQUIRE_THROWS_WITH(pinned.to(kGpu).pin_memory(), Contains("expected a CPU tensor"));
}

TEST_CASE("the data loader's pinned batches upload like plain ones", "[cuda]") {
  if (!cuda_ready()) return;
  const Tensor x = random_tensor({40, 3, 5}, 7);
  const Tensor y = Tensor::arange(0, 40, 1, {DType::i64});
  auto dataset = std::make_shared<data::TensorDataset>(x, y);
  data::DataLoader loader(dataset, {.batch_size = 16, .workers = 2, .pin_memory = true});
  std::int64_t row = 0;
  for (data::Batch& batch : loader) {
    REQUIRE(batch.inputs.is_pinned());
    REQUIRE(batch.targets.is_pinned());
    const Tensor gx = batch.inputs.to(kGpu, true), gy = batch.targets.to(kGpu, true);
    const std::int64_t n = batch.inputs.size(0);
    require_close(gx.to(Device::cpu()), x.narrow(0, row, n), 0, 0);
    require_close(gy.to(Device::cpu()), y.narrow(0, row, n), 0, 0);
    row += n;
  }
  CHECK(row == 40);
}

TEST_CASE("an Upload to the CPU, or of an unpinned tensor, is a plain copy", "[cuda]") {
  const Tensor x = random_tensor({3, 4}, 11);
  Upload same(x, Device::cpu());
  CHECK(same.get().same_storage(x));
  if (!cuda_ready()) return;
  Upload plain(x, kGpu);
  require_close(plain.get().to(Device::cpu()), x, 0, 0);
}

TEST_CASE("Uploads on the copy stream overlap compute and arrive whole", "[cuda]") {
  if (!cuda_ready()) return;
  std::vector<Tensor> sources;
  std::vector<Upload> uploads;
  for (int i = 0; i < 32; ++i) {
    sources.push_back(random_tensor({512, 1024}, 200 + i));
    uploads.emplace_back(sources.back().pin_memory(), kGpu);  // the pinned copy is dropped here
    // Compute queued after the upload, on blocks the cache hands around meanwhile.
    Tensor busy = mul(Tensor::ones({1024, 1024}, {DType::f32, kGpu}), 2.0);
  }
  for (std::size_t i = 0; i < uploads.size(); ++i) {
    const Tensor& on_gpu = uploads[i].get();
    require_close(add(on_gpu, 0.0).to(Device::cpu()), sources[i], 0, 0);  // a kernel reads it
  }
  // Dropped without get(): the device is still ordered after the copy.
  { Upload unused(random_tensor({256, 256}, 300).pin_memory(), kGpu); }
  Tensor after = Tensor::full({256, 256}, 5.0, {DType::f32, kGpu});
  require_close(after.to(Device::cpu()), Tensor::full({256, 256}, 5.0), 0, 0);
  synchronize(kGpu);
}

}  // namespace dtrain::test
