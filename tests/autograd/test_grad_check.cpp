// Finite-difference gradient checks for every differentiable op, in f64.
#include "dtrain/autograd/functions.h"
#include "support/test_support.h"

using namespace dtrain;
using test::random_tensor;
using test::require_grad_ok;

namespace {
Variable param(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  return Variable(random_tensor(shape, seed, DType::f64, low, high), true);
}
using Inputs = const std::vector<Variable>&;
}  // namespace

TEST_CASE("grad: broadcasting arithmetic", "[autograd][cpu]") {
  auto a = param({3, 4}, 1);
  auto b = param({4}, 2, 0.5, 1.5);
  auto c = param({3, 1}, 3, 0.5, 1.5);
  require_grad_ok([](Inputs in) { return add(in[0], in[1]); }, {a, b});
  require_grad_ok([](Inputs in) { return sub(in[0], in[2]); }, {a, b, c});
  require_grad_ok([](Inputs in) { return mul(in[0], in[1]); }, {a, b});
  require_grad_ok([](Inputs in) { return div(in[0], in[2]); }, {a, b, c});
  require_grad_ok([](Inputs in) { return div(in[2], in[1]); }, {a, b, c});
  require_grad_ok([](Inputs in) { return neg(mul(add(in[0], 2.0), 3.0)); }, {a});
}

TEST_CASE("grad: unary math", "[autograd][cpu]") {
  auto x = param({2, 5}, 4, 0.2, 2.0);  // positive, for log/sqrt/pow
  require_grad_ok([](Inputs in) { return exp(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return log(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return sqrt(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return pow(in[0], 3.0); }, {x});
  require_grad_ok([](Inputs in) { return pow(in[0], -0.5); }, {x});
}

TEST_CASE("grad: activations", "[autograd][cpu]") {
  // Values kept away from relu's kink at 0, where the derivative is undefined.
  Tensor t = random_tensor({4, 6}, 5, DType::f64, 0.1, 2.0);
  Tensor sign = Tensor::from_vector<double>({1, -1, 1, -1, 1, -1}, {6});
  Variable x(mul(t, sign), true);
  require_grad_ok([](Inputs in) { return relu(in[0]); }, {x});
  // The sums x + y (y broadcast along rows) keep the signs of x and stay 0.1 or more from 0.
  Variable y(mul(random_tensor({6}, 6, DType::f64, 0.0, 0.05), sign), true);
  require_grad_ok([](Inputs in) { return add_relu(in[0], in[1]); }, {x, y});
  require_grad_ok([](Inputs in) { return add_relu(in[1], in[0]); }, {x, y});
  require_grad_ok([](Inputs in) { return gelu(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return gelu(in[0], GeluApproximation::Tanh); }, {x});
  require_grad_ok([](Inputs in) { return silu(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return sigmoid(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return tanh(in[0]); }, {x});
}

TEST_CASE("grad: reductions", "[autograd][cpu]") {
  auto x = param({2, 3, 4}, 6);
  require_grad_ok([](Inputs in) { return sum(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return sum(in[0], {1}); }, {x});
  require_grad_ok([](Inputs in) { return sum(in[0], {0, 2}, true); }, {x});
  require_grad_ok([](Inputs in) { return mean(in[0]); }, {x});
  require_grad_ok([](Inputs in) { return mean(in[0], {-1}); }, {x});
}

TEST_CASE("grad: shape functions", "[autograd][cpu]") {
  auto x = param({2, 3, 4}, 7);
  auto y = param({2, 2, 4}, 8);
  require_grad_ok([](Inputs in) { return reshape(in[0], {6, 4}); }, {x});
  require_grad_ok([](Inputs in) { return flatten(in[0], 1); }, {x});
  require_grad_ok([](Inputs in) { return transpose(in[0], 0, 2); }, {x});
  require_grad_ok([](Inputs in) { return permute(in[0], {2, 0, 1}); }, {x});
  require_grad_ok([](Inputs in) { return narrow(in[0], 1, 1, 2); }, {x});
  require_grad_ok([](Inputs in) { return cat({in[0], in[1]}, 1); }, {x, y});
  Tensor index = Tensor::from_vector<std::int64_t>({2, 0, 2}, {3});
  require_grad_ok([index](Inputs in) { return index_select(in[0], 1, index); }, {x});
}

TEST_CASE("grad: matmul and linear", "[autograd][cpu]") {
  auto a = param({3, 4}, 9);
  auto b = param({4, 5}, 10);
  auto batched = param({2, 3, 4}, 11);
  auto batched_b = param({2, 4, 5}, 12);
  require_grad_ok([](Inputs in) { return matmul(in[0], in[1]); }, {a, b});
  require_grad_ok([](Inputs in) { return matmul(in[0], in[1]); }, {batched, batched_b});
  require_grad_ok([](Inputs in) { return matmul(in[0], in[1]); }, {batched, b});
  auto w = param({5, 4}, 13);
  auto bias = param({5}, 14);
  require_grad_ok([](Inputs in) { return linear(in[0], in[1], in[2]); }, {a, w, bias});
  require_grad_ok([](Inputs in) { return linear(in[0], in[1], Variable()); }, {batched, w});
}

TEST_CASE("grad: conv2d", "[autograd][cpu]") {
  int seed = 20;
  for (const auto& c : test::conv_grad_cases()) {
    auto x = param(c.x, seed++);
    auto w = param(c.w, seed++);
    auto b = param({c.w[0]}, seed++);
    Conv2dParams p = c.p;
    require_grad_ok([p](Inputs in) { return conv2d(in[0], in[1], in[2], p); }, {x, w, b});
  }
}

TEST_CASE("grad: pooling", "[autograd][cpu]") {
  // Distinct values so that max pooling has no ties (ties make the gradient ambiguous).
  Tensor t = Tensor::arange(0, 2 * 3 * 6 * 6, 1, {DType::f64}).reshape({2, 3, 6, 6});
  Tensor perm = randperm(t.numel());
  Variable x(index_select(t.reshape({-1}), 0, perm).reshape({2, 3, 6, 6}), true);
  require_grad_ok([](Inputs in) { return max_pool2d(in[0], {2, 2, 2, 2, 0, 0}); }, {x}, 1e-3);
  require_grad_ok([](Inputs in) { return max_pool2d(in[0], {3, 3, 2, 2, 1, 1}); }, {x}, 1e-3);
  auto y = param({2, 3, 6, 6}, 30);
  require_grad_ok([](Inputs in) { return avg_pool2d(in[0], {2, 2, 2, 2, 0, 0}); }, {y});
  require_grad_ok([](Inputs in) { return avg_pool2d(in[0], {3, 3, 2, 2, 1, 1, false}); }, {y});
  require_grad_ok([](Inputs in) { return adaptive_avg_pool2d(in[0], 4, 3); }, {y});
  require_grad_ok([](Inputs in) { return adaptive_avg_pool2d(in[0], 1, 1); }, {y});
}

TEST_CASE("grad: normalization", "[autograd][cpu]") {
  auto x4 = param({3, 2, 3, 3}, 31);
  auto x2 = param({5, 3}, 32);
  auto gamma = param({2}, 33, 0.5, 1.5);
  auto beta = param({2}, 34);
  auto gamma3 = param({3}, 35, 0.5, 1.5);
  auto beta3 = param({3}, 36);
  require_grad_ok([](Inputs in) { return batch_norm_train(in[0], in[1], in[2], 1e-5); }, {x4, gamma, beta});
  require_grad_ok([](Inputs in) { return batch_norm_train(in[0], in[1], in[2], 1e-5); }, {x2, gamma3, beta3});
  // Without the affine parameters, and with a weight only (the fused kernel's other paths).
  require_grad_ok([](Inputs in) { return batch_norm_train(in[0], Variable(), Variable(), 1e-5); }, {x4});
  require_grad_ok([](Inputs in) { return batch_norm_train(in[0], in[1], Variable(), 1e-3); }, {x4, gamma});
  // ReLU fused (the kink at 0 is where finite differences fail; random inputs miss it).
  require_grad_ok([](Inputs in) { return batch_norm_relu_train(in[0], in[1], in[2], 1e-5); }, {x4, gamma, beta});
  require_grad_ok([](Inputs in) { return batch_norm_relu_train(in[0], Variable(), Variable(), 1e-5); }, {x4});
  Tensor mean = random_tensor({2}, 37, DType::f64);
  Tensor var = random_tensor({2}, 38, DType::f64, 0.5, 2);
  require_grad_ok([=](Inputs in) { return batch_norm_eval(in[0], in[1], in[2], mean, var, 1e-5); },
                  {x4, gamma, beta});
  auto lgamma = param({3, 3}, 39, 0.5, 1.5);
  auto lbeta = param({3, 3}, 40);
  require_grad_ok([](Inputs in) { return layer_norm(in[0], 2, in[1], in[2], 1e-5); }, {x4, lgamma, lbeta});
}

TEST_CASE("grad: transformer activations over wide ranges (gelu tanh, silu, SwiGLU)", "[autograd][cpu]") {
  auto x = param({3, 7}, 41, -6, 6);
  auto w = param({3, 7}, 42, -2, 2);
  require_grad_ok([](Inputs in) { return gelu(in[0], GeluApproximation::Tanh); }, {x});
  require_grad_ok([](Inputs in) { return silu(in[0]); }, {x});
  // SwiGLU's gate: silu(a) * b.
  require_grad_ok([](Inputs in) { return mul(silu(in[0]), in[1]); }, {x, w});
  require_grad_ok([](Inputs in) { return gelu(in[0], GeluApproximation::None); }, {x});
}

TEST_CASE("grad: layer_norm without a bias, rms_norm with and without a weight", "[autograd][cpu]") {
  auto x = param({2, 3, 6}, 43);
  auto weight = param({6}, 44, 0.5, 1.5);
  auto weight2 = param({3, 6}, 45, 0.5, 1.5);
  // GPT-2 without biases: a weight, no beta.
  require_grad_ok([](Inputs in) { return layer_norm(in[0], 1, in[1], Variable(), 1e-5); }, {x, weight});
  require_grad_ok([](Inputs in) { return layer_norm(in[0], 2, in[1], Variable(), 1e-5); }, {x, weight2});
  require_grad_ok([](Inputs in) { return rms_norm(in[0], in[1], 1e-6); }, {x, weight});
  require_grad_ok([](Inputs in) { return rms_norm(in[0], Variable(), 1e-6); }, {x});
  // A larger eps, and a row of large values next to small ones.
  auto wide =
      Variable(add(random_tensor({4, 5}, 46, DType::f64), Tensor::from_vector<double>({0, 0, 30, 0}, {4, 1})), true);
  require_grad_ok([](Inputs in) { return rms_norm(in[0], in[1], 0.1); }, {wide, param({5}, 47, 0.5, 1.5)});
  // The gradient of the weight alone.
  Variable fixed(random_tensor({2, 3, 6}, 48, DType::f64), false);
  require_grad_ok([fixed](Inputs in) { return rms_norm(fixed, in[0], 1e-6); }, {weight});
}

TEST_CASE("grad: rotary_embedding, of a contiguous input and of a transposed view", "[autograd][cpu]") {
  const RopeTables t = rope_tables(5, 8, 100, DType::f64, Device::cpu(), 2);
  auto x = param({2, 5, 3, 8}, 49);
  require_grad_ok([t](Inputs in) { return rotary_embedding(in[0], t.cos, t.sin); }, {x});
  // (B, H, T, D) viewed as (B, T, H, D), as attention code splits heads.
  auto y = param({2, 3, 5, 8}, 50);
  require_grad_ok([t](Inputs in) { return rotary_embedding(transpose(in[0], 1, 2), t.cos, t.sin); }, {y});
}

TEST_CASE("grad: softmax and losses", "[autograd][cpu]") {
  auto x = param({4, 5}, 41, -2, 2);
  require_grad_ok([](Inputs in) { return softmax(in[0], 1); }, {x});
  require_grad_ok([](Inputs in) { return log_softmax(in[0], 1); }, {x});
  require_grad_ok([](Inputs in) { return log_softmax(in[0], 0); }, {x});
  Tensor labels = Tensor::from_vector<std::int64_t>({0, 4, 2, 2}, {4});
  require_grad_ok([labels](Inputs in) { return cross_entropy(in[0], labels); }, {x});
  require_grad_ok([labels](Inputs in) { return cross_entropy(in[0], labels, 0.1); }, {x});
  auto target = param({4, 5}, 42);
  require_grad_ok([](Inputs in) { return mse_loss(in[0], in[1]); }, {x, target});
}

TEST_CASE("grad: dropout uses the same mask forward and backward", "[autograd][cpu]") {
  auto x = param({4, 8}, 43);
  // A fresh generator with the same seed per evaluation gives the same mask each time.
  require_grad_ok([](Inputs in) {
    Generator gen(7);
    return dropout(in[0], 0.3, &gen);
  }, {x});
}

TEST_CASE("grad_check catches a wrong gradient", "[autograd][cpu]") {
  auto x = param({3}, 44);
  // A deliberately wrong backward: claims d(2x)/dx = 1.
  auto wrong = [](Inputs in) {
    return Variable(mul(in[0].data(), 2.0), {in[0]}, [](std::vector<Variable>& v, const Tensor& g) {
      v[0].add_grad(g);
    });
  };
  GradCheckResult r = grad_check(wrong, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.report.find("analytic") != std::string::npos);
}
