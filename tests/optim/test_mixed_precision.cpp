// Mixed precision end to end: autocast (dtrain/autograd/autocast.h) with the dynamic loss
// scaler, on the CPU, where the 16-bit products are emulated exactly.
#include "dtrain/autograd/autocast.h"
#include "dtrain/layers/layers.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/sgd.h"
#include "support/test_support.h"

#include <catch2/catch.hpp>

#include <tuple>

using namespace dtrain;
using dtrain::test::random_tensor;

// A small classifier trained with f16 autocast and dynamic loss scaling ends close to the
// same training in f32 (f16 rounds operands to 11 significant bits), and its parameters
// and gradients stay f32 throughout.
TEST_CASE("mixed-precision training with a loss scaler tracks f32 training", "[autograd][autocast]") {
  auto make = [] {
    manual_seed(3);
    return nn::mlp(8, {16}, 3);
  };
  const Tensor x = random_tensor({32, 8}, 11);
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 3);
  const Tensor y = Tensor::from_vector(labels, {32});

  auto train = [&](bool mixed) {
    auto model = make();
    optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::LossScaler scaler({.init_scale = 1024, .enabled = mixed});
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      sgd.zero_grad();
      Variable loss;
      {
        AutocastGuard autocast(DType::f16, mixed);
        loss = cross_entropy(model->forward(Variable(x)), y);
      }
      (step == 0 ? first : last) = loss.data().item();
      scaler.scale(loss).backward();
      for (const auto& p : model->parameters()) REQUIRE(p.grad().dtype() == DType::f32);
      scaler.step(sgd);
      scaler.update();
    }
    std::vector<Tensor> params;
    for (const auto& p : model->parameters()) params.push_back(p.data());
    return std::make_tuple(first, last, params);
  };
  const auto [f32_first, f32_last, f32_params] = train(false);
  const auto [amp_first, amp_last, amp_params] = train(true);
  INFO("loss: f32 " << f32_first << " -> " << f32_last << ", mixed " << amp_first << " -> " << amp_last);
  CHECK(amp_last < 0.7 * amp_first);  // it learns
  CHECK(std::abs(amp_last - f32_last) < 5e-3);
  for (std::size_t i = 0; i < f32_params.size(); ++i) {
    CHECK(amp_params[i].dtype() == DType::f32);
    CHECK(max_abs_diff(amp_params[i], f32_params[i]) < 5e-3);
    CHECK(max_abs_diff(amp_params[i], f32_params[i]) > 0);  // f16 rounding did happen
  }
}
