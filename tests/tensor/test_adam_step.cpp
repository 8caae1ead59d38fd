// adam_step_ and squared_norm: the fused Adam/AdamW update against the add_/mul_ passes it
// replaces (bit for bit, 1 and 2 threads, every option that changes its arithmetic), and the
// one-pass squared norm against the sum of squares of an f64 copy.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"

#include <cmath>

namespace dtrain {
namespace {

// The update as separate in-place passes, as Adam::step ran it before the fused op.
void reference_step(Tensor& p, Tensor& m, Tensor& v, const Tensor& grad, const AdamStep& s) {
  if (s.decay_factor != 1) mul_(p, s.decay_factor);
  Tensor d = grad.contiguous().clone();
  if (s.l2 != 0) add_(d, p, s.l2);
  mul_(m, s.beta1);
  add_(m, d, 1 - s.beta1);
  mul_(v, s.beta2);
  addcmul_(v, d, d, 1 - s.beta2);
  Tensor denom = sqrt(v);
  add_(denom, Tensor::scalar(s.eps, denom.options()));
  addcdiv_(p, m, denom, -s.step_size);
}

}  // namespace

TEST_CASE("adam_step_ equals the add_, mul_ and addcdiv_ passes it fuses", "[cpu][tensor]") {
  const AdamStep step =
      GENERATE(AdamStep{.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .step_size = 1e-3},
               AdamStep{.decay_factor = 1 - 1e-3 * 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .step_size = 3e-3},
               AdamStep{.l2 = 0.05, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .step_size = 1e-2});
  const DType dtype = GENERATE(DType::f32, DType::f64);
  const int threads = GENERATE(1, 2);
  INFO(dtype_name(dtype) << ", " << threads << " thread(s), decay " << step.decay_factor << " l2 " << step.l2);
  const int saved = num_threads();
  set_num_threads(threads);
  // Odd and past one parallel chunk, so that the threads split it unevenly.
  const Shape shape{3, 33335};
  Tensor p = test::random_tensor(shape, 1, dtype);
  Tensor m = Tensor::zeros(shape, p.options()), v = Tensor::zeros(shape, p.options());
  Tensor p_ref = p.clone(), m_ref = m.clone(), v_ref = v.clone();
  for (std::uint64_t k = 0; k < 3; ++k) {
    const Tensor grad = test::random_tensor(shape, 10 + k, dtype);
    adam_step_(p, m, v, grad, step);
    reference_step(p_ref, m_ref, v_ref, grad, step);
  }
  set_num_threads(saved);
  // The same roundings in the same order on whichever clone of the loop this CPU runs.
  test::require_close(p, p_ref, 0, 0);
  test::require_close(m, m_ref, 0, 0);
  test::require_close(v, v_ref, 0, 0);
  // And it did move the parameter.
  CHECK_FALSE(allclose(p, test::random_tensor(shape, 1, dtype), 0, 0));
}

TEST_CASE("adam_step_ takes strided and broadcast gradients, and refuses mismatched moments", "[cpu][tensor]") {
  const AdamStep step{.decay_factor = 0.999, .step_size = 0.01};
  Tensor p = test::random_tensor({4, 6}, 3);
  Tensor m = Tensor::zeros({4, 6}), v = Tensor::zeros({4, 6});
  for (const Tensor& grad : {test::random_tensor({6, 4}, 5).t(), test::random_tensor({1, 6}, 6)}) {
    Tensor p_ref = p.clone(), m_ref = m.clone(), v_ref = v.clone();
    adam_step_(p, m, v, grad, step);
    reference_step(p_ref, m_ref, v_ref, grad, step);
    test::require_close(p, p_ref, 0, 0);
    test::require_close(v, v_ref, 0, 0);
  }
  // A gradient that is the parameter itself is read as it was before the step.
  Tensor p_ref = p.clone(), m_ref = m.clone(), v_ref = v.clone();
  const Tensor before = p.clone();
  adam_step_(p, m, v, p, step);
  reference_step(p_ref, m_ref, v_ref, before, step);
  test::require_close(p, p_ref, 0, 0);
  Tensor wrong = Tensor::zeros({6, 4});
  REQUIRE_THROWS_WITH(adam_step_(p, wrong, v, p, step),
                      Catch::Matchers::Contains("adam_step_: moment of shape [6, 4] for a parameter of shape [4, 6]"));
  REQUIRE_THROWS_WITH(adam_step_(p, m, m, p, step), Catch::Matchers::Contains("the two moments share storage"));
}

TEST_CASE("squared_norm sums squares in f64 in one pass", "[cpu][tensor]") {
  const int threads = GENERATE(1, 2);
  const int saved = num_threads();
  set_num_threads(threads);
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 100003}}) {
    for (const DType dtype : {DType::f32, DType::f64}) {
      const Tensor x = test::random_tensor(shape, 7, dtype);
      const double expected = sum(square(x.to(DType::f64))).item();
      const Tensor got = squared_norm(x);
      CHECK(got.dtype() == DType::f64);
      CHECK(got.dim() == 0);
      // f64 sums of the same squares in another order: within a few ulps of the total.
      CHECK(std::abs(got.item() - expected) <= 1e-13 * expected);
    }
  }
  // A strided view reads its own elements.
  const Tensor t = test::random_tensor({50, 40}, 8).t();
  CHECK(std::abs(squared_norm(t).item() - sum(square(t.to(DType::f64))).item()) <= 1e-13 * squared_norm(t).item());
  set_num_threads(saved);
  REQUIRE_THROWS_WITH(squared_norm(Tensor::zeros({2}, TensorOptions{DType::i64})),
                      Catch::Matchers::Contains("squared_norm: expected a floating tensor, got i64"));
}

}  // namespace dtrain
