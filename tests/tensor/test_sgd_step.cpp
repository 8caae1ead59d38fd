// sgd_momentum_step_: the fused SGD-with-momentum update against the add_/mul_ passes it
// replaces, on 1 and 2 threads, for every option that changes its arithmetic, and its
// argument checks.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"

namespace dtrain {
namespace {

// The update as separate in-place passes, as SGD::step ran it before the fused op.
void reference_step(Tensor& p, Tensor& buf, const Tensor& grad, const SgdMomentumStep& s) {
  Tensor d = grad.contiguous().clone();
  if (s.weight_decay != 0) add_(d, p, s.weight_decay);
  mul_(buf, s.momentum);
  add_(buf, d, 1 - s.dampening);
  if (s.nesterov) {
    add_(d, buf, s.momentum);
    add_(p, d, -s.lr);
  } else {
    add_(p, buf, -s.lr);
  }
}

}  // namespace

TEST_CASE("sgd_momentum_step_ equals the add_ and mul_ passes it fuses", "[cpu][tensor]") {
  const SgdMomentumStep step = GENERATE(SgdMomentumStep{.lr = 0.1, .momentum = 0.9},
                                        SgdMomentumStep{.lr = 0.05, .momentum = 0.8, .dampening = 0.3},
                                        SgdMomentumStep{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.2},
                                        SgdMomentumStep{.lr = 0.1, .momentum = 0.9, .nesterov = true},
                                        SgdMomentumStep{.lr = 0.1, .momentum = 0.7, .weight_decay = 0.1, .nesterov = true});
  const DType dtype = GENERATE(DType::f32, DType::f64);
  const int threads = GENERATE(1, 2);
  INFO(dtype_name(dtype) << ", " << threads << " thread(s), momentum " << step.momentum << " dampening "
                         << step.dampening << " weight_decay " << step.weight_decay << " nesterov " << step.nesterov);
  const int saved = num_threads();
  set_num_threads(threads);
  // Odd and past one parallel chunk, so that the threads split it unevenly.
  const Shape shape{3, 33335};
  Tensor p = test::random_tensor(shape, 1, dtype), buf = test::random_tensor(shape, 2, dtype);
  Tensor p_ref = p.clone(), buf_ref = buf.clone();
  for (std::uint64_t k = 0; k < 3; ++k) {
    const Tensor grad = test::random_tensor(shape, 10 + k, dtype);
    sgd_momentum_step_(p, buf, grad, step);
    reference_step(p_ref, buf_ref, grad, step);
  }
  set_num_threads(saved);
  // The same roundings in the same order, on whichever instruction set's clone of the
  // loop this CPU runs (the build never contracts products into FMAs): bit for bit.
  test::require_close(p, p_ref, 0, 0);
  test::require_close(buf, buf_ref, 0, 0);
}

TEST_CASE("sgd_momentum_step_ takes strided and broadcast gradients", "[cpu][tensor]") {
  const SgdMomentumStep step{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true};
  Tensor p = test::random_tensor({4, 6}, 3), buf = test::random_tensor({4, 6}, 4);
  const Tensor transposed = test::random_tensor({6, 4}, 5).t(), row = test::random_tensor({1, 6}, 6);
  for (const Tensor& grad : {transposed, row}) {
    Tensor p_ref = p.clone(), buf_ref = buf.clone();
    sgd_momentum_step_(p, buf, grad, step);
    reference_step(p_ref, buf_ref, grad.expand({4, 6}), step);
    test::require_close(p, p_ref, 1e-6, 1e-6);
    test::require_close(buf, buf_ref, 1e-6, 1e-6);
  }
}

TEST_CASE("sgd_momentum_step_ checks its tensors, naming the problem", "[cpu][tensor]") {
  const SgdMomentumStep step{.lr = 0.1, .momentum = 0.9};
  Tensor p = Tensor::zeros({3, 4}), buf = Tensor::zeros({3, 4}), g = Tensor::ones({3, 4});
  Tensor short_buf = Tensor::zeros({4});
  CHECK_THROWS_WITH(sgd_momentum_step_(p, short_buf, g, step),
                    Catch::Contains("momentum buffer of shape [4] for a parameter of shape [3, 4]"));
  CHECK_THROWS_WITH(sgd_momentum_step_(p, p, g, step), Catch::Contains("shares the parameter's storage"));
  Tensor f64_buf = Tensor::zeros({3, 4}, {DType::f64});
  CHECK_THROWS_WITH(sgd_momentum_step_(p, f64_buf, g, step), Catch::Contains("sgd_momentum_step_: dtypes differ"));
  Tensor strided = Tensor::zeros({4, 3}).t();
  CHECK_THROWS_WITH(sgd_momentum_step_(strided, buf, g, step),
                    Catch::Contains("sgd_momentum_step_: self must be contiguous"));
  CHECK_THROWS_WITH(sgd_momentum_step_(p, buf, Tensor::ones({2, 4}), step),
                    Catch::Contains("sgd_momentum_step_: shapes [3, 4] and [2, 4] cannot be broadcast"));
}

TEST_CASE("sgd_momentum_step_ reads a gradient that is the buffer or the parameter as before the step",
          "[cpu][tensor]") {
  const SgdMomentumStep step{.lr = 0.1, .momentum = 0.9};
  // The very same view as the buffer: buf = 0.9 * 2 + 2, not 0.9 * 2 + 0.9 * 2.
  Tensor p = Tensor::ones({3, 4}), buf = Tensor::full({3, 4}, 2.0);
  sgd_momentum_step_(p, buf, buf, step);
  CHECK(buf.to_vector<float>() == std::vector<float>(12, 2 * 0.9f + 2));
  CHECK(p.to_vector<float>() == std::vector<float>(12, 1 + -0.1f * (2 * 0.9f + 2)));
  // The very same view as the parameter: d = 1, buf = 0.9 * 2 + 1, p = 1 - 0.1 * buf.
  Tensor q = Tensor::ones({3, 4}), qbuf = Tensor::full({3, 4}, 2.0);
  sgd_momentum_step_(q, qbuf, q, step);
  CHECK(qbuf.to_vector<float>() == std::vector<float>(12, 2 * 0.9f + 1));
  CHECK(q.to_vector<float>() == std::vector<float>(12, 1 + -0.1f * (2 * 0.9f + 1)));
  // A view of part of the buffer, broadcast: still the values from before the step.
  Tensor r = Tensor::ones({3, 4}), rbuf = Tensor::arange(0, 12, 1).reshape({3, 4});
  const Tensor row = rbuf.narrow(0, 0, 1);
  sgd_momentum_step_(r, rbuf, row, step);
  std::vector<float> expected;
  for (int i = 0; i < 12; ++i) expected.push_back(static_cast<float>(i) * 0.9f + static_cast<float>(i % 4));
  CHECK(rbuf.to_vector<float>() == expected);
}

}  // namespace dtrain
