// The compressed gradient exchanges on CUDA tensors (one process, the local communicator):
// bf16 and fp16 casts round as on the CPU, bit for bit, and PowerSGD's steps (GEMMs on
// cuBLAS, P orthonormalized on the host, error feedback) give the CPU's results within f32
// rounding over a warm-up step and 3 compressed ones. The exchanges themselves are checked
// against float64 references on the CPU in tests/dist/test_compression.cpp.
#include "cuda_test.h"
#include "support/test_support.h"

#include "dtrain/comm/communicator.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"

namespace dtrain::test {
namespace {

dist::BucketLayout bucket_layout() {
  dist::BucketLayout b;
  for (const Shape& shape : {Shape{24, 20}, Shape{7}, Shape{3, 4}, Shape{16, 9}}) {
    b.members.push_back({"p" + std::to_string(b.members.size()), shape, b.numel});
    b.numel += shape_numel(shape);
  }
  return b;
}

// The bucket after each of `steps` exchanges on `device`, on the CPU.
std::vector<Tensor> exchanged(const std::string& kind, Device device, int steps) {
  auto exchange = dist::make_gradient_exchange(kind, dist::world());
  const dist::BucketLayout layout = bucket_layout();
  exchange->plan({layout});
  std::vector<Tensor> out;
  for (int step = 0; step < steps; ++step) {
    Tensor buffer = random_tensor({layout.numel}, 40 + static_cast<std::uint64_t>(step)).to(device);
    exchange->start(0, buffer)->wait();
    out.push_back(buffer.to(Device::cpu()));
  }
  return out;
}

}  // namespace

TEST_CASE("cuda: compressed gradient exchanges equal the CPU's", "[cuda][dist]") {
  if (!cuda_ready()) return;
  for (const std::string kind : {"bf16", "fp16", "powersgd:2:1"}) {
    INFO(kind);
    const std::vector<Tensor> cpu = exchanged(kind, Device::cpu(), 4), gpu = exchanged(kind, kGpu, 4);
    for (std::size_t step = 0; step < cpu.size(); ++step) {
      INFO("step " << step);
      CHECK(max_abs_diff(gpu[step], cpu[step]) <= (kind == "powersgd:2:1" ? 1e-4 : 0.0));
    }
  }
}

}  // namespace dtrain::test
