#include "dtrain/optim/adam.h"
#include "dtrain/optim/lamb.h"
#include "dtrain/optim/lars.h"
#include "dtrain/optim/sgd.h"

#include "dtrain/tensor/ops.h"
#include "optim/optim_test_helpers.h"
#include "support/test_support.h"

#include <cmath>
#include <memory>

namespace dtrain::optim::test {
namespace {

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double e : x) s += e * e;
  return std::sqrt(s);
}

// The update rules of lars.h and lamb.h for one parameter tensor, in plain doubles.
struct ReferenceLars {
  ReferenceLars(const LarsOptions& options, bool excluded_param) : o(options), excluded(excluded_param) {}
  LarsOptions o;
  bool excluded;
  std::vector<double> v;

  void step(std::vector<double>& p, const std::vector<double>& g, double lr) {
    std::vector<double> d = g;
    double trust = 1;
    if (!excluded) {
      for (std::size_t j = 0; j < p.size(); ++j) d[j] += o.weight_decay * p[j];
      const double pn = norm(p);
      const double gn = norm(g);
      if (pn > 0 && gn > 0) trust = o.eta * pn / (gn + o.weight_decay * pn + o.eps);
    }
    if (v.empty()) v.assign(p.size(), 0.0);
    for (std::size_t j = 0; j < p.size(); ++j) {
      v[j] = o.momentum * v[j] + lr * trust * d[j];
      p[j] -= o.nesterov ? o.momentum * v[j] + lr * trust * d[j] : v[j];
    }
  }
};

struct ReferenceLamb {
  ReferenceLamb(const LambOptions& options, bool excluded_param) : o(options), excluded(excluded_param) {}
  LambOptions o;
  bool excluded;
  std::vector<double> m, v;
  int t = 0;

  void step(std::vector<double>& p, const std::vector<double>& g, double lr) {
    if (m.empty()) m = v = std::vector<double>(p.size(), 0.0);
    ++t;
    std::vector<double> u(p.size());
    for (std::size_t j = 0; j < p.size(); ++j) {
      m[j] = o.beta1 * m[j] + (1 - o.beta1) * g[j];
      v[j] = o.beta2 * v[j] + (1 - o.beta2) * g[j] * g[j];
      const double m_hat = m[j] / (1 - std::pow(o.beta1, t));
      const double v_hat = v[j] / (1 - std::pow(o.beta2, t));
      u[j] = m_hat / (std::sqrt(v_hat) + o.eps) + (excluded ? 0.0 : o.weight_decay * p[j]);
    }
    double trust = 1;
    if (!excluded) {
      const double pn = norm(p);
      const double un = norm(u);
      if (pn > 0 && un > 0) trust = pn / un;
    }
    for (std::size_t j = 0; j < p.size(); ++j) p[j] -= lr * trust * u[j];
  }
};

// A model's kinds of parameters: a linear weight, its bias, a conv weight.
const std::vector<Shape> kShapes = {{3, 4}, {3}, {2, 2, 3, 3}};

std::vector<Variable> model_params(DType dtype) {
  std::vector<Variable> params;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    const Tensor t = dtrain::test::random_tensor(kShapes[i], 100 + i, DType::f64, -1, 1);
    params.emplace_back(t.to(dtype), true);
  }
  return params;
}

// Gradients that differ per step and per tensor, in the parameters' dtype.
void set_model_grads(std::vector<Variable>& params, int step) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto n = static_cast<std::size_t>(params[i].numel());
    params[i].set_grad(Tensor::from_vector(grad_at(step, n, 0.9 * static_cast<double>(i)), params[i].shape())
                           .to(params[i].dtype()));
  }
}

// A warmup-like schedule, so that the test sees where the rate enters the momentum.
double lr_at(double base, int step) { return base * (0.5 + 0.25 * step); }

template <class Opt, class Ref, class Options>
void check_against_reference(const Options& options, DType dtype, double tol) {
  std::vector<Variable> params = model_params(dtype);
  Opt opt(params, options);
  std::vector<Ref> refs;
  std::vector<std::vector<double>> expected;
  for (const Variable& p : params) {
    refs.emplace_back(options, options.exclude_1d && p.dim() < 2);
    expected.push_back(values_of(p));
  }
  for (int k = 0; k < 5; ++k) {
    set_model_grads(params, k);
    opt.set_lr(lr_at(options.lr, k));
    opt.step();
    for (std::size_t i = 0; i < params.size(); ++i) {
      INFO("step " << k << ", parameter " << i);
      // The reference sees the gradient as the optimizer does (rounded to the dtype).
      refs[i].step(expected[i], params[i].grad().to_vector<double>(), opt.lr());
      require_values(params[i], expected[i], tol);
    }
  }
}

std::vector<double> values_times(const Variable& p, double s) {
  std::vector<double> v = values_of(p);
  for (double& e : v) e *= s;
  return v;
}

}  // namespace

TEST_CASE("LARS matches a float64 reference of its update rule", "[cpu][optim]") {
  // eta is larger than ImageNet's 1e-3 so that each step moves the weights visibly.
  const LarsOptions options = GENERATE(LarsOptions{.lr = 1, .weight_decay = 0.1, .eta = 0.05},
                                       LarsOptions{.lr = 1, .weight_decay = 0.1, .eta = 0.05, .exclude_1d = false},
                                       LarsOptions{.lr = 2, .momentum = 0, .weight_decay = 0.05, .eta = 0.02},
                                       LarsOptions{.lr = 1, .weight_decay = 0, .eta = 0.05, .eps = 0},
                                       LarsOptions{.lr = 0.5, .weight_decay = 5e-3, .eta = 0.1, .nesterov = true});
  INFO("momentum " << options.momentum << " weight_decay " << options.weight_decay << " eta " << options.eta
                   << " nesterov " << options.nesterov << " exclude_1d " << options.exclude_1d);
  SECTION("f64") { check_against_reference<LARS, ReferenceLars>(options, DType::f64, 1e-12); }
  SECTION("f32") { check_against_reference<LARS, ReferenceLars>(options, DType::f32, 1e-5); }
}

TEST_CASE("LAMB matches a float64 reference of Algorithm 2", "[cpu][optim]") {
  const LambOptions options = GENERATE(LambOptions{.lr = 0.05},
                                       LambOptions{.lr = 0.05, .weight_decay = 0.1, .exclude_1d = false},
                                       LambOptions{.lr = 0.1, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-3},
                                       LambOptions{.lr = 0.05, .beta1 = 0, .weight_decay = 0});
  INFO("betas " << options.beta1 << ", " << options.beta2 << " eps " << options.eps << " weight_decay "
                << options.weight_decay << " exclude_1d " << options.exclude_1d);
  SECTION("f64") { check_against_reference<LAMB, ReferenceLamb>(options, DType::f64, 1e-12); }
  SECTION("f32") { check_against_reference<LAMB, ReferenceLamb>(options, DType::f32, 1e-5); }
}

TEST_CASE("LARS trust ratio is 1 for a zero parameter or a zero gradient", "[cpu][optim]") {
  const LarsOptions options{.lr = 0.5, .momentum = 0, .weight_decay = 0.1, .eta = 1e-3};
  SECTION("zero parameter: a plain SGD step") {
    Variable w = f64_param(std::vector<double>(4, 0.0), {2, 2});
    LARS lars({w}, options);
    set_grad(w, {1.0, -2.0, 0.5, 0.0});
    lars.step();
    require_values(w, {-0.5, 1.0, -0.25, 0.0});
  }
  SECTION("zero gradient: only the weight decay, unscaled") {
    Variable w = f64_param({1.0, -2.0, 4.0, 0.5}, {2, 2});
    LARS lars({w}, options);
    const std::vector<double> expected = values_times(w, 1 - 0.5 * 0.1);
    set_grad(w, std::vector<double>(4, 0.0));
    lars.step();
    require_values(w, expected);
  }
}

TEST_CASE("LAMB trust ratio is 1 for a zero parameter or a zero update", "[cpu][optim]") {
  SECTION("zero parameter: an Adam step") {
    // First step: m_hat = g, v_hat = g^2, so u = g / (|g| + eps).
    Variable w = f64_param(std::vector<double>(4, 0.0), {2, 2});
    LAMB lamb({w}, {.lr = 0.1, .eps = 1e-6});
    const std::vector<double> g = {1.0, -2.0, 0.5, 0.0};
    set_grad(w, g);
    lamb.step();
    std::vector<double> expected(4);
    for (std::size_t j = 0; j < 4; ++j) expected[j] = -0.1 * g[j] / (std::abs(g[j]) + 1e-6);
    require_values(w, expected);
  }
  SECTION("zero gradient, no weight decay: no move") {
    Variable w = f64_param({1.0, -2.0, 4.0, 0.5}, {2, 2});
    LAMB lamb({w}, {.lr = 0.1, .weight_decay = 0});
    const std::vector<double> before = values_of(w);
    set_grad(w, std::vector<double>(4, 0.0));
    lamb.step();
    require_values(w, before, 0);
  }
  SECTION("zero gradient with weight decay: u = wd * p, trust 1 / wd, p *= 1 - lr") {
    Variable w = f64_param({1.0, -2.0, 4.0, 0.5}, {2, 2});
    LAMB lamb({w}, {.lr = 0.1, .weight_decay = 0.01});
    const std::vector<double> expected = values_times(w, 0.9);
    set_grad(w, std::vector<double>(4, 0.0));
    lamb.step();
    require_values(w, expected);
  }
}

TEST_CASE("LARS moves an excluded 1-D parameter as momentum SGD without weight decay", "[cpu][optim]") {
  const bool nesterov = GENERATE(false, true);
  INFO("nesterov " << nesterov);
  Variable bias = f64_param({0.5, -1.0, 2.0}, {3});
  Variable weight = f64_param({0.5, -1.0, 2.0, 0.25}, {2, 2});
  Variable sgd_bias = f64_param(values_of(bias), {3});
  Variable sgd_weight = f64_param(values_of(weight), {2, 2});
  LARS lars({bias, weight}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = nesterov});
  SGD sgd({sgd_bias, sgd_weight}, {.lr = 0.1, .momentum = 0.9, .nesterov = nesterov});
  for (int k = 0; k < 5; ++k) {
    set_grad(bias, grad_at(k, 3));
    set_grad(sgd_bias, grad_at(k, 3));
    set_grad(weight, grad_at(k, 4, 1.0));
    set_grad(sgd_weight, grad_at(k, 4, 1.0));
    lars.step();
    sgd.step();
  }
  require_values(bias, values_of(sgd_bias));
  // The 2-D weight gets the trust ratio (tiny at eta 1e-3), so it moved far less.
  CHECK(max_abs_diff(weight.data(), sgd_weight.data()) > 0.1);
}

TEST_CASE("LAMB moves an excluded 1-D parameter as Adam without weight decay", "[cpu][optim]") {
  Variable bias = f64_param({0.5, -1.0, 2.0}, {3});
  Variable weight = f64_param({0.5, -1.0, 2.0, 0.25}, {2, 2});
  Variable adam_bias = f64_param(values_of(bias), {3});
  Variable adam_weight = f64_param(values_of(weight), {2, 2});
  LAMB lamb({bias, weight}, {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1});
  Adam adam({adam_bias, adam_weight}, {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6});
  for (int k = 0; k < 5; ++k) {
    set_grad(bias, grad_at(k, 3));
    set_grad(adam_bias, grad_at(k, 3));
    set_grad(weight, grad_at(k, 4, 1.0));
    set_grad(adam_weight, grad_at(k, 4, 1.0));
    lamb.step();
    adam.step();
  }
  require_values(bias, values_of(adam_bias), 1e-12);
  // The 2-D weight gets weight decay and the trust ratio, so it moved otherwise.
  CHECK(max_abs_diff(weight.data(), adam_weight.data()) > 1e-3);
}

TEST_CASE("LARS and LAMB state round trip continues identically", "[cpu][optim]") {
  const std::string kind = GENERATE(as<std::string>{}, "LARS", "LAMB");
  INFO(kind);
  auto make = [&](std::vector<Variable> params) -> std::unique_ptr<Optimizer> {
    if (kind == "LARS") {
      return std::make_unique<LARS>(std::move(params), LarsOptions{.lr = 1, .weight_decay = 0.01, .eta = 0.05});
    }
    return std::make_unique<LAMB>(std::move(params), LambOptions{.lr = 0.05});
  };
  std::vector<Variable> params = model_params(DType::f32);
  auto original = make(params);
  for (int k = 0; k < 3; ++k) {
    set_model_grads(params, k);
    original->step();
  }
  const NamedTensors snapshot = original->state();
  std::vector<Variable> resumed_params;
  for (const Variable& p : params) resumed_params.emplace_back(p.data().clone(), true);

  for (int k = 3; k < 6; ++k) {
    set_model_grads(params, k);
    original->step();
  }
  auto resumed = make(resumed_params);
  resumed->load_state(snapshot);
  CHECK(resumed->steps() == 3);
  for (int k = 3; k < 6; ++k) {
    set_model_grads(resumed_params, k);
    resumed->step();
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    CHECK(values_of(resumed_params[i]) == values_of(params[i]));
  }
}

TEST_CASE("LARS and LAMB refuse to be rebound to a parameter server's shards", "[cpu][optim]") {
  Variable w = f64_param({1.0, 2.0, 3.0, 4.0}, {2, 2});
  Variable shard(w.data().reshape({4}).narrow(0, 0, 2).clone(), true);
  LARS lars({w}, {});
  LAMB lamb({w}, {});
  CHECK_THROWS_WITH(lars.rebind({shard}), Catch::Contains("LARS") && Catch::Contains("whole parameter tensor"));
  CHECK_THROWS_WITH(lamb.rebind({shard}), Catch::Contains("LAMB") && Catch::Contains("whole parameter tensor"));
}

TEST_CASE("LARS and LAMB reject invalid options, naming them", "[cpu][optim]") {
  auto lars = [](LarsOptions o) { LARS opt({f64_param({1.0}, {1})}, o); };
  auto lamb = [](LambOptions o) { LAMB opt({f64_param({1.0}, {1})}, o); };
  CHECK_THROWS_WITH(lars({.lr = -0.1}), Catch::Contains("lr") && Catch::Contains("-0.1"));
  CHECK_THROWS_WITH(lars({.momentum = 1.0}), Catch::Contains("LARS") && Catch::Contains("momentum"));
  CHECK_THROWS_WITH(lars({.weight_decay = -1e-4}), Catch::Contains("weight_decay") && Catch::Contains("-0.0001"));
  CHECK_THROWS_WITH(lars({.eta = 0}), Catch::Contains("eta") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(lars({.eta = -1}), Catch::Contains("eta") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(lars({.eps = -1e-9}), Catch::Contains("eps") && Catch::Contains("-1e-09"));
  CHECK_THROWS_WITH(lars({.momentum = 0, .nesterov = true}),
                    Catch::Contains("nesterov") && Catch::Contains("momentum 0"));
  CHECK_NOTHROW(lars({.momentum = 0, .eps = 0}));

  CHECK_THROWS_WITH(lamb({.lr = -1}), Catch::Contains("lr") && Catch::Contains("-1"));
  CHECK_THROWS_WITH(lamb({.beta1 = 1.0}), Catch::Contains("LAMB") && Catch::Contains("beta1"));
  CHECK_THROWS_WITH(lamb({.beta2 = -0.1}), Catch::Contains("beta2") && Catch::Contains("-0.1"));
  CHECK_THROWS_WITH(lamb({.eps = 0}), Catch::Contains("eps") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(lamb({.weight_decay = NAN}), Catch::Contains("weight_decay") && Catch::Contains("nan"));
  CHECK_NOTHROW(lamb({.beta1 = 0, .beta2 = 0, .weight_decay = 0}));
}

}  // namespace dtrain::optim::test
