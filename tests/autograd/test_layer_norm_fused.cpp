// LayerNorm's one-kernel forward and backward (layer_norm_forward / layer_norm_backward in
// ops.h) against the composed ops it replaces (fused_kernels() off), and by finite
// differences. The kernel sums a row over sixteen interleaved lanes where the composed mean
// sums in another order: f64 agrees to 1e-12, f32 to its precision. Rows of 1 (below a lane),
// 37 (lanes and a tail) and 768 (GPT-2's width); 700 rows, more than one block of rows for the
// parameters' gradients (the partial sums added in block order).
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/fusion.h"
#include "dtrain/core/parallel.h"
#include "support/test_support.h"

#include <vector>

namespace dtrain::test {
namespace {

using Inputs = const std::vector<Variable>&;

Variable param(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  return Variable(random_tensor(shape, seed, DType::f64, low, high), true);
}

struct NormRun {
  Tensor y, dx, dweight, dbias;
};

// Output and gradients for the loss sum(y * weights).
NormRun run_layer_norm(const Tensor& x_t, const Tensor& w_t, const Tensor& b_t, const Tensor& weights, int dims,
                       bool fused) {
  FusedKernelsSwitch setting(fused);
  Variable x(x_t, true);
  Variable w = w_t.defined() ? Variable(w_t, true) : Variable();
  Variable b = b_t.defined() ? Variable(b_t, true) : Variable();
  Variable y = layer_norm(x, dims, w, b, 1e-5);
  sum(mul(y, Variable(weights))).backward();
  return {y.data(), x.grad(), w.defined() ? w.grad() : Tensor(), b.defined() ? b.grad() : Tensor()};
}

void require_same(const NormRun& a, const NormRun& b, DType dtype) {
  const double rtol = dtype == DType::f64 ? 1e-12 : 2e-5, atol = dtype == DType::f64 ? 1e-12 : 2e-5;
  require_close(a.y, b.y, rtol, atol);
  require_close(a.dx, b.dx, rtol, atol);
  REQUIRE(a.dweight.defined() == b.dweight.defined());
  REQUIRE(a.dbias.defined() == b.dbias.defined());
  // The parameters' gradients sum 700 rows: f32 rounding grows with the count.
  const double sum_tol = dtype == DType::f64 ? 1e-11 : 2e-4;
  if (a.dweight.defined()) require_close(a.dweight, b.dweight, sum_tol, sum_tol);
  if (a.dbias.defined()) require_close(a.dbias, b.dbias, sum_tol, sum_tol);
}

}  // namespace

TEST_CASE("layer_norm: the fused kernels equal the composed ops (weight and bias each present or not)",
          "[autograd][cpu]") {
  for (const DType dtype : {DType::f64, DType::f32}) {
    for (const std::int64_t d : {1, 37, 768}) {
      const Tensor x = random_tensor({7, 100, d}, 51, dtype, -3, 3);
      const Tensor w = random_tensor({d}, 52, dtype, 0.5, 1.5), b = random_tensor({d}, 53, dtype);
      const Tensor weights = random_tensor({7, 100, d}, 54, dtype);
      for (const bool with_weight : {true, false}) {
        for (const bool with_bias : {true, false}) {
          INFO(dtype_name(dtype) << ", D " << d << ", weight " << with_weight << ", bias " << with_bias);
          const Tensor wt = with_weight ? w : Tensor(), bt = with_bias ? b : Tensor();
          require_same(run_layer_norm(x, wt, bt, weights, 1, true), run_layer_norm(x, wt, bt, weights, 1, false),
                       dtype);
        }
      }
    }
  }
}

TEST_CASE("layer_norm: the fused kernels over two trailing dims, a strided input, and any thread count",
          "[autograd][cpu]") {
  // (3, 5) normalized together, the input a transposed view; the result does not depend on
  // the number of threads (the parameters' partial sums use a fixed split of rows).
  const Tensor x = random_tensor({5, 3, 40}, 55, DType::f32, -2, 2).transpose(0, 2);  // (40, 3, 5)
  const Tensor w = random_tensor({3, 5}, 56, DType::f32, 0.5, 1.5), b = random_tensor({3, 5}, 57, DType::f32);
  const Tensor weights = random_tensor({40, 3, 5}, 58, DType::f32);
  require_same(run_layer_norm(x, w, b, weights, 2, true), run_layer_norm(x, w, b, weights, 2, false), DType::f32);
  const Tensor big = random_tensor({700, 64}, 59, DType::f32, -2, 2);
  const Tensor bw = random_tensor({64}, 60, DType::f32), bb = random_tensor({64}, 61, DType::f32);
  const Tensor bweights = random_tensor({700, 64}, 62, DType::f32);
  const int saved = num_threads();
  set_num_threads(1);
  const NormRun one = run_layer_norm(big, bw, bb, bweights, 1, true);
  set_num_threads(2);
  const NormRun two = run_layer_norm(big, bw, bb, bweights, 1, true);
  set_num_threads(saved);
  require_close(one.y, two.y, 0, 0);
  require_close(one.dx, two.dx, 0, 0);
  require_close(one.dweight, two.dweight, 0, 0);
  require_close(one.dbias, two.dbias, 0, 0);
}

TEST_CASE("grad: layer_norm's fused kernels and the composed ops, by finite differences", "[autograd][cpu]") {
  auto x = param({4, 3, 6}, 63, -2, 2);
  auto weight = param({6}, 64, 0.5, 1.5), bias = param({6}, 65);
  auto weight2 = param({3, 6}, 66, 0.5, 1.5), bias2 = param({3, 6}, 67);
  for (const bool fused : {true, false}) {
    FusedKernelsSwitch setting(fused);
    INFO("fused " << fused);
    require_grad_ok([](Inputs in) { return layer_norm(in[0], 1, in[1], in[2], 1e-5); }, {x, weight, bias});
    require_grad_ok([](Inputs in) { return layer_norm(in[0], 2, in[1], in[2], 1e-5); }, {x, weight2, bias2});
    require_grad_ok([](Inputs in) { return layer_norm(in[0], 1, Variable(), in[1], 1e-5); }, {x, bias});
    require_grad_ok([](Inputs in) { return layer_norm(in[0], 1, Variable(), Variable(), 1e-5); }, {x});
  }
}

TEST_CASE("layer_norm: rows of no elements take the composed path, no rows give an empty result", "[autograd][cpu]") {
  test::FusedKernelsSwitch setting(true);
  const Variable empty_rows(Tensor::zeros({3, 0}), true);
  CHECK(layer_norm(empty_rows, 1, Variable(), Variable(), 1e-5).shape() == Shape{3, 0});
  const Variable no_rows(Tensor::zeros({0, 4}), true);
  Variable y = layer_norm(no_rows, 1, Variable(Tensor::ones({4}), true), Variable(), 1e-5);
  CHECK(y.shape() == Shape{0, 4});
  sum(y).backward();
  CHECK(no_rows.grad().shape() == Shape{0, 4});
}

TEST_CASE("layer_norm_forward / backward: bad parameters and statistics are refused naming them", "[autograd][cpu]") {
  const Tensor x = Tensor::zeros({2, 4});
  REQUIRE_THROWS_WITH(layer_norm_forward(x, Tensor(), Tensor::zeros({3}), 1e-5),
                      Catch::Contains("layer_norm: bias must be (4) f32"));
  REQUIRE_THROWS_WITH(layer_norm_forward(x, Tensor::zeros({4}, {DType::f64}), Tensor(), 1e-5),
                      Catch::Contains("layer_norm: weight must be (4) f32"));
  REQUIRE_THROWS_WITH(layer_norm_forward(x, Tensor(), Tensor(), -1), Catch::Contains("eps must not be negative"));
  REQUIRE_THROWS_WITH(layer_norm_forward(x.to(DType::bf16), Tensor(), Tensor(), 1e-5),
                      Catch::Contains("input must be f32 or f64"));
  const LayerNormResult r = layer_norm_forward(x, Tensor(), Tensor(), 1e-5);
  REQUIRE_THROWS_WITH(layer_norm_backward(x, x, Tensor::zeros({3}), r.rstd, Tensor(), false),
                      Catch::Contains("layer_norm_backward: mean"));
  REQUIRE_THROWS_WITH(layer_norm_backward(Tensor::zeros({2, 3}), x, r.mean, r.rstd, Tensor(), false),
                      Catch::Contains("layer_norm_backward: gradient"));
}

}  // namespace dtrain::test
