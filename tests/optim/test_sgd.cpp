#include "dtrain/optim/sgd.h"

#include "dtrain/tensor/ops.h"
#include "optim/optim_test_helpers.h"
#include "support/test_support.h"

namespace dtrain::optim::test {
namespace {

// torch.optim.SGD for one parameter, in plain doubles.
struct ReferenceSgd {
  SgdOptions o;
  std::vector<double> buf;

  void step(std::vector<double>& p, std::vector<double> g) {
    for (std::size_t j = 0; j < p.size(); ++j) g[j] += o.weight_decay * p[j];
    if (o.momentum != 0) {
      if (buf.empty()) {
        buf = g;
      } else {
        for (std::size_t j = 0; j < p.size(); ++j) buf[j] = o.momentum * buf[j] + (1 - o.dampening) * g[j];
      }
      for (std::size_t j = 0; j < p.size(); ++j) g[j] = o.nesterov ? g[j] + o.momentum * buf[j] : buf[j];
    }
    for (std::size_t j = 0; j < p.size(); ++j) p[j] -= o.lr * g[j];
  }
};

}  // namespace

TEST_CASE("SGD matches torch.optim.SGD's update rule", "[cpu][optim]") {
  const SgdOptions options = GENERATE(SgdOptions{.lr = 0.1},
                                      SgdOptions{.lr = 0.1, .momentum = 0.9},
                                      SgdOptions{.lr = 0.05, .momentum = 0.8, .dampening = 0.3},
                                      SgdOptions{.lr = 0.1, .weight_decay = 0.2},
                                      SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.2},
                                      SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true},
                                      SgdOptions{.lr = 0.1, .momentum = 0.7, .weight_decay = 0.1, .nesterov = true});
  INFO("momentum " << options.momentum << " dampening " << options.dampening << " weight_decay "
                   << options.weight_decay << " nesterov " << options.nesterov);
  std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};
  std::vector<double> p1 = {3.0, -2.0};
  Variable a = f64_param(p0, {2, 3});
  Variable b = f64_param(p1, {2});
  SGD sgd({a, b}, options);
  ReferenceSgd ref_a{options, {}};
  ReferenceSgd ref_b{options, {}};
  for (int k = 0; k < 4; ++k) {
    set_grad(a, grad_at(k, 6));
    set_grad(b, grad_at(k, 2, 1.0));
    sgd.step();
    ref_a.step(p0, grad_at(k, 6));
    ref_b.step(p1, grad_at(k, 2, 1.0));
    require_values(a, p0);
    require_values(b, p1);
  }
  CHECK(sgd.steps() == 4);
}

TEST_CASE("SGD leaves parameters without a gradient and their momentum untouched", "[cpu][optim]") {
  const SgdOptions options{.lr = 0.1, .momentum = 0.9};
  std::vector<double> p0 = {1.0, 2.0};
  std::vector<double> p1 = {-1.0, 0.5, 4.0};
  Variable a = f64_param(p0, {2});
  Variable b = f64_param(p1, {3});
  SGD sgd({a, b}, options);
  ReferenceSgd ref_a{options, {}};
  ReferenceSgd ref_b{options, {}};
  for (int k = 0; k < 4; ++k) {
    sgd.zero_grad();
    set_grad(a, grad_at(k, 2));
    ref_a.step(p0, grad_at(k, 2));
    // b is unused at step 1: it must neither move nor decay its momentum buffer.
    if (k != 1) {
      set_grad(b, grad_at(k, 3));
      ref_b.step(p1, grad_at(k, 3));
    }
    sgd.step();
    require_values(a, p0);
    require_values(b, p1);
  }
}

TEST_CASE("SGD with momentum converges on a quadratic", "[cpu][optim]") {
  const Tensor target = dtrain::test::random_tensor({16}, 7, DType::f32, -2, 2);
  Variable w(Tensor::zeros({16}), true);
  SGD sgd({w}, {.lr = 0.05, .momentum = 0.9});
  for (int k = 0; k < 200; ++k) {
    w.set_grad(mul(sub(w.data(), target), 2.0));  // d/dw |w - target|^2
    sgd.step();
  }
  CHECK(max_abs_diff(w.data(), target) < 1e-4);
}

TEST_CASE("SGD rejects invalid options, naming them", "[cpu][optim]") {
  auto make = [](SgdOptions o) { SGD sgd({f64_param({1.0}, {1})}, o); };
  CHECK_THROWS_WITH(make({.lr = -0.1}), Catch::Contains("lr") && Catch::Contains("-0.1"));
  CHECK_THROWS_WITH(make({.momentum = 1.0}), Catch::Contains("momentum") && Catch::Contains("1"));
  CHECK_THROWS_WITH(make({.momentum = -0.5}), Catch::Contains("momentum") && Catch::Contains("-0.5"));
  CHECK_THROWS_WITH(make({.dampening = 1.5}), Catch::Contains("dampening") && Catch::Contains("1.5"));
  CHECK_THROWS_WITH(make({.weight_decay = -1e-4}), Catch::Contains("weight_decay") && Catch::Contains("-0.0001"));
  CHECK_THROWS_WITH(make({.nesterov = true}), Catch::Contains("nesterov") && Catch::Contains("momentum 0"));
  CHECK_THROWS_WITH(make({.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Catch::Contains("nesterov") && Catch::Contains("dampening 0.1"));
  CHECK_NOTHROW(make({.lr = 0.1, .momentum = 0.9, .nesterov = true}));
}

TEST_CASE("SGD exclude_1d_from_weight_decay spares 1-D parameters and decays the rest", "[cpu][optim]") {
  const SgdOptions options{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.2, .exclude_1d_from_weight_decay = true};
  std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};
  std::vector<double> p1 = {3.0, -2.0};
  Variable weight = f64_param(p0, {2, 3});
  Variable bias = f64_param(p1, {2});
  SGD sgd({weight, bias}, options);
  ReferenceSgd ref_weight{options, {}};
  ReferenceSgd ref_bias{{.lr = 0.1, .momentum = 0.9}, {}};
  for (int k = 0; k < 4; ++k) {
    set_grad(weight, grad_at(k, 6));
    set_grad(bias, grad_at(k, 2, 1.0));
    sgd.step();
    ref_weight.step(p0, grad_at(k, 6));
    ref_bias.step(p1, grad_at(k, 2, 1.0));
    require_values(weight, p0);
    require_values(bias, p1);
  }
  // Rebound (a parameter server's slices keep their parameter's rank), the option holds:
  // with a zero gradient only the [1, n] slice decays.
  Variable w_slice = f64_param({1.0, 2.0}, {1, 2});
  Variable b_slice = f64_param({1.0, 2.0}, {2});
  const auto rebound = sgd.rebind({w_slice, b_slice});
  set_grad(w_slice, {0.0, 0.0});
  set_grad(b_slice, {0.0, 0.0});
  rebound->step();
  require_values(w_slice, {1.0 - 0.1 * 0.2 * 1.0, 2.0 - 0.1 * 0.2 * 2.0});
  require_values(b_slice, {1.0, 2.0});
}

}  // namespace dtrain::optim::test
