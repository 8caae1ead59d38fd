#include "dtrain/optim/adam.h"

#include "dtrain/tensor/ops.h"
#include "optim/optim_test_helpers.h"
#include "support/test_support.h"

namespace dtrain::optim::test {
namespace {

// torch.optim.Adam / AdamW for one parameter, in plain doubles, written as PyTorch does.
struct ReferenceAdam {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  std::vector<double> m, v;
  int t = 0;

  void step(std::vector<double>& p, std::vector<double> g) {
    if (m.empty()) m = v = std::vector<double>(p.size(), 0.0);
    ++t;
    for (std::size_t j = 0; j < p.size(); ++j) {
      if (decoupled) {
        p[j] *= 1 - lr * weight_decay;
      } else {
        g[j] += weight_decay * p[j];
      }
      m[j] = beta1 * m[j] + (1 - beta1) * g[j];
      v[j] = beta2 * v[j] + (1 - beta2) * g[j] * g[j];
      const double bias_correction1 = 1 - std::pow(beta1, t);
      const double bias_correction2 = 1 - std::pow(beta2, t);
      const double denom = std::sqrt(v[j]) / std::sqrt(bias_correction2) + eps;
      p[j] -= lr / bias_correction1 * m[j] / denom;
    }
  }
};

struct Case {
  AdamOptions options;
  bool adamw;
  double expected_weight_decay;
};

std::unique_ptr<Adam> make(const Case& c, std::vector<Variable> params) {
  if (c.adamw) return std::make_unique<AdamW>(std::move(params), c.options);
  return std::make_unique<Adam>(std::move(params), c.options);
}

ReferenceAdam reference(const Case& c) {
  const AdamOptions& o = c.options;
  return {o.lr, o.beta1, o.beta2, o.eps, c.expected_weight_decay, c.adamw, {}, {}};
}

}  // namespace

TEST_CASE("Adam and AdamW match PyTorch's update with bias correction", "[cpu][optim]") {
  const Case c = GENERATE(Case{{.lr = 0.01}, false, 0.0},
                          Case{{.lr = 0.01, .weight_decay = 0.1}, false, 0.1},
                          Case{{.lr = 0.05, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3}, false, 0.0},
                          Case{{.lr = 0.01, .beta1 = 0.0}, false, 0.0},
                          Case{{.lr = 0.01}, true, 1e-2},  // AdamW's default decay
                          Case{{.lr = 0.1, .weight_decay = 0.3}, true, 0.3},
                          Case{{.lr = 0.01, .weight_decay = 0.0}, true, 0.0});
  INFO((c.adamw ? "AdamW" : "Adam") << " lr " << c.options.lr << " betas " << c.options.beta1 << ", "
                                    << c.options.beta2 << " weight_decay " << c.expected_weight_decay);
  std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};
  std::vector<double> p1 = {3.0, -2.0, 1e-3};
  Variable a = f64_param(p0, {3, 2});
  Variable b = f64_param(p1, {3});
  auto adam = make(c, {a, b});
  ReferenceAdam ref_a = reference(c);
  ReferenceAdam ref_b = reference(c);
  for (int k = 0; k < 5; ++k) {
    set_grad(a, grad_at(k, 6));
    set_grad(b, grad_at(k, 3, 2.0));
    adam->step();
    ref_a.step(p0, grad_at(k, 6));
    ref_b.step(p1, grad_at(k, 3, 2.0));
    require_values(a, p0, 1e-11);
    require_values(b, p1, 1e-11);
  }
}

TEST_CASE("Adam folds weight decay into the moments, AdamW decouples it", "[cpu][optim]") {
  // With a zero gradient, Adam's first step sees g = wd * p, whose bias-corrected ratio
  // m / sqrt(v) is sign(p): each element moves by lr towards 0 whatever its size. AdamW's
  // moments stay zero, so only the decay acts: p *= 1 - lr * wd.
  Variable a = f64_param({2.0, -4.0}, {2});
  Variable b = f64_param({2.0, -4.0}, {2});
  Adam adam({a}, {.lr = 0.1, .weight_decay = 0.5});
  AdamW adamw({b}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(a, {0.0, 0.0});
  set_grad(b, {0.0, 0.0});
  adam.step();
  adamw.step();
  require_values(a, {1.9, -3.9}, 1e-8);
  require_values(b, {2.0 * 0.95, -4.0 * 0.95});
}

TEST_CASE("Adam skips parameters without a gradient, keeping their own step count", "[cpu][optim]") {
  const Case c{{.lr = 0.02}, false, 0.0};
  std::vector<double> p0 = {1.0, -1.0};
  std::vector<double> p1 = {0.5, 0.25, -2.0};
  Variable a = f64_param(p0, {2});
  Variable b = f64_param(p1, {3});
  Adam adam({a, b}, c.options);
  ReferenceAdam ref_a = reference(c);
  ReferenceAdam ref_b = reference(c);
  for (int k = 0; k < 5; ++k) {
    adam.zero_grad();
    set_grad(a, grad_at(k, 2));
    ref_a.step(p0, grad_at(k, 2));
    // b is unused at steps 1 and 2: its bias correction must count only its own updates.
    if (k != 1 && k != 2) {
      set_grad(b, grad_at(k, 3));
      ref_b.step(p1, grad_at(k, 3));
    }
    adam.step();
    require_values(a, p0, 1e-11);
    require_values(b, p1, 1e-11);
  }
}

TEST_CASE("Adam converges on a quadratic", "[cpu][optim]") {
  const Tensor target = dtrain::test::random_tensor({32}, 11, DType::f32, -1, 1);
  Variable w(Tensor::zeros({32}), true);
  Adam adam({w}, {.lr = 0.05});
  for (int k = 0; k < 500; ++k) {
    w.set_grad(mul(sub(w.data(), target), 2.0));
    adam.step();
  }
  CHECK(max_abs_diff(w.data(), target) < 1e-3);
}

TEST_CASE("Adam rejects invalid options, naming them", "[cpu][optim]") {
  auto adam = [](AdamOptions o) { Adam opt({f64_param({1.0}, {1})}, o); };
  auto adamw = [](AdamOptions o) { AdamW opt({f64_param({1.0}, {1})}, o); };
  CHECK_THROWS_WITH(adam({.lr = -1}), Catch::Contains("lr") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(adam({.beta1 = 1.0}), Catch::Contains("beta1") && Catch::Contains("1"));
  CHECK_THROWS_WITH(adam({.beta2 = -0.1}), Catch::Contains("beta2") && Catch::Contains("-0.1"));
  CHECK_THROWS_WITH(adam({.eps = 0}), Catch::Contains("eps") && Catch::Contains("0"));
  CHECK_THROWS_WITH(adamw({.weight_decay = -0.5}),
                    Catch::Contains("AdamW") && Catch::Contains("weight_decay") && Catch::Contains("-0.5"));
  CHECK_NOTHROW(adam({.beta1 = 0.0, .beta2 = 0.0}));
}

TEST_CASE("Adam and AdamW exclude_1d_from_weight_decay spare 1-D parameters and decay the rest", "[cpu][optim]") {
  const bool adamw = GENERATE(false, true);
  INFO((adamw ? "AdamW" : "Adam"));
  const Case c{{.lr = 0.05, .weight_decay = 0.3, .exclude_1d_from_weight_decay = true}, adamw, 0.3};
  std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};
  std::vector<double> p1 = {3.0, -2.0, 1e-3};
  Variable weight = f64_param(p0, {3, 2});
  Variable bias = f64_param(p1, {3});
  auto adam = make(c, {weight, bias});
  ReferenceAdam ref_weight = reference(c);
  ReferenceAdam ref_bias = reference({c.options, adamw, 0.0});
  for (int k = 0; k < 5; ++k) {
    set_grad(weight, grad_at(k, 6));
    set_grad(bias, grad_at(k, 3, 2.0));
    adam->step();
    ref_weight.step(p0, grad_at(k, 6));
    ref_bias.step(p1, grad_at(k, 3, 2.0));
    require_values(weight, p0, 1e-11);
    require_values(bias, p1, 1e-11);
  }
  // Rebound (a parameter server's slices keep their parameter's rank), the option holds:
  // the [1, n] slice follows the decaying reference, the [n] one the plain one.
  std::vector<double> q0 = {0.5, -1.0};
  std::vector<double> q1 = {3.0, -2.0};
  Variable w_slice = f64_param(q0, {1, 2});
  Variable b_slice = f64_param(q1, {2});
  const auto rebound = adam->rebind({w_slice, b_slice});
  ReferenceAdam ref_w_slice = reference(c);
  ReferenceAdam ref_b_slice = reference({c.options, adamw, 0.0});
  set_grad(w_slice, grad_at(0, 2));
  set_grad(b_slice, grad_at(0, 2));
  rebound->step();
  ref_w_slice.step(q0, grad_at(0, 2));
  ref_b_slice.step(q1, grad_at(0, 2));
  require_values(w_slice, q0, 1e-11);
  require_values(b_slice, q1, 1e-11);
}

}  // namespace dtrain::optim::test
