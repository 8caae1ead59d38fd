// Element-wise ops against std:: math evaluated in double: every UnaryOp, BinaryOp and
// CompareOp, broadcasting, scalars, non-contiguous operands, in-place updates, and the
// errors for bad dtypes and shapes.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace dtrain {
namespace {

using Fn1 = std::function<double(double)>;
using Fn2 = std::function<double(double, double)>;

// Applies f to every element's value (read in row-major order) in double.
Tensor map1(const Tensor& x, const Fn1& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return Tensor::from_vector(v, x.shape());
}

// f(a, b) over the broadcast of a and b, with numpy's rules spelt out by index arithmetic.
Tensor map2(const Tensor& a, const Tensor& b, const Fn2& f) {
  const std::size_t nd = std::max(a.shape().size(), b.shape().size());
  Shape out(nd), sa(nd, 1), sb(nd, 1);
  for (std::size_t i = 0; i < a.shape().size(); ++i) sa[nd - a.shape().size() + i] = a.shape()[i];
  for (std::size_t i = 0; i < b.shape().size(); ++i) sb[nd - b.shape().size() + i] = b.shape()[i];
  for (std::size_t i = 0; i < nd; ++i) out[i] = std::max(sa[i], sb[i]);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), r(shape_numel(out));
  for (std::int64_t flat = 0; flat < shape_numel(out); ++flat) {
    std::int64_t rem = flat, ia = 0, ib = 0, ma = 1, mb = 1;
    for (std::size_t d = nd; d-- > 0;) {
      const std::int64_t idx = rem % out[d];
      rem /= out[d];
      ia += (sa[d] == 1 ? 0 : idx) * ma;
      ib += (sb[d] == 1 ? 0 : idx) * mb;
      ma *= sa[d];
      mb *= sb[d];
    }
    r[flat] = f(av[ia], bv[ib]);
  }
  return Tensor::from_vector(r, out);
}

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
// PyTorch's F.gelu(x, approximate='tanh') and F.silu.
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x * sigmoid_ref(x); }
// Central differences of f at x, accurate to ~1e-10 for these smooth functions.
double derivative(double (*f)(double), double x) { return (f(x + 1e-6) - f(x - 1e-6)) / 2e-6; }

struct UnaryCase {
  UnaryOp op;
  const char* name;
  Fn1 ref;
  double low, high;  // input range
};

std::vector<UnaryCase> unary_cases() {
  return {
      {UnaryOp::Neg, "neg", [](double x) { return -x; }, -3, 3},
      {UnaryOp::Exp, "exp", [](double x) { return std::exp(x); }, -5, 5},
      {UnaryOp::Log, "log", [](double x) { return std::log(x); }, 0.01, 10},
      {UnaryOp::Sqrt, "sqrt", [](double x) { return std::sqrt(x); }, 0, 10},
      {UnaryOp::Rsqrt, "rsqrt", [](double x) { return 1 / std::sqrt(x); }, 0.01, 10},
      {UnaryOp::Abs, "abs", [](double x) { return std::abs(x); }, -3, 3},
      {UnaryOp::Square, "square", [](double x) { return x * x; }, -3, 3},
      {UnaryOp::Reciprocal, "reciprocal", [](double x) { return 1 / x; }, 0.1, 5},
      {UnaryOp::Sign, "sign", [](double x) { return double((x > 0) - (x < 0)); }, -3, 3},
      {UnaryOp::Relu, "relu", [](double x) { return x > 0 ? x : 0; }, -3, 3},
      {UnaryOp::Sigmoid, "sigmoid", sigmoid_ref, -8, 8},
      {UnaryOp::Tanh, "tanh", [](double x) { return std::tanh(x); }, -4, 4},
      {UnaryOp::Gelu, "gelu", gelu_ref, -5, 5},
      {UnaryOp::GeluTanh, "gelu_tanh", gelu_tanh_ref, -5, 5},
      {UnaryOp::Silu, "silu", silu_ref, -8, 8},
  };
}

struct ThreadCount {
  int saved = num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("every unary op matches std:: math in double", "[cpu][tensor]") {
  auto cases = unary_cases();
  REQUIRE(cases.size() == static_cast<std::size_t>(UnaryOp::kCount));
  for (const auto& c : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(c.name << " " << dtype_name(dtype));
      Tensor x = test::random_tensor({7, 13}, 11, dtype, c.low, c.high);
      Tensor y = unary(c.op, x);
      CHECK(y.dtype() == dtype);
      const double tol = dtype == DType::f32 ? 2e-6 : 1e-13;
      test::require_close(y, map1(x, c.ref), tol, tol);
    }
  }
}

TEST_CASE("neg, abs, square, sign and relu accept integer dtypes", "[cpu][tensor]") {
  Tensor x = Tensor::from_vector<std::int32_t>({-3, -1, 0, 2, 5}, {5});
  CHECK(neg(x).to_vector<std::int32_t>() == std::vector<std::int32_t>{3, 1, 0, -2, -5});
  CHECK(abs(x).to_vector<std::int32_t>() == std::vector<std::int32_t>{3, 1, 0, 2, 5});
  CHECK(square(x).to_vector<std::int32_t>() == std::vector<std::int32_t>{9, 1, 0, 4, 25});
  CHECK(unary(UnaryOp::Sign, x).to_vector<std::int32_t>() == std::vector<std::int32_t>{-1, -1, 0, 1, 1});
  CHECK(relu(x).to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 0, 2, 5});
  Tensor u = Tensor::from_vector<std::uint8_t>({0, 3, 200}, {3});
  CHECK(relu(u).dtype() == DType::u8);
  CHECK(unary(UnaryOp::Sign, u).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 1, 1});
  CHECK(abs(Tensor::from_vector<std::int64_t>({-7}, {1})).item() == 7);
}

TEST_CASE("floating-only unary ops reject integer tensors by name", "[cpu][tensor]") {
  Tensor x = Tensor::from_vector<std::int64_t>({1, 2}, {2});
  CHECK_THROWS_WITH(exp(x), Catch::Contains("exp: expected a floating dtype") && Catch::Contains("i64"));
  CHECK_THROWS_WITH(sigmoid(x), Catch::Contains("sigmoid"));
  CHECK_THROWS_WITH(unary(UnaryOp::Neg, Tensor()), Catch::Contains("neg") && Catch::Contains("undefined"));
}

TEST_CASE("sigmoid is stable and exact at large |x|; gelu matches known values", "[cpu][tensor]") {
  Tensor x = Tensor::from_vector<float>({-1000, -100, -30, 0, 30, 100, 1000}, {7});
  auto s = sigmoid(x).to_vector<double>();
  for (double v : s) CHECK(std::isfinite(v));
  CHECK(s[0] == 0);
  CHECK(s[1] == Approx(sigmoid_ref(-100)).margin(1e-44));
  CHECK(s[2] == Approx(sigmoid_ref(-30)).epsilon(1e-5));
  CHECK(s[3] == 0.5);
  CHECK(s[6] == 1);
  auto g = gelu(Tensor::from_vector<double>({1, -1, 0}, {3})).to_vector<double>();
  CHECK(g[0] == Approx(0.8413447460685429).epsilon(1e-14));
  CHECK(g[1] == Approx(-0.15865525393145707).epsilon(1e-14));
  CHECK(g[2] == 0);
  // Far in the negative tail gelu is tiny; f32 keeps its relative accuracy there.
  CHECK(gelu(Tensor::scalar(-5)).item() == Approx(gelu_ref(-5)).epsilon(1e-5));
}

TEST_CASE("gelu_tanh and silu match PyTorch's values, and stay finite at large |x|", "[cpu][tensor]") {
  // torch.nn.functional.gelu(x, approximate='tanh') and silu at 1, -1, 0, 3, -3.
  const Tensor x = Tensor::from_vector<double>({1, -1, 0, 3, -3}, {5});
  const std::vector<double> gelu_tanh_expected{0.8411919906082768, -0.15880800939172324, 0, 2.996362607918227,
                                               -0.0036373920817729943};
  const std::vector<double> silu_expected{0.7310585786300049, -0.2689414213699951, 0, 2.8577223804672998,
                                          -0.14227761953270035};
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const double rtol = dtype == DType::f64 ? 1e-14 : 2e-6;
    const auto g = gelu_tanh(x.to(dtype)).to_vector<double>(), s = silu(x.to(dtype)).to_vector<double>();
    for (std::size_t i = 0; i < g.size(); ++i) {
      CHECK(g[i] == Approx(gelu_tanh_expected[i]).epsilon(rtol).margin(1e-300));
      CHECK(s[i] == Approx(silu_expected[i]).epsilon(rtol).margin(1e-300));
    }
  }
  // Far in the negative tail gelu_tanh is tiny; f32 keeps its relative accuracy there.
  CHECK(gelu_tanh(Tensor::scalar(-5)).item() == Approx(gelu_tanh_ref(-5)).epsilon(1e-5));
  // gelu_tanh differs from the exact gelu by less than 1e-3 (its purpose).
  const Tensor r = test::random_tensor({1000}, 3, DType::f64, -6, 6);
  CHECK(max_abs_diff(gelu_tanh(r), gelu(r)) < 1e-3);
  const Tensor big = Tensor::from_vector<float>({-1000, -100, 100, 1000}, {4});
  const auto gb = gelu_tanh(big).to_vector<double>(), sb = silu(big).to_vector<double>();
  CHECK(gb == std::vector<double>{0, 0, 100, 1000});
  CHECK(sb[0] == 0);
  CHECK(sb[1] == Approx(-100 * sigmoid_ref(-100)).margin(1e-38));
  CHECK(sb[2] == 100);
  CHECK(sb[3] == 1000);
  const auto db = binary(BinaryOp::SiluGrad, Tensor::ones({4}), big).to_vector<double>();
  CHECK(db[0] == 0);
  CHECK(db[3] == 1);
  CHECK_THROWS_WITH(silu(Tensor::from_vector<std::int64_t>({1}, {1})), Catch::Contains("silu"));
}

TEST_CASE("relu, maximum and minimum propagate NaN", "[cpu][tensor]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = Tensor::from_vector<double>({nan, 1, 2}, {3});
  Tensor b = Tensor::from_vector<double>({0, nan, 1}, {3});
  CHECK(std::isnan(relu(a).to_vector<double>()[0]));
  auto mx = maximum(a, b).to_vector<double>(), mn = minimum(a, b).to_vector<double>();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(mn[2] == 1);
}

TEST_CASE("every binary op matches its formula in double", "[cpu][tensor]") {
  struct Case {
    BinaryOp op;
    const char* name;
    Fn2 ref;
  };
  const std::vector<Case> cases = {
      {BinaryOp::Add, "add", [](double a, double b) { return a + b; }},
      {BinaryOp::Sub, "sub", [](double a, double b) { return a - b; }},
      {BinaryOp::Mul, "mul", [](double a, double b) { return a * b; }},
      {BinaryOp::Div, "div", [](double a, double b) { return a / b; }},
      {BinaryOp::Max, "maximum", [](double a, double b) { return std::max(a, b); }},
      {BinaryOp::Min, "minimum", [](double a, double b) { return std::min(a, b); }},
      {BinaryOp::Pow, "pow", [](double a, double b) { return std::pow(a, b); }},
      {BinaryOp::ReluGrad, "relu_grad", [](double g, double x) { return x > 0 ? g : 0; }},
      {BinaryOp::GeluGrad, "gelu_grad",
       [](double g, double x) { return g * (gelu_ref(x + 1e-6) - gelu_ref(x - 1e-6)) / 2e-6; }},
      {BinaryOp::SigmoidGrad, "sigmoid_grad", [](double g, double y) { return g * y * (1 - y); }},
      {BinaryOp::TanhGrad, "tanh_grad", [](double g, double y) { return g * (1 - y * y); }},
      {BinaryOp::AddRelu, "add_relu", [](double a, double b) { return std::max(a + b, 0.0); }},
      {BinaryOp::GeluTanhGrad, "gelu_tanh_grad", [](double g, double x) { return g * derivative(gelu_tanh_ref, x); }},
      {BinaryOp::SiluGrad, "silu_grad", [](double g, double x) { return g * derivative(silu_ref, x); }},
  };
  REQUIRE(cases.size() == static_cast<std::size_t>(BinaryOp::kCount));
  for (const auto& c : cases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO(c.name << " " << dtype_name(dtype));
      // Positive operands keep div and pow well defined; the grads see both signs of x.
      Tensor a = test::random_tensor({6, 9}, 21, dtype, 0.5, 2);
      Tensor b = test::random_tensor({6, 9}, 22, dtype, -2, 2);
      if (c.op == BinaryOp::Div || c.op == BinaryOp::Pow) b = test::random_tensor({6, 9}, 22, dtype, 0.5, 2);
      const bool differenced =
          c.op == BinaryOp::GeluGrad || c.op == BinaryOp::GeluTanhGrad || c.op == BinaryOp::SiluGrad;
      const double tol = dtype == DType::f32 ? 3e-6 : (differenced ? 1e-8 : 1e-13);
      test::require_close(binary(c.op, a, b), map2(a, b, c.ref), tol, tol);
    }
  }
}

TEST_CASE("binary ops broadcast numpy-style", "[cpu][tensor]") {
  Tensor col = test::random_tensor({3, 1}, 31), row = test::random_tensor({1, 4}, 32);
  Tensor s = add(col, row);
  CHECK(s.shape() == Shape{3, 4});
  test::require_close(s, map2(col, row, std::plus<double>()));

  Tensor x = test::random_tensor({2, 3, 4}, 33), v = test::random_tensor({4}, 34);
  test::require_close(mul(x, v), map2(x, v, std::multiplies<double>()));
  test::require_close(sub(v, x), map2(v, x, std::minus<double>()));

  Tensor y = test::random_tensor({5, 1, 3}, 35), z = test::random_tensor({4, 1}, 36);
  Tensor yz = maximum(y, z);
  CHECK(yz.shape() == Shape{5, 4, 3});
  test::require_close(yz, map2(y, z, [](double a, double b) { return std::max(a, b); }));

  Tensor scalar = Tensor::scalar(2.5);
  test::require_close(mul(x, scalar), map2(x, scalar, std::multiplies<double>()));
  test::require_close(div(scalar, add(abs(x), 1.0)),
                      map2(scalar, add(abs(x), 1.0), std::divides<double>()));
  CHECK(add(scalar, scalar).dim() == 0);
}

TEST_CASE("binary ops read transposed, sliced and expanded operands", "[cpu][tensor]") {
  Tensor base = test::random_tensor({5, 6}, 41), other = test::random_tensor({6, 5}, 42);
  Tensor t = base.t();  // (6, 5), non-contiguous
  test::require_close(add(t, other), map2(t, other, std::plus<double>()));
  test::require_close(mul(other, t), map2(other, t, std::multiplies<double>()));

  Tensor stepped = base.slice(1, 0, 6, 2);  // (5, 3), stride 2 inner
  Tensor c = test::random_tensor({5, 3}, 43);
  test::require_close(sub(stepped, c), map2(stepped, c, std::minus<double>()));

  // A permuted 3-D tensor against its contiguous copy.
  Tensor p = test::random_tensor({3, 4, 5}, 44).permute({2, 0, 1});
  test::require_close(exp(p), exp(p.contiguous()));
  test::require_close(add(p, p.contiguous()), mul(p.contiguous(), 2.0));
}

TEST_CASE("transposed operands are walked in tiles, partial tiles included", "[cpu][tensor]") {
  Tensor m = test::random_tensor({45, 37}, 45);
  Tensor mt = m.t().contiguous();
  auto mv = m.to_vector<float>(), tv = mt.to_vector<float>();
  for (std::int64_t i = 0; i < 37; ++i)
    for (std::int64_t j = 0; j < 45; ++j) REQUIRE(tv[i * 45 + j] == mv[j * 37 + i]);
  Tensor p = test::random_tensor({3, 40, 33}, 46).permute({0, 2, 1});  // three planes
  Tensor q = test::random_tensor({3, 33, 40}, 47);
  test::require_close(add(p, q), map2(p.contiguous(), q, std::plus<double>()));
  Tensor out = Tensor::zeros({40, 33});
  out.t().copy_(test::random_tensor({33, 40}, 48));  // the output is the transposed one
  test::require_close(out.t(), test::random_tensor({33, 40}, 48));
}

TEST_CASE("element-wise kernels split large tensors across threads", "[cpu][tensor]") {
  ThreadCount threads(3);
  Tensor a = test::random_tensor({100, 700}, 51), b = test::random_tensor({700}, 52);
  test::require_close(add(a, b), map2(a, b, std::plus<double>()));
  Tensor at = test::random_tensor({700, 100}, 53).t();  // general strided path
  test::require_close(mul(at, a), map2(at, a, std::multiplies<double>()));
  test::require_close(tanh(at), map1(at, [](double x) { return std::tanh(x); }), 2e-6, 2e-6);
}

TEST_CASE("scalar variants take the tensor's dtype", "[cpu][tensor]") {
  Tensor x = test::random_tensor({4, 5}, 61, DType::f64, 0.5, 2);
  test::require_close(add(x, 1.5), map1(x, [](double v) { return v + 1.5; }));
  test::require_close(sub(x, 1.5), map1(x, [](double v) { return v - 1.5; }));
  test::require_close(mul(x, -3.0), map1(x, [](double v) { return v * -3; }));
  test::require_close(div(x, 4.0), map1(x, [](double v) { return v / 4; }));
  test::require_close(pow(x, 2.0), map1(x, [](double v) { return v * v; }));
  test::require_close(pow(x, 0.5), map1(x, [](double v) { return std::sqrt(v); }));
  test::require_close(x * 2.0 + 1.0, map1(x, [](double v) { return 2 * v + 1; }));

  Tensor i = Tensor::from_vector<std::int64_t>({1, 2, 3}, {3});
  Tensor j = add(i, 4.0);
  CHECK(j.dtype() == DType::i64);
  CHECK(j.to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 6, 7});
  CHECK_THROWS_WITH(mul(i, 0.5), Catch::Contains("mul: scalar 0.5 is not representable in i64"));
}

TEST_CASE("integer binary ops stay integer; div and pow need floats", "[cpu][tensor]") {
  Tensor a = Tensor::from_vector<std::int32_t>({7, -2, 5}, {3});
  Tensor b = Tensor::from_vector<std::int32_t>({3, 4, 5}, {3});
  CHECK((a + b).to_vector<std::int32_t>() == std::vector<std::int32_t>{10, 2, 10});
  CHECK((a * b).to_vector<std::int32_t>() == std::vector<std::int32_t>{21, -8, 25});
  CHECK(maximum(a, b).to_vector<std::int32_t>() == std::vector<std::int32_t>{7, 4, 5});
  CHECK(minimum(a, b).to_vector<std::int32_t>() == std::vector<std::int32_t>{3, -2, 5});
  CHECK_THROWS_WITH(div(a, b), Catch::Contains("div: expected a floating dtype") && Catch::Contains("i32"));
  CHECK_THROWS_WITH(pow(a, b), Catch::Contains("pow"));
}

TEST_CASE("binary ops name the op, shapes and dtypes in their errors", "[cpu][tensor]") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  CHECK_THROWS_WITH(add(a, b), Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
  CHECK_THROWS_WITH(mul(a, Tensor::zeros({2, 3}, {DType::f64})),
                    Catch::Contains("mul: dtypes differ (f32 and f64)"));
  CHECK_THROWS_WITH(compare(CompareOp::Lt, a, Tensor::zeros({3, 2})), Catch::Contains("lt"));
  CHECK_THROWS_WITH(add(a, Tensor()), Catch::Contains("add") && Catch::Contains("undefined"));
  Tensor out = Tensor::zeros({3});
  CHECK_THROWS_WITH(binary_out(BinaryOp::Add, a, a, out),
                    Catch::Contains("out has shape [3]") && Catch::Contains("[2, 3]"));
}

TEST_CASE("every comparison gives u8 0/1 and broadcasts", "[cpu][tensor]") {
  struct Case {
    CompareOp op;
    std::function<bool(double, double)> ref;
  };
  const std::vector<Case> cases = {
      {CompareOp::Eq, std::equal_to<double>()}, {CompareOp::Ne, std::not_equal_to<double>()},
      {CompareOp::Lt, std::less<double>()},     {CompareOp::Le, std::less_equal<double>()},
      {CompareOp::Gt, std::greater<double>()},  {CompareOp::Ge, std::greater_equal<double>()},
  };
  REQUIRE(cases.size() == static_cast<std::size_t>(CompareOp::kCount));
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector<float>({2, 2, 7}, {3});
  Tensor ai = a.to(DType::i64), bi = b.to(DType::i64);
  for (const auto& c : cases) {
    Tensor r = compare(c.op, a, b);
    CHECK(r.dtype() == DType::u8);
    test::require_close(r, map2(a, b, [&](double x, double y) { return c.ref(x, y) ? 1.0 : 0.0; }));
    test::require_close(compare(c.op, ai, bi), r);
  }
}

TEST_CASE("where selects with a broadcast u8 condition", "[cpu][tensor]") {
  Tensor a = test::random_tensor({3, 4}, 71), b = test::random_tensor({4}, 72);
  Tensor cond = gt(a, Tensor::scalar(0));
  Tensor r = where(cond, a, b);
  auto cv = cond.to_vector<double>(), av = a.to_vector<double>(), bv = b.to_vector<double>();
  auto rv = r.to_vector<double>();
  for (std::size_t i = 0; i < rv.size(); ++i) CHECK(rv[i] == (cv[i] ? av[i] : bv[i % 4]));
  Tensor a2 = test::random_tensor({2, 4}, 73);
  Tensor picked = where(Tensor::from_vector<std::uint8_t>({1, 0}, {2, 1}), a2, b);
  test::require_close(picked.select(0, 0), a2.select(0, 0));
  test::require_close(picked.select(0, 1), b);
  CHECK_THROWS_WITH(where(a, a, b), Catch::Contains("where: the condition must be u8"));
}

TEST_CASE("in-place updates match their out-of-place formulas", "[cpu][tensor]") {
  Tensor x0 = test::random_tensor({4, 6}, 81), a = test::random_tensor({4, 6}, 82);
  Tensor b = test::random_tensor({6}, 83, DType::f32, 0.5, 2);  // broadcast along rows

  Tensor x = x0.clone();
  add_(x, a, -0.5);
  test::require_close(x, map2(x0, a, [](double u, double v) { return u - 0.5 * v; }));

  x = x0.clone();
  mul_(x, 3.0);
  test::require_close(x, map1(x0, [](double u) { return 3 * u; }));

  x = x0.clone();
  mul_(x, b);
  test::require_close(x, map2(x0, b, std::multiplies<double>()));

  x = x0.clone();
  addcmul_(x, a, b, 0.25);
  test::require_close(x, map2(x0, map2(a, b, std::multiplies<double>()),
                              [](double u, double v) { return u + 0.25 * v; }));

  x = x0.clone();
  addcdiv_(x, a, b, 2.0);
  test::require_close(x, map2(x0, map2(a, b, std::divides<double>()),
                              [](double u, double v) { return u + 2 * v; }), 1e-5, 1e-5);

  x = x0.clone();
  add_(x, x, 1.0);  // aliases self exactly
  test::require_close(x, map1(x0, [](double u) { return 2 * u; }));
}

TEST_CASE("updates through overlapping views read the operand before writing", "[cpu][tensor]") {
  Tensor buf = Tensor::arange(0, 8, 1);
  Tensor head = buf.narrow(0, 1, 7), tail = buf.narrow(0, 0, 7);
  add_(head, tail);  // buf[i+1] += buf[i] for the old values
  CHECK(buf.to_vector<float>() == std::vector<float>{0, 1, 3, 5, 7, 9, 11, 13});

  Tensor arena = Tensor::arange(0, 8, 1);
  Tensor left = arena.narrow(0, 0, 4), right = arena.narrow(0, 4, 4);
  binary_out(BinaryOp::Add, left, right, left);  // disjoint views of one storage
  CHECK(arena.to_vector<float>() == std::vector<float>{4, 6, 8, 10, 4, 5, 6, 7});
}

TEST_CASE("in-place updates check self and operands", "[cpu][tensor]") {
  Tensor x = Tensor::zeros({3, 4});
  Tensor xt = x.t();
  CHECK_THROWS_WITH(add_(xt, Tensor::zeros({4, 3})), Catch::Contains("add_: self must be contiguous"));
  CHECK_THROWS_WITH(add_(x, Tensor::zeros({3, 4}, {DType::f64})), Catch::Contains("add_: dtypes differ"));
  CHECK_THROWS_WITH(addcmul_(x, Tensor::zeros({3, 4}), Tensor::zeros({5}), 1.0), Catch::Contains("addcmul_"));
  CHECK_THROWS_WITH(mul_(x, Tensor::zeros({2, 3, 4})),
                    Catch::Contains("mul_: operand of shape [2, 3, 4] does not broadcast to self's shape [3, 4]"));
  Tensor ints = Tensor::zeros({2}, {DType::i32});
  CHECK_THROWS_WITH(mul_(ints, 2.0), Catch::Contains("mul_: expected a floating dtype"));
}

TEST_CASE("binary_out writes in place when out aliases an input", "[cpu][tensor]") {
  Tensor a = test::random_tensor({5, 7}, 91), b = test::random_tensor({7}, 92);
  Tensor expected = map2(a, b, std::multiplies<double>());
  binary_out(BinaryOp::Mul, a, b, a);
  test::require_close(a, expected);
  Tensor wide = Tensor::zeros({1}).expand({5, 7});
  CHECK_THROWS_WITH(binary_out(BinaryOp::Add, a, b, wide), Catch::Contains("broadcast view"));
}

TEST_CASE("copies convert dtypes and fill writes through strides", "[cpu][tensor]") {
  Tensor f = Tensor::from_vector<float>({-1.5f, 2.7f, 255.9f, -3.0f}, {4});
  CHECK(f.to(DType::i32).to_vector<std::int32_t>() == std::vector<std::int32_t>{-1, 2, 255, -3});
  CHECK(f.to(DType::u8).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{255, 2, 255, 253});
  CHECK(Tensor::from_vector<std::int64_t>({1, 1LL << 40}, {2}).to(DType::f64).to_vector<double>() ==
        std::vector<double>{1, 1099511627776.0});

  Tensor m = Tensor::zeros({3, 4});
  Tensor col = m.select(1, 2);
  col.fill_(7);
  auto v = m.to_vector<float>();
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(v[i] == (i % 4 == 2 ? 7.f : 0.f));
}

TEST_CASE("allclose and max_abs_diff compare values on the host", "[cpu][tensor]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Tensor a = Tensor::from_vector<double>({1, 2, inf}, {3});
  Tensor b = Tensor::from_vector<double>({1, 2.0001, inf}, {3});
  CHECK(allclose(a, b, 1e-4, 0));
  CHECK_FALSE(allclose(a, b, 1e-6, 0));
  CHECK(max_abs_diff(a.narrow(0, 0, 2), b.narrow(0, 0, 2)) == Approx(1e-4));
  Tensor n = Tensor::from_vector<double>({nan, 2, inf}, {3});
  CHECK_FALSE(allclose(n, n));
  CHECK(std::isnan(max_abs_diff(n, b)));
  CHECK_THROWS_WITH(allclose(a, Tensor::zeros({2})), Catch::Contains("allclose: shapes [3] and [2] differ"));
}

}  // namespace dtrain
