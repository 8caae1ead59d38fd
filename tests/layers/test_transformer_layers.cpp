// The layers a GPT or Llama block is built from: RMSNorm, LayerNorm without a bias, GELU's
// tanh form and SiLU, as modules.
#include "dtrain/layers/layers.h"
#include "support/test_support.h"

#include <cmath>

using namespace dtrain;
using namespace dtrain::nn;

TEST_CASE("RMSNorm: a weight of ones, x * rsqrt(mean(x^2, -1) + eps) * weight, gradients", "[layers][cpu]") {
  RMSNorm norm(6);
  auto named = norm.named_parameters();
  REQUIRE(named.size() == 1);
  CHECK(named[0].first == "weight");
  CHECK(max_abs_diff(norm.weight.data(), Tensor::ones({6})) == 0);
  CHECK(norm.describe() == "RMSNorm(6)");

  Tensor weight = norm.weight.data();  // shares the parameter's storage
  weight.copy_(test::random_tensor({6}, 1, DType::f32, 0.5, 1.5));
  const Tensor x = test::random_tensor({2, 3, 6}, 2);
  Variable xv(x, true);
  Variable y = norm(xv);
  // The same composed of generic ops.
  const Tensor expected = mul(mul(x, rsqrt(add(mean(square(x), {-1}, true), 1e-6))), norm.weight.data());
  test::require_close(y.data(), expected, 1e-6, 1e-6);
  sum(y).backward();
  REQUIRE(norm.weight.has_grad());
  REQUIRE(xv.has_grad());
  CHECK(norm.weight.grad().shape() == Shape{6});
  CHECK_THROWS_WITH(norm(Variable(Tensor::zeros({2, 5}))), Catch::Contains("RMSNorm(6)") && Catch::Contains("[2, 5]"));
}

TEST_CASE("LayerNorm(bias = false) has a weight only and matches LayerNorm with a zero bias", "[layers][cpu]") {
  LayerNorm plain({6}), no_bias({6}, 1e-5, true, false), bare({6}, 1e-5, false);
  CHECK(plain.named_parameters().size() == 2);
  REQUIRE(no_bias.named_parameters().size() == 1);
  CHECK(no_bias.named_parameters()[0].first == "weight");
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(bare.named_parameters().empty());
  CHECK(no_bias.describe() == "LayerNorm([6], bias=false)");
  const Tensor w = test::random_tensor({6}, 3, DType::f32, 0.5, 1.5);
  for (LayerNorm* layer : {&plain, &no_bias}) {
    Tensor weight = layer->weight.data();  // shares the parameter's storage
    weight.copy_(w);
  }
  const Tensor x = test::random_tensor({4, 6}, 4);
  test::require_close(no_bias(Variable(x)).data(), plain(Variable(x)).data(), 0, 0);
}

TEST_CASE("GELU(tanh) and SiLU modules", "[layers][cpu]") {
  const Tensor x = test::random_tensor({3, 4}, 5, DType::f32, -4, 4);
  GELU exact, approx(GeluApproximation::Tanh);
  SiLU silu_layer;
  test::require_close(exact(Variable(x)).data(), gelu(x), 0, 0);
  test::require_close(approx(Variable(x)).data(), gelu_tanh(x), 0, 0);
  test::require_close(silu_layer(Variable(x)).data(), silu(x), 0, 0);
  CHECK(approx.describe() == "GELU(approximate=tanh)");
  CHECK(silu_layer.describe() == "SiLU");
}
