// softmax_cross_entropy_rows_: the one-pass CPU kernel of the fused head's softmax against
// the composed ops (log_softmax, the softmax scaled by its row sums, the target subtracted),
// f32 and f64, rows shorter than a lane, with a tail, and as wide as a vocabulary; i32 and i64
// targets; a NaN in a row; and the arguments it refuses. f32 within 2e-6 relative (the
// kernel's exp is within 2 ulps of libm's and sums over sixteen lanes), f64 to rounding.
#include "support/test_support.h"

#include <cmath>
#include <vector>

namespace dtrain {

TEST_CASE("softmax_cross_entropy_rows_ equals the composed softmax ops", "[cpu][tensor]") {
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const std::int64_t v : {1, 15, 17, 5003}) {
      for (const DType index_dtype : {DType::i64, DType::i32}) {
        INFO(dtype_name(dtype) << ", V " << v << ", targets " << dtype_name(index_dtype));
        const std::int64_t n = 9;
        const Tensor x = test::random_tensor({n, v}, 71, dtype, -20, 20);
        const Tensor targets = mul(test::random_tensor({n}, 72, DType::f64, 0, 1), static_cast<double>(v))
                                   .to(DType::i64)
                                   .to(index_dtype);
        Tensor logits = x.clone();
        const SoftmaxCrossEntropyRows got = softmax_cross_entropy_rows_(logits, targets);

        const Tensor t = targets.to(DType::i64).reshape({n, 1});
        const Tensor expected_log_prob = gather(log_softmax(x, 1), 1, t);
        const Tensor expected_sums = sum(exp(sub(x, max(x, {1}, true))), {1}, true);
        const Tensor expected_logits =
            sub(mul(softmax(x, 1), expected_sums), scatter_add({n, v}, 1, t, expected_sums));
        const double tol = dtype == DType::f64 ? 1e-12 : 2e-6;
        test::require_close(got.sums, expected_sums, tol, tol);
        test::require_close(got.log_prob, expected_log_prob, tol, tol * 10);
        test::require_close(logits, expected_logits, tol, tol * 10);
      }
    }
  }
}

TEST_CASE("softmax_cross_entropy_rows_: a NaN makes its row's loss NaN, and bad arguments are refused",
          "[cpu][tensor]") {
  Tensor logits = Tensor::from_vector<float>({0, 1, 2, 3, std::nanf(""), 5}, {2, 3});
  const SoftmaxCrossEntropyRows r = softmax_cross_entropy_rows_(logits, Tensor::from_vector<std::int64_t>({2, 0}, {2}));
  const std::vector<float> log_prob = r.log_prob.to_vector<float>();
  CHECK(std::isfinite(log_prob[0]));
  CHECK(std::isnan(log_prob[1]));

  Tensor x = Tensor::zeros({2, 3});
  const Tensor ok = Tensor::from_vector<std::int64_t>({0, 1}, {2});
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows_(x, Tensor::from_vector<std::int64_t>({0, 3}, {2})),
                      Catch::Contains("targets must lie in [0, 3) (the columns of logits), found 3"));
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows_(x, Tensor::from_vector<std::int64_t>({0}, {1})),
                      Catch::Contains("targets must be (2) i64 or i32"));
  Tensor strided = Tensor::zeros({3, 2}).transpose(0, 1);
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows_(strided, ok), Catch::Contains("(strided)"));
  Tensor half = Tensor::zeros({2, 3}, {DType::bf16});
  REQUIRE_THROWS_WITH(softmax_cross_entropy_rows_(half, ok), Catch::Contains("contiguous f32 or f64"));
}

}  // namespace dtrain
