#include "dtrain/optim/loss_scaler.h"

#include "dtrain/autograd/functions.h"
#include "dtrain/layers/linear.h"
#include "dtrain/optim/sgd.h"
#include "optim/optim_test_helpers.h"
#include "support/test_support.h"

#include <cmath>
#include <limits>

namespace dtrain::optim::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The scalar entry `key` of a state.
double entry(const NamedTensors& state, const std::string& key) {
  for (const auto& [k, t] : state) {
    if (k == key) return t.item();
  }
  FAIL("no entry " << key);
  return 0;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && max_abs_diff(a, b) == 0;
}

// One finite step: gradients set by hand, already multiplied by the scale.
void scaled_step(LossScaler& scaler, Optimizer& opt, Variable& p, const std::vector<double>& g) {
  std::vector<double> scaled = g;
  for (double& x : scaled) x *= scaler.scale_value();
  set_grad(p, scaled);
  scaler.step(opt);
  scaler.update();
}

}  // namespace

TEST_CASE("LossScaler multiplies the loss, and so every gradient, by the scale", "[cpu][optim]") {
  LossScaler scaler({.init_scale = 1024});
  Variable w = f64_param({0.5, -1.5, 2.0}, {3});
  const Tensor x = Tensor::from_vector(std::vector<double>{3.0, 0.25, -7.0}, {3});
  Variable loss = sum(mul(w, Variable(x)));
  Variable scaled = scaler.scale(loss);
  CHECK(scaled.item() == loss.item() * 1024);
  scaled.backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{3.0 * 1024, 0.25 * 1024, -7.0 * 1024});

  SGD sgd({w}, {.lr = 0.1});
  scaler.unscale(sgd);
  CHECK(w.grad().to_vector<double>() == std::vector<double>{3.0, 0.25, -7.0});
}

TEST_CASE("LossScaler::unscale restores gradients exactly for a power-of-two scale", "[cpu][optim]") {
  const DType dtype = GENERATE(DType::f32, DType::f64);
  INFO(dtype_name(dtype));
  const Tensor g = dtrain::test::random_tensor({64, 33}, 3, dtype, -10, 10);
  Variable w(Tensor::zeros({64, 33}, {dtype}), true);
  Variable unused(Tensor::zeros({2}, {dtype}), true);  // no gradient: left alone
  SGD sgd({w, unused}, {.lr = 0.1});
  LossScaler scaler({.init_scale = 0x1p20});
  w.set_grad(mul(g, scaler.scale_value()));
  scaler.unscale(sgd);
  CHECK(same_bits(w.grad(), g));
  CHECK_FALSE(unused.has_grad());
}

TEST_CASE("LossScaler::unscale does not write through a strided gradient view", "[cpu][optim]") {
  const Tensor source = Tensor::from_vector(std::vector<double>{8, 16, 24, 32, 40, 48}, {2, 3});
  Variable w = f64_param({0, 0, 0, 0, 0, 0}, {3, 2});
  w.set_grad(source.t());
  SGD sgd({w}, {.lr = 0.1});
  LossScaler scaler({.init_scale = 8});
  scaler.unscale(sgd);
  CHECK(source.to_vector<double>() == std::vector<double>{8, 16, 24, 32, 40, 48});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("LossScaler skips the step on an inf or NaN gradient and backs off", "[cpu][optim]") {
  // as<double>: Catch 2.13 keeps a reference to an lvalue first value, which dangles.
  const double bad = GENERATE(as<double>{}, kInf, -kInf, kNaN);
  const DType dtype = GENERATE(DType::f32, DType::f64);
  INFO("bad value " << bad << ", " << dtype_name(dtype));
  // b is large enough for the parallel, chunked path of the CPU sum.
  const std::int64_t n = 300000;
  Variable a(Tensor::full({4}, 1.0, {dtype}), true);
  Variable b(Tensor::full({n}, -2.0, {dtype}), true);
  SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9});
  LossScaler scaler({.init_scale = 256});

  // One finite step creates the momentum buffers.
  a.set_grad(Tensor::full({4}, 256.0, {dtype}));
  b.set_grad(Tensor::full({n}, 512.0, {dtype}));
  CHECK(scaler.step(sgd));
  scaler.update();
  const Tensor a_before = a.data().clone();
  const Tensor b_before = b.data().clone();
  const NamedTensors sgd_before = sgd.state();

  a.set_grad(Tensor::full({4}, 256.0, {dtype}));
  Tensor gb = Tensor::full({n}, 512.0, {dtype});
  gb.narrow(0, 200001, 1).fill_(bad);
  b.set_grad(gb);
  CHECK_FALSE(scaler.step(sgd));
  scaler.update();
  CHECK(scaler.scale_value() == 128);
  CHECK(same_bits(a.data(), a_before));
  CHECK(same_bits(b.data(), b_before));
  const NamedTensors sgd_after = sgd.state();
  REQUIRE(sgd_after.size() == sgd_before.size());
  for (std::size_t i = 0; i < sgd_after.size(); ++i) {
    INFO(sgd_after[i].first);
    CHECK(sgd_after[i].first == sgd_before[i].first);
    CHECK(same_bits(sgd_after[i].second, sgd_before[i].second));
  }
  CHECK(sgd.steps() == 1);
}

TEST_CASE("LossScaler::mark_nonfinite skips a step whose own gradients are finite", "[cpu][optim]") {
  // Another pipeline stage found an inf: this stage must skip and back off as well.
  Variable p(Tensor::full({3}, 1.0), true);
  SGD sgd({p}, {.lr = 0.1});
  LossScaler scaler({.init_scale = 64});
  CHECK_THROWS_WITH(scaler.mark_nonfinite(sgd), Catch::Contains("call unscale() for this optimizer first"));
  p.set_grad(Tensor::full({3}, 64.0));
  scaler.unscale(sgd);
  scaler.mark_nonfinite(sgd);
  CHECK_FALSE(scaler.step(sgd));
  scaler.update();
  CHECK(scaler.scale_value() == 32);
  CHECK(p.data().to_vector<float>() == std::vector<float>{1, 1, 1});
  // The next step, unmarked, is taken.
  p.set_grad(Tensor::full({3}, 32.0));
  CHECK(scaler.step(sgd));
  scaler.update();
  CHECK(p.data().to_vector<float>()[0] == Approx(0.9));
  // After step(), marking is too late.
  p.set_grad(Tensor::full({3}, 32.0));
  CHECK(scaler.step(sgd));
  CHECK_THROWS_WITH(scaler.mark_nonfinite(sgd), Catch::Contains("before step()"));
  scaler.update();
}

TEST_CASE("LossScaler detects a gradient that overflows only when unscaled", "[cpu][optim]") {
  // After backoffs the scale may fall below 1; unscaling then multiplies and can overflow.
  Variable w(Tensor::zeros({2}), true);
  SGD sgd({w}, {.lr = 0.1});
  LossScaler scaler({.init_scale = 0.25});
  w.set_grad(Tensor::full({2}, 1e38));  // finite in f32; 4e38 is not
  CHECK_FALSE(scaler.step(sgd));
  scaler.update();
  CHECK(scaler.scale_value() == 0.125);
  CHECK(w.data().to_vector<float>() == std::vector<float>{0, 0});
}

TEST_CASE("LossScaler grows the scale after growth_interval finite steps in a row", "[cpu][optim]") {
  Variable p = f64_param({1.0, 2.0}, {2});
  SGD sgd({p}, {.lr = 0.125});
  LossScaler scaler({.init_scale = 8, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 3});
  scaled_step(scaler, sgd, p, {1, 1});
  scaled_step(scaler, sgd, p, {1, 1});
  CHECK(scaler.scale_value() == 8);
  CHECK(entry(scaler.state(), "growth_tracker") == 2);
  scaled_step(scaler, sgd, p, {1, 1});
  CHECK(scaler.scale_value() == 32);
  CHECK(entry(scaler.state(), "growth_tracker") == 0);

  scaled_step(scaler, sgd, p, {1, 1});
  scaled_step(scaler, sgd, p, {kNaN, 1});  // resets the count of finite steps
  CHECK(scaler.scale_value() == 8);
  CHECK(entry(scaler.state(), "growth_tracker") == 0);
  scaled_step(scaler, sgd, p, {1, 1});
  scaled_step(scaler, sgd, p, {1, 1});
  CHECK(scaler.scale_value() == 8);
  scaled_step(scaler, sgd, p, {1, 1});
  CHECK(scaler.scale_value() == 32);
  // Seven of the eight steps were taken, each moving p by -0.125.
  require_values(p, {1.0 - 7 * 0.125, 2.0 - 7 * 0.125});
  CHECK(sgd.steps() == 7);
}

TEST_CASE("LossScaler does not grow the scale to infinity", "[cpu][optim]") {
  Variable p = f64_param({1.0}, {1});
  SGD sgd({p}, {.lr = 0});
  LossScaler scaler({.init_scale = 0x1p1023, .growth_interval = 1});
  set_grad(p, {0.0});
  scaler.step(sgd);
  scaler.update();
  CHECK(scaler.scale_value() == 0x1p1023);
}

TEST_CASE("LossScaler passes everything through when disabled", "[cpu][optim]") {
  LossScaler scaler({.init_scale = 1024, .enabled = false});
  CHECK_FALSE(scaler.enabled());
  CHECK(scaler.scale_value() == 1);
  Variable w = f64_param({1.0, 2.0}, {2});
  Variable loss = sum(w);
  CHECK(scaler.scale(loss).is(loss));

  SGD sgd({w}, {.lr = 0.5});
  set_grad(w, {2.0, kInf});
  scaler.unscale(sgd);
  scaler.unscale(sgd);
  CHECK(w.grad().to_vector<double>() == std::vector<double>{2.0, kInf});
  CHECK(scaler.step(sgd));  // steps even on inf: nothing is checked
  CHECK(sgd.steps() == 1);
  scaler.update();
  scaler.update();
  CHECK(scaler.scale_value() == 1);
  CHECK(scaler.state().empty());
  CHECK_NOTHROW(scaler.load_state({{"scale", Tensor::scalar(-1.0, {DType::f64})}}));
}

TEST_CASE("LossScaler state round trips through state()/load_state()", "[cpu][optim]") {
  Variable p = f64_param({1.0}, {1});
  SGD sgd({p}, {.lr = 0.1});
  const LossScalerOptions options{.init_scale = 64, .growth_interval = 3};
  LossScaler a(options);
  scaled_step(a, sgd, p, {kInf});
  scaled_step(a, sgd, p, {1.0});
  scaled_step(a, sgd, p, {1.0});
  const NamedTensors state = a.state();
  REQUIRE(state.size() == 2);
  CHECK(state[0].first == "scale");
  CHECK(state[0].second.dtype() == DType::f64);
  CHECK(state[1].first == "growth_tracker");
  CHECK(state[1].second.dtype() == DType::i64);
  CHECK(entry(state, "scale") == 32);
  CHECK(entry(state, "growth_tracker") == 2);

  LossScaler b(options);
  b.load_state(state);
  CHECK(b.scale_value() == 32);
  // The restored tracker makes the next finite step the third in a row: both grow.
  scaled_step(a, sgd, p, {1.0});
  scaled_step(b, sgd, p, {1.0});
  CHECK(a.scale_value() == 64);
  CHECK(b.scale_value() == 64);
}

TEST_CASE("LossScaler::load_state rejects a bad state and leaves the scaler unchanged", "[cpu][optim]") {
  LossScaler scaler({.init_scale = 16});
  auto f64 = [](double v) { return Tensor::scalar(v, {DType::f64}); };
  auto i64 = [](double v) { return Tensor::scalar(v, {DType::i64}); };
  CHECK_THROWS_WITH(scaler.load_state({{"scale", f64(8)}}), Catch::Contains("lacks 'growth_tracker'"));
  CHECK_THROWS_WITH(scaler.load_state({{"growth_tracker", i64(1)}}), Catch::Contains("lacks 'scale'"));
  CHECK_THROWS_WITH(scaler.load_state({{"scale", f64(8)}, {"growth_tracker", i64(1)}, {"lr", f64(1)}}),
                    Catch::Contains("unknown entry 'lr'"));
  CHECK_THROWS_WITH(scaler.load_state({{"scale", f64(8)}, {"scale", f64(8)}, {"growth_tracker", i64(1)}}),
                    Catch::Contains("'scale' appears twice"));
  CHECK_THROWS_WITH(scaler.load_state({{"scale", f64(0)}, {"growth_tracker", i64(1)}}),
                    Catch::Contains("'scale' must be a finite number > 0, got 0"));
  CHECK_THROWS_WITH(scaler.load_state({{"scale", f64(kInf)}, {"growth_tracker", i64(1)}}),
                    Catch::Contains("'scale' must be a finite number > 0, got inf"));
  CHECK_THROWS_WITH(scaler.load_state({{"scale", f64(8)}, {"growth_tracker", i64(-1)}}),
                    Catch::Contains("'growth_tracker' must be a count >= 0, got -1"));
  CHECK_THROWS_WITH(scaler.load_state({{"scale", Tensor::ones({2}, {DType::f64})}, {"growth_tracker", i64(1)}}),
                    Catch::Contains("'scale' must hold one value"));
  CHECK(scaler.scale_value() == 16);
  CHECK(entry(scaler.state(), "growth_tracker") == 0);
}

TEST_CASE("LossScaler rejects invalid options, naming them", "[cpu][optim]") {
  auto make = [](LossScalerOptions o) { LossScaler scaler(o); };
  CHECK_THROWS_WITH(make({.init_scale = 0}), Catch::Contains("init_scale") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(make({.init_scale = -2}), Catch::Contains("init_scale") && Catch::Contains("got -2"));
  CHECK_THROWS_WITH(make({.init_scale = kInf}), Catch::Contains("init_scale") && Catch::Contains("got inf"));
  CHECK_THROWS_WITH(make({.init_scale = kNaN}), Catch::Contains("init_scale") && Catch::Contains("got nan"));
  CHECK_THROWS_WITH(make({.growth_factor = 1}), Catch::Contains("growth_factor must be a finite number > 1, got 1"));
  CHECK_THROWS_WITH(make({.growth_factor = 0.5}), Catch::Contains("growth_factor") && Catch::Contains("got 0.5"));
  CHECK_THROWS_WITH(make({.backoff_factor = 1}), Catch::Contains("backoff_factor must be in (0, 1), got 1"));
  CHECK_THROWS_WITH(make({.backoff_factor = 0}), Catch::Contains("backoff_factor") && Catch::Contains("got 0"));
  CHECK_THROWS_WITH(make({.backoff_factor = kNaN}), Catch::Contains("backoff_factor") && Catch::Contains("nan"));
  CHECK_THROWS_WITH(make({.growth_interval = 0}), Catch::Contains("growth_interval must be >= 1, got 0"));
  CHECK_THROWS_WITH(make({.growth_interval = -5}), Catch::Contains("growth_interval") && Catch::Contains("-5"));
  // Checked when disabled too, so that enabling a configuration later cannot fail.
  CHECK_THROWS_WITH(make({.growth_interval = 0, .enabled = false}), Catch::Contains("growth_interval"));
}

TEST_CASE("LossScaler enforces one unscale and one step per optimizer per update", "[cpu][optim]") {
  Variable p = f64_param({1.0}, {1});
  Variable q = f64_param({1.0}, {1});
  SGD sgd_p({p}, {.lr = 0.5});
  SGD sgd_q({q}, {.lr = 0.5});
  LossScaler scaler({.init_scale = 2});
  CHECK_THROWS_WITH(scaler.update(), Catch::Contains("no unscale() or step() since the last update()"));

  set_grad(p, {2.0});
  set_grad(q, {2.0});
  scaler.unscale(sgd_p);
  CHECK_THROWS_WITH(scaler.unscale(sgd_p), Catch::Contains("unscale: already called"));
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1.0});  // not unscaled twice
  CHECK(scaler.step(sgd_p));
  CHECK_THROWS_WITH(scaler.unscale(sgd_p), Catch::Contains("step() was already called"));
  CHECK_THROWS_WITH(scaler.step(sgd_p), Catch::Contains("step: already called"));
  CHECK(sgd_p.steps() == 1);
  CHECK(scaler.step(sgd_q));  // another optimizer has its own stage
  scaler.update();
  require_values(p, {0.5});
  require_values(q, {0.5});

  // After update() a new step may unscale again.
  set_grad(p, {2.0});
  CHECK_NOTHROW(scaler.unscale(sgd_p));
  CHECK_NOTHROW(scaler.step(sgd_p));
  scaler.update();
}

TEST_CASE("LossScaler backs off when any optimizer of the step saw an inf", "[cpu][optim]") {
  Variable p = f64_param({1.0}, {1});
  Variable q = f64_param({1.0}, {1});
  SGD sgd_p({p}, {.lr = 0.5});
  SGD sgd_q({q}, {.lr = 0.5});
  LossScaler scaler({.init_scale = 4});
  set_grad(p, {4.0});
  set_grad(q, {kInf});
  CHECK(scaler.step(sgd_p));
  CHECK_FALSE(scaler.step(sgd_q));
  scaler.update();
  CHECK(scaler.scale_value() == 2);
  require_values(p, {0.5});
  require_values(q, {1.0});
}

namespace {

// Full-batch training of a Linear(4, 3) model on a fixed batch, from a fixed seed. With a
// scaler the loss is scaled and the steps go through it; returns the steps it took.
int train_linear(nn::Linear& model, int steps, LossScaler* scaler) {
  const Tensor x = dtrain::test::random_tensor({8, 4}, 11);
  const Tensor y = dtrain::test::random_tensor({8, 3}, 12);
  SGD sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  int taken = 0;
  for (int k = 0; k < steps; ++k) {
    sgd.zero_grad();
    Variable loss = mse_loss(model.forward(Variable(x)), Variable(y));
    if (scaler) {
      scaler->scale(loss).backward();
      taken += scaler->step(sgd) ? 1 : 0;
      scaler->update();
    } else {
      loss.backward();
      sgd.step();
      ++taken;
    }
  }
  return taken;
}

void require_same_parameters(const nn::Linear& a, const nn::Linear& b) {
  CHECK(same_bits(a.weight.data(), b.weight.data()));
  CHECK(same_bits(a.bias.data(), b.bias.data()));
}

}  // namespace

TEST_CASE("Training with a LossScaler matches training without one, bit for bit", "[cpu][optim]") {
  manual_seed(5);
  nn::Linear plain(4, 3);
  manual_seed(5);
  nn::Linear scaled(4, 3);
  // growth_interval 3: the scale grows from 2^10 to 2^20 over the run, changing mid-way.
  LossScaler scaler({.init_scale = 0x1p10, .growth_interval = 3});
  train_linear(plain, 30, nullptr);
  CHECK(train_linear(scaled, 30, &scaler) == 30);
  CHECK(scaler.scale_value() == 0x1p20);
  require_same_parameters(plain, scaled);
}

TEST_CASE("Training with a LossScaler recovers from overflow by skipping steps", "[cpu][optim]") {
  // 2^140 overflows f32 (max ~2^128): the first steps are skipped while the scale backs
  // off, and growing every 2 steps overflows again now and then. The steps taken are
  // exactly those of a plain run on the same fixed batch.
  manual_seed(6);
  nn::Linear scaled(4, 3);
  LossScaler scaler({.init_scale = 0x1p140, .growth_interval = 2});
  const int taken = train_linear(scaled, 40, &scaler);
  CHECK(taken < 40);
  CHECK(taken > 10);
  CHECK(scaler.scale_value() < 0x1p128);
  manual_seed(6);
  nn::Linear plain(4, 3);
  train_linear(plain, taken, nullptr);
  require_same_parameters(plain, scaled);
}

}  // namespace dtrain::optim::test
