// The zero-bubble pipelines' pieces on CUDA tensors: the split backward (input pass, then
// weight pass) through Linear, Conv2d and BatchNorm2d equals backward() on the device bit
// for bit and the CPU's within f32 rounding, and matmul_add_ (cuBLAS with beta 1, f32 and
// 16-bit operands into f32) adds the product into its output in place. The CPU side:
// tests/autograd/test_split_backward.cpp, tests/layers/test_split_backward_layers.cpp and
// tests/tensor/test_matmul.cpp.
#include "cuda_test.h"
#include "support/test_support.h"

#include "dtrain/autograd/split_backward.h"
#include "dtrain/layers/activation.h"
#include "dtrain/layers/conv.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/normalization.h"
#include "dtrain/layers/pooling.h"
#include "dtrain/layers/sequential.h"

namespace dtrain::test {
namespace {

std::shared_ptr<nn::Sequential> small_cnn() {
  manual_seed(11);
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{
      std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(4 * 4 * 4, 5)});
}

// The input's and every weight's gradient after backward (split or not) of sum(model(x)^2).
std::vector<Tensor> gradients(Device device, bool split) {
  auto model = small_cnn();
  model->to(device);
  Variable x(random_tensor({2, 3, 8, 8}, 12).to(device), /*requires_grad=*/true);
  Variable out = model->forward(x);
  Variable loss = sum(mul(out, out));
  std::vector<Tensor> grads;
  if (split) {
    DeferredWeightGradients w =
        backward_inputs(loss, Tensor::ones(loss.data().shape(), loss.data().options()), model->parameters());
    for (const Variable& p : model->parameters()) CHECK_FALSE(p.has_grad());  // B leaves them to W
    grads.push_back(x.grad().to(Device::cpu()));
    w.run();
  } else {
    loss.backward();
    grads.push_back(x.grad().to(Device::cpu()));
  }
  for (const Variable& p : model->parameters()) grads.push_back(p.grad().to(Device::cpu()));
  return grads;
}

}  // namespace

TEST_CASE("CUDA split backward equals backward() on the device and the CPU's", "[cuda][autograd]") {
  if (!cuda_ready()) return;
  const std::vector<Tensor> split = gradients(kGpu, true), whole = gradients(kGpu, false),
                            cpu = gradients(Device::cpu(), false);
  REQUIRE(split.size() == whole.size());
  for (std::size_t i = 0; i < split.size(); ++i) {
    INFO("gradient " << i);
    CHECK(max_abs_diff(split[i], whole[i]) == 0);
    require_close(split[i], cpu[i], 1e-4, 1e-4);
  }
}

TEST_CASE("CUDA matmul_add_ adds the product into its output in place", "[cuda][tensor]") {
  if (!cuda_ready()) return;
  const Tensor g = random_tensor({64, 24}, 13), x = random_tensor({64, 40}, 14), w0 = random_tensor({24, 40}, 15);
  const Tensor expected = add(w0, matmul(g, x, true, false));
  Tensor w = w0.to(kGpu);
  const void* storage = w.raw_data();
  matmul_add_(w, g.to(kGpu), x.to(kGpu), true, false);
  CHECK(w.raw_data() == storage);
  require_close(w.to(Device::cpu()), expected, 1e-4, 1e-4);
  // 16-bit operands summed into an f32 output, as the weight gradient under autocast.
  Tensor w16 = w0.to(kGpu);
  matmul_add_(w16, g.to(DType::bf16).to(kGpu), x.to(DType::bf16).to(kGpu), true, false);
  require_close(w16.to(Device::cpu()), add(w0, matmul(g.to(DType::bf16), x.to(DType::bf16), true, false)), 1e-3, 1e-3);
}

}  // namespace dtrain::test
