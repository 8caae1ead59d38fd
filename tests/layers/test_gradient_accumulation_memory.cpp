// Accumulating a GEMM layer's weight gradient over micro-batches (gradient accumulation,
// pipeline micro-batches) adds each product into the gradient inside the GEMM (beta = 1):
// after the first micro-batch, a backward allocates nothing of the weight's size. Measured
// with the CPU allocator's high-water mark around the second micro-batch; the layer is
// wide and the batch small, so a weight-sized temporary (1 MiB) would stand far above the
// activations (a few KiB).
#include "dtrain/layers/linear.h"
#include "dtrain/tensor/memory_stats.h"
#include "support/test_support.h"

using namespace dtrain;

namespace {

constexpr std::int64_t kWidth = 512;  // a 512 x 512 f32 weight: 1 MiB

// The growth of memory in use at the high-water mark of `pass`.
template <class Fn>
std::size_t peak_growth(Fn pass) {
  const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
  reset_peak_memory(Device::cpu());
  pass();
  return memory_stats(Device::cpu()).peak_bytes - before;
}

}  // namespace

TEST_CASE("A second micro-batch adds Linear's weight gradient without a weight-sized temporary", "[layers]") {
  manual_seed(5);
  nn::Linear layer(kWidth, kWidth);
  const std::size_t weight_bytes = layer.weight.data().nbytes();
  for (const Shape& input : {Shape{4, kWidth}, Shape{2, 3, kWidth}}) {  // 2-D, and 3-D through reshape
    INFO("input " << shape_str(input));
    layer.zero_grad();
    const Tensor x1 = test::random_tensor(input, 1), x2 = test::random_tensor(input, 2);
    auto micro = [&](const Tensor& x) { sum(layer(Variable(x))).backward(); };
    micro(x1);
    const Tensor first = layer.weight.grad().clone();
    const void* storage = layer.weight.grad().raw_data();
    const std::size_t growth = peak_growth([&] { micro(x2); });
    CHECK(growth < weight_bytes / 4);
    CHECK(layer.weight.grad().raw_data() == storage);  // added in place
    // The sum of the two micro-batches' gradients, as computed one at a time.
    const Tensor both = layer.weight.grad().clone();
    layer.zero_grad();
    micro(x2);
    test::require_close(both, add(first, layer.weight.grad()), 1e-5, 1e-5);
  }
}

TEST_CASE("A second micro-batch adds a shared matmul operand's gradient without a temporary", "[layers]") {
  // x (B, m, k) @ w (k, n) with w shared across the batch: dW = sum_b x_b^T g_b, one GEMM.
  Variable w(test::random_tensor({kWidth, kWidth}, 3), /*requires_grad=*/true);
  const std::size_t weight_bytes = w.data().nbytes();
  auto micro = [&](std::uint64_t seed) {
    sum(matmul(Variable(test::random_tensor({2, 2, kWidth}, seed)), w)).backward();
  };
  micro(4);
  const std::size_t growth = peak_growth([&] { micro(5); });
  CHECK(growth < weight_bytes / 4);
}
