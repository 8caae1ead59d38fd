// matmul against a naive triple loop in double, over layouts the backend maps in place
// (row-major, transposed views, stride-0 broadcast batches) and ones it must copy.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"

#include <vector>

namespace dtrain {
namespace {

// (B,m,k) x (B,k,n) in double from the logical values of two 3-D tensors (any views).
Tensor naive_bmm(const Tensor& a, const Tensor& b) {
  const std::int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), out(batch * m * n, 0.0);
  for (std::int64_t p = 0; p < batch; ++p)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t q = 0; q < k; ++q) s += av[(p * m + i) * k + q] * bv[(p * k + q) * n + j];
        out[(p * m + i) * n + j] = s;
      }
  return Tensor::from_vector(out, {batch, m, n});
}

Tensor naive_mm(const Tensor& a, const Tensor& b) { return naive_bmm(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0); }

// Restores the thread count when a test changes it.
struct ThreadCount {
  int saved = num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("matmul 2-D square and rectangular match the naive product", "[cpu][tensor]") {
  Tensor a = test::random_tensor({17, 17}, 1), b = test::random_tensor({17, 17}, 2);
  test::require_close(matmul(a, b), naive_mm(a, b), 1e-5, 1e-5);

  Tensor c = test::random_tensor({5, 7}, 3), d = test::random_tensor({7, 3}, 4);
  Tensor cd = matmul(c, d);
  CHECK(cd.shape() == Shape{5, 3});
  test::require_close(cd, naive_mm(c, d), 1e-5, 1e-5);

  Tensor row = test::random_tensor({1, 9}, 5), col = test::random_tensor({9, 1}, 6);
  test::require_close(matmul(row, col), naive_mm(row, col), 1e-5, 1e-5);
  test::require_close(matmul(col, row), naive_mm(col, row), 1e-5, 1e-5);
}

TEST_CASE("matmul splits a large product's rows across threads", "[cpu][tensor]") {
  ThreadCount threads(2);
  Tensor a = test::random_tensor({203, 96}, 7), b = test::random_tensor({96, 75}, 8);
  test::require_close(matmul(a, b), naive_mm(a, b), 1e-5, 1e-4);
}

TEST_CASE("matmul transpose flags and transposed views read in place", "[cpu][tensor]") {
  Tensor a = test::random_tensor({6, 4}, 9);   // used as (4, 6) when transposed
  Tensor b = test::random_tensor({5, 6}, 10);  // used as (6, 5) when transposed
  Tensor a_t = a.t().contiguous(), b_t = b.t().contiguous();
  test::require_close(matmul(a, b, true, true), naive_mm(a_t, b_t), 1e-5, 1e-5);
  test::require_close(matmul(a_t, b, false, true), naive_mm(a_t, b_t), 1e-5, 1e-5);
  test::require_close(matmul(a, b_t, true, false), naive_mm(a_t, b_t), 1e-5, 1e-5);
  test::require_close(matmul(a.t(), b.t()), naive_mm(a_t, b_t), 1e-5, 1e-5);
}

TEST_CASE("matmul copies operands with no unit stride", "[cpu][tensor]") {
  Tensor big = test::random_tensor({8, 12}, 11);
  Tensor a = big.slice(0, 0, 8, 2).slice(1, 0, 12, 2);  // (4, 6), strides (24, 2)
  Tensor b = test::random_tensor({6, 3}, 12);
  test::require_close(matmul(a, b), naive_mm(a, b), 1e-5, 1e-5);
}

TEST_CASE("matmul batched 3-D, with transposes", "[cpu][tensor]") {
  Tensor a = test::random_tensor({4, 5, 6}, 13), b = test::random_tensor({4, 6, 3}, 14);
  Tensor ab = matmul(a, b);
  CHECK(ab.shape() == Shape{4, 5, 3});
  test::require_close(ab, naive_bmm(a, b), 1e-5, 1e-5);

  Tensor at = a.transpose(1, 2).contiguous(), bt = b.transpose(1, 2).contiguous();  // (4,6,5), (4,3,6)
  test::require_close(matmul(at, bt, true, true), naive_bmm(a, b), 1e-5, 1e-5);
}

TEST_CASE("matmul batched at 1 and 2 threads", "[cpu][tensor]") {
  Tensor a = test::random_tensor({6, 40, 30}, 15), b = test::random_tensor({6, 30, 20}, 16);
  Tensor expected = naive_bmm(a, b);
  for (int t : {1, 2}) {
    ThreadCount threads(t);
    test::require_close(matmul(a, b), expected, 1e-5, 1e-5);
  }
}

TEST_CASE("matmul broadcasts a 2-D right operand over the batch", "[cpu][tensor]") {
  Tensor a = test::random_tensor({3, 5, 6}, 17), b = test::random_tensor({6, 4}, 18);
  Tensor expected = naive_bmm(a, b.unsqueeze(0).expand({3, 6, 4}));
  test::require_close(matmul(a, b), expected, 1e-5, 1e-5);
  test::require_close(matmul(a, b.t().contiguous(), false, true), expected, 1e-5, 1e-5);
  // A transposed left operand cannot fold its batch into rows: the stride-0 broadcast path.
  test::require_close(matmul(a.transpose(1, 2).contiguous(), b, true, false), expected, 1e-5, 1e-5);
  // A broadcast operand with no unit stride: only its one slice is copied.
  Tensor wide = test::random_tensor({12, 8}, 19);
  Tensor strided = wide.slice(0, 0, 12, 2).slice(1, 0, 8, 2);  // (6, 4)
  test::require_close(matmul(a, strided), naive_bmm(a, strided.unsqueeze(0).expand({3, 6, 4})), 1e-5, 1e-5);
}

TEST_CASE("matmul reads stride-0 rows and single rows with any stride", "[cpu][tensor]") {
  // BLAS wants a leading dimension >= the row length: a broadcast row (stride 0) must be
  // copied, a single row's arbitrary stride must be ignored.
  Tensor row = test::random_tensor({1, 6}, 22), b = test::random_tensor({6, 4}, 23);
  Tensor rows = row.expand({5, 6});
  test::require_close(matmul(rows, b), naive_mm(rows, b), 1e-5, 1e-5);
  Tensor column = test::random_tensor({6, 1}, 24).expand({6, 3});  // stride 0 along the columns
  test::require_close(matmul(rows, column), naive_mm(rows, column), 1e-5, 1e-5);
  Tensor picked = test::random_tensor({4, 6}, 25).slice(0, 2, 3);  // one row, stride 6 to nowhere
  test::require_close(matmul(picked, b), naive_mm(picked, b), 1e-5, 1e-5);
}

TEST_CASE("matmul in f64 is accurate to double precision", "[cpu][tensor]") {
  Tensor a = test::random_tensor({9, 13}, 20, DType::f64), b = test::random_tensor({13, 7}, 21, DType::f64);
  Tensor ab = matmul(a, b);
  CHECK(ab.dtype() == DType::f64);
  test::require_close(ab, naive_mm(a, b), 1e-12, 1e-12);
}

TEST_CASE("matmul with an empty inner dimension is zero", "[cpu][tensor]") {
  Tensor a = Tensor::empty({3, 0}), b = Tensor::empty({0, 4});
  test::require_close(matmul(a, b), Tensor::zeros({3, 4}));
}

TEST_CASE("matmul shape and dtype errors name both operands", "[cpu][tensor]") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4, 5});
  REQUIRE_THROWS_WITH(matmul(a, b), Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})),
                      Catch::Contains("[2, 3, 4]") && Catch::Contains("[3, 4, 5]") && Catch::Contains("batch"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({3}), Tensor::zeros({3, 2})), Catch::Contains("[3]"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({3, 2}), Tensor::zeros({2, 2, 2})), Catch::Contains("3-D x 2-D"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}, {DType::f64})), Catch::Contains("dtypes"));
  REQUIRE_THROWS_WITH(matmul(Tensor::zeros({2, 2}, {DType::i64}), Tensor::zeros({2, 2}, {DType::i64})),
                      Catch::Contains("floating"));
  REQUIRE_NOTHROW(matmul(a, Tensor::zeros({5, 3}), false, true));
}

TEST_CASE("matmul_add_ adds the product into out, with transposes, in f32 and f64", "[cpu][tensor]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == DType::f32 ? 1e-5 : 1e-12;
    Tensor a = test::random_tensor({9, 13}, 30, dtype), b = test::random_tensor({7, 13}, 31, dtype);
    Tensor out = test::random_tensor({9, 7}, 32, dtype);
    const Tensor before = out.clone();
    const void* storage = out.raw_data();
    matmul_add_(out, a, b, false, true);
    CHECK(out.raw_data() == storage);  // in place
    test::require_close(out, add(before, naive_mm(a, b.transpose(0, 1)).to(dtype)), tol, tol);
    // Transposed left operand (a weight gradient: g^T x), and rows split across threads.
    Tensor g = test::random_tensor({300, 40}, 33, dtype), x = test::random_tensor({300, 50}, 34, dtype);
    Tensor w = test::random_tensor({40, 50}, 35, dtype);
    const Tensor w0 = w.clone();
    matmul_add_(w, g, x, true, false);
    test::require_close(w, add(w0, naive_mm(g.transpose(0, 1), x).to(dtype)), 1e-4, 1e-4);
  }
}

TEST_CASE("matmul_add_ refuses an out of the wrong shape, dtype or layout, or one it reads", "[cpu][tensor]") {
  Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({3, 4});
  Tensor wrong_shape = Tensor::zeros({4, 2});
  REQUIRE_THROWS_WITH(matmul_add_(wrong_shape, a, b), Catch::Contains("[2, 4]") && Catch::Contains("[4, 2]"));
  Tensor wrong_dtype = Tensor::zeros({2, 4}, {DType::f64});
  REQUIRE_THROWS_WITH(matmul_add_(wrong_dtype, a, b), Catch::Contains("f32") && Catch::Contains("f64"));
  Tensor strided = Tensor::zeros({4, 2}).transpose(0, 1);
  REQUIRE_THROWS_WITH(matmul_add_(strided, a, b), Catch::Contains("not contiguous"));
  Tensor square = Tensor::ones({3, 3});
  REQUIRE_THROWS_WITH(matmul_add_(square, square, square), Catch::Contains("shares storage"));
}

}  // namespace dtrain
