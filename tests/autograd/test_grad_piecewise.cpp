// Gradients of the piecewise ops (abs, clamp, amax/amin): finite differences in f64 away
// from their kinks and ties, exact values at them (where finite differences cannot decide),
// and their argument errors.
#include "dtrain/autograd/functions.h"
#include "support/test_support.h"

#include <cmath>

using namespace dtrain;
using test::require_close;
using test::require_grad_ok;

namespace {
using Inputs = const std::vector<Variable>&;

Variable vec(const std::vector<double>& values, const Shape& shape) {
  return Variable(Tensor::from_vector<double>(values, shape), true);
}

Tensor values(const std::vector<double>& v, const Shape& shape) { return Tensor::from_vector<double>(v, shape); }

// Distinct values (a permutation of 0..n-1, halved), so that amax/amin have no ties.
Variable distinct(const Shape& shape) {
  const std::int64_t n = shape_numel(shape);
  Tensor t = Tensor::arange(0, static_cast<double>(n), 1, {DType::f64});
  return Variable(mul(index_select(t, 0, randperm(n)), 0.5).reshape(shape), true);
}
}  // namespace

TEST_CASE("grad: abs, clamp, amax, amin away from kinks and ties", "[autograd][cpu]") {
  // |x| in [0.1, 2] with both signs: at least 0.1 from abs's kink.
  Tensor t = test::random_tensor({4, 6}, 51, DType::f64, 0.1, 2.0);
  Variable x(mul(t, values({1, -1, 1, -1, 1, -1}, {6})), true);
  require_grad_ok([](Inputs in) { return abs(in[0]); }, {x});

  // Below, between and above the bounds -0.5 and 0.7, each at least 0.1 from them.
  auto c = vec({-2, -0.9, -0.6, -0.4, 0, 0.3, 0.6, 0.8, 1.5, 3}, {2, 5});
  require_grad_ok([](Inputs in) { return clamp(in[0], -0.5, 0.7); }, {c});
  require_grad_ok([](Inputs in) { return clamp(in[0], -0.5, std::nullopt); }, {c});
  require_grad_ok([](Inputs in) { return clamp(in[0], std::nullopt, 0.7); }, {c});

  auto y = distinct({2, 3, 4});
  for (auto* f : {&amax, &amin}) {
    require_grad_ok([f](Inputs in) { return f(in[0], {}, false); }, {y});
    require_grad_ok([f](Inputs in) { return f(in[0], {1}, false); }, {y});
    require_grad_ok([f](Inputs in) { return f(in[0], {0, 2}, true); }, {y});
    require_grad_ok([f](Inputs in) { return f(in[0], {-1}, false); }, {y});
  }
}

TEST_CASE("abs passes no gradient at 0", "[autograd][cpu]") {
  auto x = vec({-2, 0, 3, -0.0}, {4});
  Variable y = abs(x);
  require_close(y.data(), values({2, 0, 3, 0}, {4}));
  y.backward(values({5, 7, 11, 13}, {4}));
  require_close(x.grad(), values({-5, 0, 11, 0}, {4}), 0, 0);
}

TEST_CASE("clamp passes the gradient at its bounds and none beyond them", "[autograd][cpu]") {
  const Tensor g = values({1, 2, 3, 4, 5, 6}, {6});
  auto x = vec({-1, -0.5, 0, 0.7, 1, -0.25}, {6});
  Variable both = clamp(x, -0.5, 0.7);
  require_close(both.data(), values({-0.5, -0.5, 0, 0.7, 0.7, -0.25}, {6}));
  both.backward(g);
  require_close(x.grad(), values({0, 2, 3, 4, 0, 6}, {6}), 0, 0);

  x.zero_grad();
  clamp(x, -0.5, std::nullopt).backward(g);
  require_close(x.grad(), values({0, 2, 3, 4, 5, 6}, {6}), 0, 0);

  x.zero_grad();
  clamp(x, std::nullopt, 0.7).backward(g);
  require_close(x.grad(), values({1, 2, 3, 4, 0, 6}, {6}), 0, 0);

  // min == max: every element becomes the bound, and only the one equal to it has a gradient.
  x.zero_grad();
  Variable pinned = clamp(x, 0.7, 0.7);
  require_close(pinned.data(), Tensor::full({6}, 0.7, {DType::f64}));
  pinned.backward(g);
  require_close(x.grad(), values({0, 0, 0, 4, 0, 0}, {6}), 0, 0);
}

TEST_CASE("clamp keeps NaN and gives it no gradient", "[autograd][cpu]") {
  auto x = vec({std::nan(""), 2}, {2});
  Variable y = clamp(x, -1, 1);
  const auto out = y.data().to_vector<double>();
  CHECK(std::isnan(out[0]));
  CHECK(out[1] == 1);
  y.backward(values({3, 3}, {2}));
  require_close(x.grad(), values({0, 0}, {2}), 0, 0);
}

TEST_CASE("amax and amin share the gradient evenly among tied elements", "[autograd][cpu]") {
  auto x = vec({1, 3, 3,
                2, 2, 2}, {2, 3});
  Variable rows = amax(x, {1});
  require_close(rows.data(), values({3, 2}, {2}));
  rows.backward(values({6, 9}, {2}));
  require_close(x.grad(), values({0, 3, 3,
                                  3, 3, 3}, {2, 3}), 0, 0);

  // All dims: one extreme for the whole tensor, tied across rows.
  x.zero_grad();
  Variable low = amin(x);
  CHECK(low.dim() == 0);
  CHECK(low.item() == 1);
  low.backward(values({6}, {}));
  require_close(x.grad(), values({6, 0, 0, 0, 0, 0}, {2, 3}), 0, 0);

  // A negative dim with keepdim: columns, where (2, 2) and (3, 2) hold ties.
  x.zero_grad();
  Variable cols = amin(x, {-2}, true);
  REQUIRE(cols.shape() == Shape{1, 3});
  require_close(cols.data(), values({1, 2, 2}, {1, 3}));
  cols.backward(values({4, 4, 8}, {1, 3}));
  require_close(x.grad(), values({4, 0, 0,
                                  0, 4, 8}, {2, 3}), 0, 0);

  // Three-way tie over all dims.
  auto z = vec({5, 1, 5, 5}, {2, 2});
  amax(z).backward(values({6}, {}));
  require_close(z.grad(), values({2, 0, 2, 2}, {2, 2}), 0, 0);
}

TEST_CASE("amax, amin and sum of a 0-d tensor take dim 0", "[autograd][cpu]") {
  auto x = vec({4}, {});
  Variable y = amax(x, {0}, true);
  CHECK(y.dim() == 0);
  y.backward(values({3}, {}));
  require_close(x.grad(), values({3}, {}), 0, 0);
  x.zero_grad();
  sum(amin(x, {0}), {0}).backward(values({2}, {}));
  require_close(x.grad(), values({2}, {}), 0, 0);
}

TEST_CASE("clamp, amax and amin reject bad arguments", "[autograd][cpu]") {
  auto x = vec({1, 2, 3, 4}, {2, 2});
  CHECK_THROWS_WITH(clamp(x, std::nullopt, std::nullopt), Catch::Contains("clamp: needs a min, a max or both"));
  CHECK_THROWS_WITH(clamp(x, 2.0, 1.0), Catch::Contains("clamp: min 2 is greater than max 1"));
  CHECK_THROWS_WITH(clamp(x, std::nan(""), 1.0), Catch::Contains("clamp: a bound is NaN"));
  CHECK_THROWS_WITH(clamp(x, std::nullopt, std::nan("")), Catch::Contains("clamp: a bound is NaN"));
  CHECK_THROWS_WITH(amax(x, {2}), Catch::Contains("amax: dim 2 out of range for a 2-d tensor"));
  CHECK_THROWS_WITH(amin(x, {-3}), Catch::Contains("amin: dim -3 out of range for a 2-d tensor"));
  Variable empty(Tensor::zeros({2, 0}, {DType::f64}), true);
  CHECK_THROWS_WITH(amax(empty, {1}), Catch::Contains("cannot reduce over dim 1 of size 0"));
  // Reducing the dim that is not empty is fine: an empty result, as in PyTorch.
  CHECK(amax(empty, {0}).shape() == Shape{0});
}

namespace {
// Equal values, NaN matching NaN.
void require_same(const Tensor& actual, const Tensor& expected) {
  INFO("actual:   " << actual.str() << "\nexpected: " << expected.str());
  REQUIRE(actual.shape() == expected.shape());
  const std::vector<double> a = actual.to_vector<double>(), b = expected.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(((std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i]));
}
}  // namespace

TEST_CASE("add_relu gives relu(add) exactly, forward and backward, at the kink and at NaN", "[autograd][cpu]") {
  // Sums of exactly 0 (no gradient, as relu's), of both signs, and a NaN; b broadcast.
  const Tensor a_values = values({1.5, -2, 0.25, 3, std::nan(""), -0.5, 2, -1}, {2, 4});
  const Tensor b_values = values({-1.5, 1, 0.5, -4}, {4});
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    Variable a1(a_values.to(dtype), true), b1(b_values.to(dtype), true);
    Variable a2(a_values.to(dtype), true), b2(b_values.to(dtype), true);
    Variable fused = add_relu(a1, b1), unfused = relu(add(a2, b2));
    require_same(fused.data(), unfused.data());
    const Tensor g = values({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}).to(dtype);
    fused.backward(g);
    unfused.backward(g);
    require_same(a1.grad(), a2.grad());
    require_same(b1.grad(), b2.grad());
  }
}
