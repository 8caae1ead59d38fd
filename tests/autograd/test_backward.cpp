// The tape itself: accumulation, hooks, grad mode, graph lifetime, errors.
#include "dtrain/autograd/functions.h"
#include "support/test_support.h"

using namespace dtrain;

TEST_CASE("backward accumulates through shared subexpressions", "[autograd][cpu]") {
  Variable x(Tensor::from_vector<double>({1, 2, 3}, {3}), true);
  Variable y = mul(x, x);     // x^2
  Variable z = add(y, y);     // 2x^2, y used twice
  Variable w = mul(z, x);     // 2x^3
  sum(w).backward();
  test::require_close(x.grad(), Tensor::from_vector<double>({6, 24, 54}, {3}));  // 6x^2
}

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[autograd][cpu]") {
  Variable x(Tensor::from_vector<double>({1, -2}, {2}), true);
  sum(mul(x, 3.0)).backward();
  sum(mul(x, 3.0)).backward();
  test::require_close(x.grad(), Tensor::from_vector<double>({6, 6}, {2}));
  x.zero_grad();
  CHECK_FALSE(x.has_grad());
}

TEST_CASE("grad hooks fire once per leaf, after its last contribution", "[autograd][cpu]") {
  Variable a(Tensor::from_vector<double>({1, 2}, {2}), true);
  Variable b(Tensor::from_vector<double>({3, 4}, {2}), true);
  std::vector<std::string> fired;
  std::vector<double> a_grad_at_hook;
  a.register_grad_hook([&](Variable& v) {
    fired.push_back("a");
    a_grad_at_hook = v.grad().to_vector<double>();
  });
  b.register_grad_hook([&](Variable&) { fired.push_back("b"); });
  // a feeds two nodes; its hook must see the sum of both contributions.
  Variable loss = sum(add(mul(a, b), mul(a, 2.0)));
  loss.backward();
  REQUIRE(fired.size() == 2);
  CHECK(std::count(fired.begin(), fired.end(), "a") == 1);
  CHECK(a_grad_at_hook == std::vector<double>{5, 6});  // b + 2
}

TEST_CASE("NoGradGuard records nothing", "[autograd][cpu]") {
  Variable x(Tensor::ones({2}), true);
  Variable y;
  {
    NoGradGuard guard;
    CHECK_FALSE(grad_enabled());
    y = mul(x, 2.0);
  }
  CHECK(grad_enabled());
  CHECK_FALSE(y.requires_grad());
  CHECK_THROWS_WITH(sum(y).backward(), Catch::Contains("does not require grad"));
}

TEST_CASE("the graph is freed after backward unless retained", "[autograd][cpu]") {
  Variable x(Tensor::ones({2}), true);
  Variable loss = sum(mul(x, x));
  loss.backward(true);
  loss.backward();  // retained once, so a second pass works
  test::require_close(x.grad(), Tensor::full({2}, 4.0));
  x.zero_grad();
  loss.backward();  // graph gone: the output is now a leaf-like node; x gets nothing
  CHECK_FALSE(x.has_grad());
}

TEST_CASE("backward errors are explicit", "[autograd][cpu]") {
  Variable x(Tensor::ones({2, 2}), true);
  Variable y = mul(x, 2.0);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("non-scalar"));
  CHECK_THROWS_WITH(y.backward(Tensor::ones({3})), Catch::Contains("grad_output shape"));
  CHECK_THROWS_WITH(Variable(Tensor::ones({1}, {DType::i64}), true), Catch::Contains("floating"));
  CHECK_THROWS_WITH(matmul(x, Variable(Tensor::ones({3, 2}), true)), Catch::Contains("[2, 2]"));
}

TEST_CASE("cross_entropy rejects labels out of range", "[autograd][cpu]") {
  Variable logits(Tensor::zeros({2, 3}), true);
  CHECK_THROWS_WITH(cross_entropy(logits, Tensor::from_vector<std::int64_t>({0, 3}, {2})),
                    Catch::Contains("[0, 3)"));
  CHECK_THROWS_WITH(cross_entropy(logits, Tensor::from_vector<std::int64_t>({0}, {1})), Catch::Contains("labels"));
}

TEST_CASE("cross_entropy matches the definition", "[autograd][cpu]") {
  Tensor logits = Tensor::from_vector<double>({1, 2, 3, 0, 0, 5}, {2, 3});
  Tensor labels = Tensor::from_vector<std::int64_t>({2, 0}, {2});
  auto lse = [](double a, double b, double c) { return std::log(std::exp(a) + std::exp(b) + std::exp(c)); };
  double l0 = lse(1, 2, 3) - 3, l1 = lse(0, 0, 5) - 0;
  CHECK(cross_entropy(Variable(logits), labels).item() == Approx((l0 + l1) / 2).epsilon(1e-12));
  // With smoothing eps: (1-eps) * nll + eps * mean over classes of -log p.
  double eps = 0.2;
  double u0 = (3 * lse(1, 2, 3) - 6) / 3, u1 = (3 * lse(0, 0, 5) - 5) / 3;
  double expected = ((1 - eps) * (l0 + l1) + eps * (u0 + u1)) / 2;
  CHECK(cross_entropy(Variable(logits), labels, eps).item() == Approx(expected).epsilon(1e-12));
}
