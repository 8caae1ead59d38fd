#include "dtrain/optim/adam.h"
#include "dtrain/optim/sgd.h"

#include "optim/optim_test_helpers.h"
#include "support/test_support.h"

#include <algorithm>
#include <memory>

namespace dtrain::optim::test {
namespace {

std::unique_ptr<Optimizer> make_optimizer(const std::string& kind, std::vector<Variable> params) {
  if (kind == "SGD") return std::make_unique<SGD>(std::move(params), SgdOptions{.lr = 0.1, .momentum = 0.9});
  if (kind == "Adam") return std::make_unique<Adam>(std::move(params), AdamOptions{.lr = 0.01});
  return std::make_unique<AdamW>(std::move(params), AdamOptions{.lr = 0.01});
}

std::vector<Variable> fresh_params(const std::vector<std::vector<double>>& values) {
  return {f64_param(values[0], {2, 2}), f64_param(values[1], {3})};
}

void set_grads(std::vector<Variable>& params, int k) {
  set_grad(params[0], grad_at(k, 4));
  set_grad(params[1], grad_at(k, 3, 0.5));
}

bool has_entry(const NamedTensors& state, const std::string& name) {
  return std::any_of(state.begin(), state.end(), [&](const auto& e) { return e.first == name; });
}

}  // namespace

TEST_CASE("Optimizer state round trip continues identically", "[cpu][optim]") {
  const std::string kind = GENERATE(as<std::string>{}, "SGD", "Adam", "AdamW");
  INFO(kind);
  std::vector<Variable> params = fresh_params({{1.0, -2.0, 0.5, 3.0}, {0.1, 0.2, -0.3}});
  auto original = make_optimizer(kind, params);
  for (int k = 0; k < 3; ++k) {
    set_grads(params, k);
    original->step();
  }
  // The second parameter sits out one step, so its update count differs from steps().
  params[1].zero_grad();
  set_grad(params[0], grad_at(3, 4));
  original->step();
  original->set_lr(original->lr() / 2);

  const NamedTensors snapshot = original->state();
  std::vector<Variable> resumed_params = fresh_params({values_of(params[0]), values_of(params[1])});

  // Training continues after the snapshot; the snapshot must not follow it.
  for (int k = 4; k < 7; ++k) {
    set_grads(params, k);
    original->step();
  }

  auto resumed = make_optimizer(kind, resumed_params);
  resumed->load_state(snapshot);
  CHECK(resumed->steps() == 4);
  CHECK(resumed->lr() == original->lr());
  for (int k = 4; k < 7; ++k) {
    set_grads(resumed_params, k);
    resumed->step();
  }
  CHECK(values_of(resumed_params[0]) == values_of(params[0]));
  CHECK(values_of(resumed_params[1]) == values_of(params[1]));
  CHECK(resumed->steps() == original->steps());
}

TEST_CASE("Optimizer state names its entries and holds only the buffers created", "[cpu][optim]") {
  Variable a = f64_param({1.0, 2.0}, {2});
  Variable b = f64_param({3.0}, {1});
  SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.5});
  NamedTensors before = sgd.state();
  CHECK(before.size() == 3);
  CHECK(has_entry(before, "lr"));
  CHECK(has_entry(before, "steps"));
  CHECK(has_entry(before, "updates"));

  set_grad(b, {1.0});
  sgd.step();
  NamedTensors after = sgd.state();
  CHECK(after.size() == 4);
  CHECK(has_entry(after, "momentum_buffer.1"));
  CHECK_FALSE(has_entry(after, "momentum_buffer.0"));
  auto updates = std::find_if(after.begin(), after.end(), [](const auto& e) { return e.first == "updates"; });
  CHECK(updates->second.to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1});
}

TEST_CASE("Optimizer load_state rejects mismatched state and then changes nothing", "[cpu][optim]") {
  Variable a = f64_param({1.0, 2.0}, {2});
  Variable b = f64_param({3.0, 4.0, 5.0}, {3});
  Adam adam({a, b}, {.lr = 0.01});
  set_grad(a, {0.5, -0.5});
  set_grad(b, {1.0, 1.0, 1.0});
  adam.step();
  const NamedTensors good = adam.state();

  auto with = [&](const std::string& key, Tensor value) {
    NamedTensors s = good;
    for (auto& e : s) {
      if (e.first == key) e.second = value;
    }
    return s;
  };
  auto without = [&](const std::string& key) {
    NamedTensors s;
    for (const auto& e : good) {
      if (e.first != key) s.push_back(e);
    }
    return s;
  };
  auto plus = [&](const std::string& key, Tensor value) {
    NamedTensors s = good;
    s.emplace_back(key, value);
    return s;
  };

  SGD sgd({a, b}, {.lr = 0.5, .momentum = 0.9});
  CHECK_THROWS_WITH(sgd.load_state(good), Catch::Contains("exp_avg"));
  CHECK(sgd.lr() == 0.5);

  CHECK_THROWS_WITH(adam.load_state(with("exp_avg.1", Tensor::zeros({2}, {DType::f64}))),
                    Catch::Contains("exp_avg.1") && Catch::Contains("[2]") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(adam.load_state(without("lr")), Catch::Contains("lr"));
  CHECK_THROWS_WITH(adam.load_state(without("updates")), Catch::Contains("updates"));
  CHECK_THROWS_WITH(adam.load_state(plus("exp_avg.2", Tensor::zeros({1}))), Catch::Contains("parameter 2"));
  CHECK_THROWS_WITH(adam.load_state(plus("exp_avg.x", Tensor::zeros({1}))), Catch::Contains("exp_avg.x"));
  CHECK_THROWS_WITH(adam.load_state(plus("lr", Tensor::scalar(1.0))), Catch::Contains("twice"));
  CHECK_THROWS_WITH(adam.load_state(with("lr", Tensor::scalar(-1.0))), Catch::Contains("lr"));
  CHECK(adam.steps() == 1);
  CHECK(adam.lr() == 0.01);

  // An f32 checkpoint of the buffers is converted to the parameters' dtype.
  NamedTensors as_f32 = good;
  for (auto& e : as_f32) {
    if (e.first.starts_with("exp_avg")) e.second = e.second.to(DType::f32);
  }
  adam.load_state(as_f32);
  auto state = adam.state();
  for (const auto& e : state) {
    if (e.first.starts_with("exp_avg")) CHECK(e.second.dtype() == DType::f64);
  }
}

TEST_CASE("Optimizer basics: zero_grad, steps, lr, parameter checks", "[cpu][optim]") {
  Variable a = f64_param({1.0, 2.0}, {2});
  Variable b = f64_param({3.0}, {1});
  SGD sgd({a, b}, {.lr = 0.1});
  CHECK(sgd.params().size() == 2);
  CHECK(sgd.params()[1].is(b));

  set_grad(a, {1.0, 1.0});
  set_grad(b, {1.0});
  sgd.step();
  CHECK(sgd.steps() == 1);
  sgd.zero_grad();
  CHECK_FALSE(a.has_grad());
  CHECK_FALSE(b.has_grad());
  sgd.step();  // nothing has a gradient: a no-op that still counts
  CHECK(sgd.steps() == 2);
  require_values(a, {0.9, 1.9});

  sgd.set_lr(0.01);
  CHECK(sgd.lr() == 0.01);
  CHECK_THROWS_WITH(sgd.set_lr(-0.5), Catch::Contains("lr") && Catch::Contains("-0.5"));
  CHECK(sgd.lr() == 0.01);

  CHECK_THROWS_WITH(SGD({}, {}), Catch::Contains("empty"));
  CHECK_THROWS_WITH(SGD({a, b, a}, {}), Catch::Contains("parameter 2") && Catch::Contains("more than once"));
  Variable ints(Tensor::zeros({2}, {DType::i64}));
  CHECK_THROWS_WITH(SGD({a, ints}, {}), Catch::Contains("parameter 1") && Catch::Contains("i64"));
}


TEST_CASE("rebind: one optimizer per shard of a parameter updates it as the whole optimizer does",
          "[cpu][optim]") {
  // A parameter server splits a parameter across servers, each updating its part with a
  // rebound copy of the optimizer; elementwise rules make the parts' updates the whole's.
  for (const std::string kind : {"SGD", "Adam", "AdamW"}) {
    INFO(kind);
    std::vector<Variable> whole = fresh_params({{1, -2, 3, 0.5}, {0.25, -1, 2}});
    auto optimizer = make_optimizer(kind, whole);
    optimizer->set_lr(0.05);
    // The second parameter's elements as two shards: [0, 1) and [1, 3).
    Variable left(whole[1].data().narrow(0, 0, 1).clone(), true);
    Variable right(whole[1].data().narrow(0, 1, 2).clone(), true);
    auto left_opt = optimizer->rebind({left});
    auto right_opt = optimizer->rebind({right});
    CHECK(left_opt->lr() == 0.05);
    for (int k = 0; k < 3; ++k) {
      set_grads(whole, k);
      optimizer->step();
      const std::vector<double> g = grad_at(k, 3, 0.5);
      set_grad(left, {g[0]});
      set_grad(right, {g[1], g[2]});
      left_opt->step();
      right_opt->step();
    }
    CHECK(max_abs_diff(whole[1].data().narrow(0, 0, 1), left.data()) < 1e-12);
    CHECK(max_abs_diff(whole[1].data().narrow(0, 1, 2), right.data()) < 1e-12);
  }
}

}  // namespace dtrain::optim::test
