// The fused batch-norm kernels against the textbook formulas computed in double, at 1 and
// 2 threads; the gradients are checked by finite differences in tests/autograd.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"

#include <cmath>
#include <vector>

namespace dtrain {
namespace {

struct Reference {
  std::vector<double> y, mean, var, grad_x, grad_gamma, grad_beta;
};

// x (N, C, S) flattened; gamma, beta per channel; g the gradient of y.
Reference reference(const Tensor& x_t, const Tensor& gamma_t, const Tensor& beta_t, const Tensor& g_t, double eps) {
  const std::int64_t n = x_t.size(0), c = x_t.size(1), s = x_t.numel() / (n * c);
  auto x = x_t.to_vector<double>(), gamma = gamma_t.to_vector<double>(), beta = beta_t.to_vector<double>(),
       g = g_t.to_vector<double>();
  Reference r{std::vector<double>(x.size()), {}, {}, std::vector<double>(x.size()), {}, {}};
  const double m = static_cast<double>(n * s);
  for (std::int64_t ch = 0; ch < c; ++ch) {
    auto at = [&](std::int64_t i, std::int64_t k) { return static_cast<std::size_t>((i * c + ch) * s + k); };
    double mean = 0, var = 0, sum_g = 0, sum_gxhat = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < s; ++k) mean += x[at(i, k)] / m;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < s; ++k) var += (x[at(i, k)] - mean) * (x[at(i, k)] - mean) / m;
    const double invstd = 1 / std::sqrt(var + eps);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < s; ++k) {
        const double xhat = (x[at(i, k)] - mean) * invstd;
        r.y[at(i, k)] = xhat * gamma[ch] + beta[ch];
        sum_g += g[at(i, k)];
        sum_gxhat += g[at(i, k)] * xhat;
      }
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < s; ++k) {
        const double xhat = (x[at(i, k)] - mean) * invstd;
        r.grad_x[at(i, k)] = gamma[ch] * invstd * (g[at(i, k)] - sum_g / m - xhat * sum_gxhat / m);
      }
    r.mean.push_back(mean);
    r.var.push_back(var);
    r.grad_gamma.push_back(sum_gxhat);
    r.grad_beta.push_back(sum_g);
  }
  return r;
}

Tensor as_tensor(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape).to(DType::f32);
}

}  // namespace

TEST_CASE("batch_norm forward and backward match the formulas in double", "[cpu][tensor]") {
  for (const Shape& shape : {Shape{4, 3, 5, 7}, Shape{6, 5}, Shape{2, 70, 3, 3}}) {
    for (int threads : {1, 2}) {
      const int saved = num_threads();
      set_num_threads(threads);
      const std::int64_t c = shape[1];
      // An offset mean: a one-pass E[x^2] - E[x]^2 would lose the variance to cancellation.
      Tensor x = add(test::random_tensor(shape, 1), 100.0), g = test::random_tensor(shape, 2);
      Tensor gamma = test::random_tensor({c}, 3, DType::f32, 0.5, 1.5), beta = test::random_tensor({c}, 4);
      const Reference r = reference(x, gamma, beta, g, 1e-5);
      BatchNormResult out = batch_norm_forward(x, gamma, beta, 1e-5);
      test::require_close(out.y, as_tensor(r.y, shape), 1e-3, 1e-3);
      test::require_close(out.mean, as_tensor(r.mean, {c}), 1e-6, 1e-4);
      test::require_close(out.var, as_tensor(r.var, {c}), 1e-3, 1e-4);
      BatchNormGrads d = batch_norm_backward(g, x, out.mean, out.var, gamma, 1e-5);
      test::require_close(d.x, as_tensor(r.grad_x, shape), 1e-3, 1e-3);
      test::require_close(d.gamma, as_tensor(r.grad_gamma, {c}), 1e-3, 1e-3);
      test::require_close(d.beta, as_tensor(r.grad_beta, {c}), 1e-4, 1e-4);
      set_num_threads(saved);
    }
  }
}

TEST_CASE("batch_norm with ReLU fused equals batch_norm then ReLU, forward and backward", "[cpu][tensor]") {
  // The fused kernels apply ReLU as they write y and mask the gradient as they read it:
  // the same arithmetic as the two ops apart. The forward is equal bit for bit; the
  // backward's sums may add in another order (a masked plane sits at another alignment),
  // so its gradients agree to the rounding of f32 or f64.
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Shape& shape : {Shape{4, 3, 5, 7}, Shape{6, 5}, Shape{2, 70, 3, 3}}) {
      for (int threads : {1, 2}) {
        for (bool affine : {true, false}) {
          INFO(shape_str(shape) << " " << dtype_name(dt) << ", " << threads << " thread(s), affine " << affine);
          const int saved = num_threads();
          set_num_threads(threads);
          const std::int64_t c = shape[1];
          const Tensor x = test::random_tensor(shape, 11, dt), g = test::random_tensor(shape, 12, dt);
          const Tensor gamma = affine ? test::random_tensor({c}, 13, dt, 0.5, 1.5) : Tensor();
          const Tensor beta = affine ? test::random_tensor({c}, 14, dt) : Tensor();
          const BatchNormResult apart = batch_norm_forward(x, gamma, beta, 1e-5);
          const BatchNormGrads apart_grads =
              batch_norm_backward(binary(BinaryOp::ReluGrad, g, apart.y), x, apart.mean, apart.var, gamma, 1e-5);
          const BatchNormResult fused = batch_norm_forward(x, gamma, beta, 1e-5, true);
          const BatchNormGrads fused_grads = batch_norm_backward(g, x, fused.mean, fused.var, gamma, 1e-5, fused.y);
          // Some values on each side of 0: the mask matters.
          const double positive = sum(gt(apart.y, Tensor::scalar(0.0, {dt}))).item() / static_cast<double>(x.numel());
          CHECK(positive > 0.2);
          CHECK(positive < 0.8);
          test::require_close(fused.y, relu(apart.y), 0, 0);
          test::require_close(fused.mean, apart.mean, 0, 0);
          test::require_close(fused.var, apart.var, 0, 0);
          const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
          test::require_close(fused_grads.x, apart_grads.x, tol, tol);
          test::require_close(fused_grads.gamma, apart_grads.gamma, tol, tol);
          test::require_close(fused_grads.beta, apart_grads.beta, tol, tol);
          set_num_threads(saved);
        }
      }
    }
  }
}

TEST_CASE("batch_norm without weight and bias normalizes to mean 0, variance 1", "[cpu][tensor]") {
  Tensor x = test::random_tensor({8, 2, 4, 4}, 5, DType::f64);
  BatchNormResult out = batch_norm_forward(x, Tensor(), Tensor(), 1e-12);
  test::require_close(mean(out.y, {0, 2, 3}), Tensor::zeros({2}, {DType::f64}), 0, 1e-12);
  test::require_close(mean(square(out.y), {0, 2, 3}), Tensor::ones({2}, {DType::f64}), 1e-9, 1e-9);
}

TEST_CASE("batch_norm argument errors name the op and the expectation", "[cpu][tensor]") {
  Tensor x = Tensor::zeros({2, 3, 4});
  REQUIRE_THROWS_WITH(batch_norm_forward(Tensor::zeros({3}), Tensor(), Tensor(), 1e-5),
                      Catch::Contains("expected input (N, C, ...)"));
  REQUIRE_THROWS_WITH(batch_norm_forward(x, Tensor::ones({4}), Tensor(), 1e-5),
                      Catch::Contains("weight must be (3) f32"));
  REQUIRE_THROWS_WITH(batch_norm_forward(Tensor::zeros({1, 3}), Tensor(), Tensor(), 1e-5),
                      Catch::Contains("more than one value per channel"));
  REQUIRE_THROWS_WITH(batch_norm_forward(x, Tensor(), Tensor(), 0), Catch::Contains("eps must be positive"));
  REQUIRE_THROWS_WITH(batch_norm_backward(Tensor::zeros({2, 3}), x, Tensor::zeros({3}), Tensor::ones({3}), Tensor(), 1e-5),
                      Catch::Contains("gradient must match input"));
  REQUIRE_THROWS_WITH(batch_norm_backward(x, x, Tensor::zeros({3}), Tensor::ones({3}), Tensor(), 1e-5,
                                          Tensor::zeros({2, 3})),
                      Catch::Contains("batch_norm_backward: the ReLU output [2, 3]"));
}

}  // namespace dtrain
