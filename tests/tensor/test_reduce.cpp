// Reductions, argmax, sum_to and the softmax family against naive loops in double, on
// contiguous and permuted/sliced inputs, plus the accuracy of a large f32 sum.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace dtrain {
namespace {

struct ThreadCount {
  int saved = num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
};

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

std::int64_t ravel(const std::vector<std::int64_t>& idx, const Shape& shape) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// op over `dims` (negative allowed, empty = all) in double, element by element.
Tensor naive_reduce(ReduceOp op, const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  const Shape& shape = x.shape();
  const auto nd = static_cast<std::int64_t>(shape.size());
  std::vector<bool> reduced(nd, dims.empty());
  for (auto d : dims) reduced[d < 0 ? d + nd : d] = true;
  Shape keep = shape, squeezed;
  for (std::int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) keep[d] = 1;
    else squeezed.push_back(shape[d]);
  }
  const double init = op == ReduceOp::Max   ? -INFINITY
                      : op == ReduceOp::Min ? INFINITY
                                            : 0.0;
  std::vector<double> acc(shape_numel(keep), init), v = x.to_vector<double>();
  std::vector<std::int64_t> count(acc.size(), 0);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, shape);
    for (std::int64_t d = 0; d < nd; ++d)
      if (reduced[d]) idx[d] = 0;
    const std::int64_t o = ravel(idx, keep);
    if (op == ReduceOp::Max) acc[o] = std::max(acc[o], v[i]);
    else if (op == ReduceOp::Min) acc[o] = std::min(acc[o], v[i]);
    else acc[o] += v[i];
    ++count[o];
  }
  if (op == ReduceOp::Mean)
    for (std::size_t o = 0; o < acc.size(); ++o) acc[o] /= static_cast<double>(count[o]);
  return Tensor::from_vector(acc, keepdim ? keep : squeezed);
}

// softmax (or log-softmax) along dim in double.
Tensor naive_softmax(const Tensor& x, std::int64_t dim, bool log) {
  const Shape& shape = x.shape();
  std::vector<double> v = x.to_vector<double>(), out(v.size());
  const std::int64_t n = shape[dim];
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    auto idx = unravel(i, shape);
    double max = -INFINITY, sum = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      idx[dim] = k;
      max = std::max(max, v[ravel(idx, shape)]);
    }
    for (std::int64_t k = 0; k < n; ++k) {
      idx[dim] = k;
      sum += std::exp(v[ravel(idx, shape)] - max);
    }
    out[i] = log ? v[i] - max - std::log(sum) : std::exp(v[i] - max) / sum;
  }
  return Tensor::from_vector(out, shape);
}

const std::vector<std::vector<std::int64_t>>& dim_sets() {
  static const std::vector<std::vector<std::int64_t>> sets = {
      {}, {0}, {1}, {2}, {-1}, {0, 2}, {2, 0}, {1, 2}, {0, 1}, {0, 1, 2}, {1, 1}};
  return sets;
}

}  // namespace

TEST_CASE("sum, mean, max and min over every dim set match a naive loop", "[cpu][tensor]") {
  Tensor base = test::random_tensor({3, 4, 5}, 101);
  const std::vector<std::pair<const char*, Tensor>> inputs = {
      {"contiguous", base},
      {"permuted", test::random_tensor({5, 3, 4}, 102).permute({1, 2, 0})},
      {"sliced", test::random_tensor({3, 8, 5}, 103).slice(1, 1, 8, 2)},
      {"f64", test::random_tensor({3, 4, 5}, 104, DType::f64)},
  };
  for (const auto& [name, x] : inputs)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min})
      for (const auto& dims : dim_sets())
        for (bool keepdim : {false, true}) {
          INFO(name << " op " << static_cast<int>(op) << " dims " << shape_str(dims) << " keepdim " << keepdim);
          Tensor r = reduce(op, x, dims, keepdim);
          CHECK(r.dtype() == x.dtype());
          test::require_close(r, naive_reduce(op, x, dims, keepdim), 1e-5, 1e-6);
        }
}

TEST_CASE("reducing outer dims accumulates whole rows", "[cpu][tensor]") {
  Tensor grad = test::random_tensor({37, 1100}, 111);  // a bias gradient, wider than a block
  test::require_close(sum(grad, {0}), naive_reduce(ReduceOp::Sum, grad, {0}, false), 1e-5, 1e-5);
  Tensor narrow_cols = test::random_tensor({37, 1}, 112);
  test::require_close(sum(narrow_cols, {0}), naive_reduce(ReduceOp::Sum, narrow_cols, {0}, false), 1e-5, 1e-5);
  Tensor x3 = test::random_tensor({4, 9, 600}, 113);
  test::require_close(max(x3, {0, 1}), naive_reduce(ReduceOp::Max, x3, {0, 1}, false));
  Tensor xi = Tensor::arange(0, 24, 1, {DType::i32}).reshape({4, 6});
  test::require_close(sum(xi, {0}), naive_reduce(ReduceOp::Sum, xi, {0}, false));
}

TEST_CASE("per-channel mean of NCHW, at one and three threads", "[cpu][tensor]") {
  Tensor x = test::random_tensor({8, 3, 40, 30}, 121);
  Tensor expected = naive_reduce(ReduceOp::Mean, x, {0, 2, 3}, true);
  Tensor one = mean(x, {0, 2, 3}, true);
  CHECK(one.shape() == Shape{1, 3, 1, 1});
  test::require_close(one, expected, 1e-5, 1e-6);
  ThreadCount threads(3);
  CHECK(max_abs_diff(mean(x, {0, 2, 3}, true), one) == 0);
}

TEST_CASE("a 1M-element f32 sum stays accurate and thread-independent", "[cpu][tensor]") {
  Tensor x = test::random_tensor({1 << 20}, 131, DType::f32, 0, 1);
  long double exact = 0;
  for (float v : x.to_vector<float>()) exact += v;
  const double s = sum(x).item();
  CHECK(std::abs(s - static_cast<double>(exact)) <= 1e-6 * static_cast<double>(exact));
  CHECK(mean(x).item() == Approx(static_cast<double>(exact) / (1 << 20)).epsilon(1e-6));
  ThreadCount threads(3);
  CHECK(sum(x).item() == s);
}

TEST_CASE("reduction dtypes, empty dims and errors", "[cpu][tensor]") {
  Tensor ones = Tensor::ones({300}, {DType::u8});
  Tensor count = sum(ones);
  CHECK(count.dtype() == DType::i64);
  CHECK(count.item() == 300);
  CHECK(max(Tensor::from_vector<std::int32_t>({3, -9, 7}, {3})).item() == 7);
  CHECK(max(Tensor::from_vector<std::int32_t>({3, -9, 7}, {3})).dtype() == DType::i32);

  Tensor empty = Tensor::zeros({2, 0});
  CHECK(sum(empty, {1}).to_vector<float>() == std::vector<float>{0, 0});
  CHECK(std::isnan(mean(empty, {1}).to_vector<float>()[0]));
  CHECK_THROWS_WITH(max(empty, {1}), Catch::Contains("max: cannot reduce over dim 1 of size 0"));
  CHECK_THROWS_WITH(mean(Tensor::zeros({3}, {DType::i32})), Catch::Contains("mean: expected a floating dtype"));
  CHECK_THROWS_WITH(sum(Tensor::zeros({2, 3}), {2}), Catch::Contains("sum: dim 2 out of range"));

  Tensor scalar = Tensor::scalar(4);
  CHECK(sum(scalar).item() == 4);
  CHECK(sum(scalar).dim() == 0);
}

TEST_CASE("max and min propagate NaN", "[cpu][tensor]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector<float>({1, nan, 3, 4, 5, 6, 7, 8, 9, 10, 2}, {11});
  CHECK(std::isnan(max(x).item()));
  CHECK(std::isnan(min(x).item()));
  CHECK(std::isnan(max(x.reshape({11, 1}), {0}).item()));
}

TEST_CASE("argmax returns the first index of the maximum", "[cpu][tensor]") {
  Tensor x = Tensor::from_vector<float>({1, 3, 3, 5, 2, 5}, {2, 3});
  CHECK(argmax(x, 1).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  CHECK(argmax(x, 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0, 1});
  CHECK(argmax(x, -1, true).shape() == Shape{2, 1});
  CHECK(argmax(x.t(), 0).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  CHECK(argmax(x.to(DType::i32), 1).dtype() == DType::i64);

  Tensor r = test::random_tensor({6, 7, 8}, 141);
  auto v = r.to_vector<float>();
  auto got = argmax(r, 1).to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t k = 0; k < 8; ++k) {
      std::int64_t best = 0;
      for (std::int64_t j = 1; j < 7; ++j)
        if (v[(i * 7 + j) * 8 + k] > v[(i * 7 + best) * 8 + k]) best = j;
      CHECK(got[i * 8 + k] == best);
    }

  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(argmax(Tensor::from_vector<float>({1, nan, 9}, {3}), 0).item() == 1);
  CHECK(argmax(Tensor::scalar(2), 0).item() == 0);
  CHECK_THROWS_WITH(argmax(Tensor::zeros({0, 2}), 0), Catch::Contains("argmax") && Catch::Contains("empty"));
}

TEST_CASE("sum_to undoes broadcasting", "[cpu][tensor]") {
  Tensor x = test::random_tensor({2, 3, 4}, 151);
  Tensor a = sum_to(x, {3, 1});
  CHECK(a.shape() == Shape{3, 1});
  test::require_close(a, naive_reduce(ReduceOp::Sum, x, {0, 2}, false).reshape({3, 1}));
  test::require_close(sum_to(x, {4}), naive_reduce(ReduceOp::Sum, x, {0, 1}, false));
  test::require_close(sum_to(x, {1, 3, 4}), naive_reduce(ReduceOp::Sum, x, {0}, true));
  Tensor all = sum_to(x, {});
  CHECK(all.dim() == 0);
  CHECK(all.item() == Approx(naive_reduce(ReduceOp::Sum, x, {}, false).item()).epsilon(1e-6));
  CHECK(sum_to(x, x.shape()).same_storage(x));
  CHECK_THROWS_WITH(sum_to(Tensor::zeros({2, 3}), {4}), Catch::Contains("sum_to"));
  CHECK_THROWS_WITH(sum_to(Tensor::zeros({1, 3}), {2, 3}),
                    Catch::Contains("sum_to: shape [2, 3] does not broadcast to the tensor's shape [1, 3]"));
}

TEST_CASE("softmax and log_softmax along every dim match the naive formula", "[cpu][tensor]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = test::random_tensor({3, 4, 5}, 161, dtype, -3, 3);
    for (std::int64_t dim : {0, 1, 2, -1}) {
      INFO(dtype_name(dtype) << " dim " << dim);
      const std::int64_t d = dim < 0 ? dim + 3 : dim;
      test::require_close(softmax(x, dim), naive_softmax(x, d, false), 1e-5, 1e-7);
      test::require_close(log_softmax(x, dim), naive_softmax(x, d, true), 1e-5, 1e-6);
    }
  }
  Tensor wide = test::random_tensor({2, 3, 300}, 162);  // more columns than one block
  test::require_close(softmax(wide, 1), naive_softmax(wide, 1, false), 1e-5, 1e-7);
  Tensor t = test::random_tensor({6, 4}, 163).t();
  test::require_close(log_softmax(t, 1), naive_softmax(t, 1, true), 1e-5, 1e-6);
}

TEST_CASE("softmax stays finite for large logits", "[cpu][tensor]") {
  Tensor x = Tensor::from_vector<float>({1000, 1001, 999, -1000, -1002, -1001}, {2, 3});
  for (std::int64_t dim : {0, 1}) {
    Tensor s = softmax(x, dim), ls = log_softmax(x, dim);
    for (double v : s.to_vector<double>()) CHECK(std::isfinite(v));
    for (double v : ls.to_vector<double>()) CHECK(std::isfinite(v));
    test::require_close(s, naive_softmax(x, dim, false), 1e-5, 1e-7);
    test::require_close(ls, naive_softmax(x, dim, true), 1e-5, 1e-5);
  }
}

TEST_CASE("softmax backwards match finite differences", "[cpu][tensor]") {
  const Shape shape{3, 4, 5};
  Tensor x = test::random_tensor(shape, 171, DType::f64, -2, 2);
  Tensor g = test::random_tensor(shape, 172, DType::f64);
  const auto gv = g.to_vector<double>();
  for (bool log : {false, true})
    for (std::int64_t dim : {0, 1, 2}) {
      INFO("log " << log << " dim " << dim);
      Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
      Tensor dx = log ? log_softmax_backward(g, y, dim) : softmax_backward(g, y, dim);
      // d/dx_i of L(x) = sum(g * f(x)), by central differences on the naive forward.
      auto xv = x.to_vector<double>();
      std::vector<double> fd(xv.size());
      const double h = 1e-6;
      auto loss = [&](const std::vector<double>& v) {
        auto f = naive_softmax(Tensor::from_vector(v, shape), dim, log).to_vector<double>();
        return std::inner_product(f.begin(), f.end(), gv.begin(), 0.0);
      };
      for (std::size_t i = 0; i < xv.size(); ++i) {
        auto plus = xv, minus = xv;
        plus[i] += h;
        minus[i] -= h;
        fd[i] = (loss(plus) - loss(minus)) / (2 * h);
      }
      test::require_close(dx, Tensor::from_vector(fd, shape), 1e-5, 1e-7);
    }
  Tensor wide = test::random_tensor({2, 3, 300}, 173);
  Tensor gw = test::random_tensor({2, 3, 300}, 174);
  Tensor yw = softmax(wide, 1);
  Tensor expected = mul(yw, sub(gw, sum(mul(gw, yw), {1}, true)));  // dx = y * (g - sum(g y))
  test::require_close(softmax_backward(gw, yw, 1), expected, 1e-5, 1e-6);
}

TEST_CASE("softmax family errors name the op", "[cpu][tensor]") {
  CHECK_THROWS_WITH(softmax(Tensor::zeros({2}, {DType::i64}), 0), Catch::Contains("softmax: expected a floating"));
  CHECK_THROWS_WITH(log_softmax(Tensor::zeros({2, 3}), 2), Catch::Contains("log_softmax: dim 2 out of range"));
  CHECK_THROWS_WITH(softmax_backward(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}), 1),
                    Catch::Contains("softmax_backward: grad_out has shape [2, 3] but the output has shape [3, 2]"));
  CHECK(softmax(Tensor::scalar(3), 0).item() == 1);
}

}  // namespace dtrain
