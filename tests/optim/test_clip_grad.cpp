#include "dtrain/optim/clip_grad.h"

#include "optim/optim_test_helpers.h"
#include "support/test_support.h"

#include <cmath>
#include <limits>

namespace dtrain::optim::test {
namespace {

double reference_norm(const std::vector<std::vector<double>>& grads) {
  double sum = 0;
  for (const auto& g : grads)
    for (double x : g) sum += x * x;
  return std::sqrt(sum);
}

}  // namespace

TEST_CASE("clip_grad_norm scales all gradients by one factor above max_norm", "[cpu][optim]") {
  const std::vector<double> ga = {3.0, -4.0, 1.0, 2.0};
  const std::vector<double> gb = {-6.0, 0.5};
  Variable a = f64_param({0, 0, 0, 0}, {2, 2});
  Variable b = f64_param({0, 0}, {2});
  Variable unused = f64_param({0}, {1});  // no gradient: skipped
  set_grad(a, ga);
  set_grad(b, gb);
  const double norm = reference_norm({ga, gb});

  const double returned = clip_grad_norm({a, unused, b}, 2.0);
  CHECK(returned == Approx(norm).epsilon(1e-14));
  const double scale = 2.0 / (norm + 1e-6);
  std::vector<double> ea = ga, eb = gb;
  for (double& x : ea) x *= scale;
  for (double& x : eb) x *= scale;
  CHECK_FALSE(unused.has_grad());
  const auto after_a = a.grad().to_vector<double>();
  const auto after_b = b.grad().to_vector<double>();
  for (std::size_t j = 0; j < ea.size(); ++j) CHECK(after_a[j] == Approx(ea[j]).epsilon(1e-14));
  for (std::size_t j = 0; j < eb.size(); ++j) CHECK(after_b[j] == Approx(eb[j]).epsilon(1e-14));
  CHECK(reference_norm({after_a, after_b}) == Approx(2.0).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm leaves gradients within max_norm alone", "[cpu][optim]") {
  Variable a = f64_param({0, 0}, {2});
  set_grad(a, {0.6, -0.8});
  CHECK(clip_grad_norm({a}, 1.5) == Approx(1.0));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.6, -0.8});
}

TEST_CASE("clip_grad_norm accumulates f32 gradients in double", "[cpu][optim]") {
  // 1e6 squares of 1e-3 (f32): an f32 running sum would drift; the norm is exactly 1.
  Variable w(Tensor::zeros({1000, 1000}), true);
  w.set_grad(Tensor::full({1000, 1000}, 1e-3));
  const double expected = 1000.0 * static_cast<double>(1e-3f);
  CHECK(clip_grad_norm({w}, 10.0) == Approx(expected).epsilon(1e-12));
}

TEST_CASE("clip_grad_norm reports a non-finite norm without touching gradients", "[cpu][optim]") {
  const double bad = GENERATE(std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN());
  Variable a = f64_param({0, 0}, {2});
  Variable b = f64_param({0}, {1});
  set_grad(a, {3.0, 4.0});
  set_grad(b, {bad});
  const double norm = clip_grad_norm({a, b}, 1.0);
  CHECK_FALSE(std::isfinite(norm));
  CHECK(a.grad().to_vector<double>() == std::vector<double>{3.0, 4.0});
}

TEST_CASE("clip_grad_norm does not write through a strided gradient view", "[cpu][optim]") {
  // A gradient set by hand as a transposed view shares its storage with `source`.
  const Tensor source = Tensor::from_vector(std::vector<double>{3, 0, 0, 0, 0, 4}, {2, 3});
  Variable w = f64_param({0, 0, 0, 0, 0, 0}, {3, 2});
  w.set_grad(source.t());
  CHECK(clip_grad_norm({w}, 1.0) == Approx(5.0));
  CHECK(source.to_vector<double>() == std::vector<double>{3, 0, 0, 0, 0, 4});
  const auto g = w.grad().to_vector<double>();  // row-major of the transpose: 3, 0, 0, 0, 0, 4
  CHECK(g[0] == Approx(3.0 / (5.0 + 1e-6)));
  CHECK(g[5] == Approx(4.0 / (5.0 + 1e-6)));
}

TEST_CASE("clip_grad_norm rejects a max_norm that is not positive", "[cpu][optim]") {
  Variable a = f64_param({0}, {1});
  CHECK_THROWS_WITH(clip_grad_norm({a}, 0.0), Catch::Contains("max_norm") && Catch::Contains("0"));
  CHECK_THROWS_WITH(clip_grad_norm({a}, -1.0), Catch::Contains("max_norm") && Catch::Contains("-1"));
}

}  // namespace dtrain::optim::test
