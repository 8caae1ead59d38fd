// Finite-difference gradient checks of the differentiable ops on CUDA tensors (f64), the
// GPU side of tests/autograd/test_grad_check.cpp: every backward formula is exercised on
// the CUDA kernels (cuBLAS, cuDNN, own kernels) that forward and backward call there.
#include "cuda_test.h"
#include "support/test_support.h"

#include "dtrain/autograd/functions.h"

namespace dtrain::test {
namespace {

using Inputs = const std::vector<Variable>&;

Variable gpu_param(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  return Variable(random_tensor(shape, seed, DType::f64, low, high).to(kGpu), true);
}

}  // namespace

TEST_CASE("CUDA grad: arithmetic, activations, reductions, shapes", "[cuda][grad]") {
  if (!cuda_ready()) return;
  auto a = gpu_param({3, 4}, 1), b = gpu_param({4}, 2, 0.5, 1.5);
  require_grad_ok([](Inputs in) { return div(mul(in[0], in[1]), add(in[1], 1.0)); }, {a, b});
  auto x = gpu_param({2, 5}, 3, 0.2, 2.0);
  require_grad_ok([](Inputs in) { return add(log(in[0]), sqrt(exp(in[0]))); }, {x});
  require_grad_ok([](Inputs in) { return add(gelu(in[0]), mul(sigmoid(in[0]), tanh(in[0]))); }, {x});
  auto y = gpu_param({3, 4, 5}, 4);
  require_grad_ok([](Inputs in) { return sum(in[0], {0, 2}, true); }, {y});
  require_grad_ok([](Inputs in) { return mean(in[0], {-1}); }, {y});
  // Piecewise ops: random values lie away from the kinks by far more than the step.
  require_grad_ok([](Inputs in) { return add(abs(in[0]), clamp(in[0], -0.5, 0.5)); }, {y});
  require_grad_ok([](Inputs in) { return add_relu(in[0], in[1]); }, {y, gpu_param({5}, 5)});
  require_grad_ok([](Inputs in) { return add(amax(in[0], {1}), amin(in[0], {1})); }, {y});
  require_grad_ok([](Inputs in) { return cat({narrow(in[0], 1, 1, 2), permute(in[0], {0, 2, 1})}, 2); }, {y});
  const Tensor index = Tensor::from_vector<std::int64_t>({3, 0, 3}, {3}).to(kGpu);
  require_grad_ok([index](Inputs in) { return index_select(in[0], 1, index); }, {y});
}

TEST_CASE("CUDA grad: matmul, linear, conv2d", "[cuda][grad]") {
  if (!cuda_ready()) return;
  auto a = gpu_param({3, 4}, 5), b = gpu_param({4, 2}, 6), batched = gpu_param({2, 3, 4}, 7);
  auto w = gpu_param({5, 4}, 8), bias = gpu_param({5}, 9);
  require_grad_ok([](Inputs in) { return matmul(in[0], in[1]); }, {a, b});
  require_grad_ok([](Inputs in) { return matmul(in[0], in[1]); }, {batched, b});
  require_grad_ok([](Inputs in) { return linear(in[0], in[1], in[2]); }, {batched, w, bias});
  std::uint64_t seed = 20;
  for (const auto& c : conv_grad_cases()) {
    auto xv = gpu_param(c.x, seed++), wv = gpu_param(c.w, seed++), bv = gpu_param({c.w[0]}, seed++);
    const Conv2dParams p = c.p;
    require_grad_ok([p](Inputs in) { return conv2d(in[0], in[1], in[2], p); }, {xv, wv, bv});
  }
}

TEST_CASE("CUDA grad: pooling, normalization, softmax and losses", "[cuda][grad]") {
  if (!cuda_ready()) return;
  // Distinct values: max pooling with ties has no single gradient.
  Tensor t = Tensor::arange(0, 2 * 3 * 6 * 6, 1, {DType::f64});
  Variable x(index_select(t, 0, randperm(t.numel())).reshape({2, 3, 6, 6}).to(kGpu), true);
  require_grad_ok([](Inputs in) { return max_pool2d(in[0], {3, 3, 2, 2, 1, 1}); }, {x}, 1e-3);
  auto y = gpu_param({2, 3, 6, 6}, 30);
  require_grad_ok([](Inputs in) { return avg_pool2d(in[0], {3, 3, 2, 2, 1, 1, false}); }, {y});
  require_grad_ok([](Inputs in) { return adaptive_avg_pool2d(in[0], 4, 3); }, {y});
  auto gamma = gpu_param({3}, 31, 0.5, 1.5), beta = gpu_param({3}, 32);
  require_grad_ok([](Inputs in) { return batch_norm_train(in[0], in[1], in[2], 1e-5); }, {y, gamma, beta});
  auto lgamma = gpu_param({6, 6}, 33, 0.5, 1.5), lbeta = gpu_param({6, 6}, 34);
  require_grad_ok([](Inputs in) { return layer_norm(in[0], 2, in[1], in[2], 1e-5); }, {y, lgamma, lbeta});
  auto logits = gpu_param({4, 5}, 35, -2, 2);
  require_grad_ok([](Inputs in) { return softmax(in[0], 1); }, {logits});
  require_grad_ok([](Inputs in) { return log_softmax(in[0], 0); }, {logits});
  const Tensor labels = Tensor::from_vector<std::int64_t>({0, 4, 2, 2}, {4}).to(kGpu);
  require_grad_ok([labels](Inputs in) { return cross_entropy(in[0], labels, 0.1); }, {logits});
  auto target = gpu_param({4, 5}, 36);
  require_grad_ok([](Inputs in) { return mse_loss(in[0], in[1]); }, {logits, target});
}

}  // namespace dtrain::test
