// The transformer ops of ops.h against loops written out in double: rms_norm_forward and
// rms_norm_backward, rope_tables, rope_forward and rope_backward; their non-contiguous
// inputs and their errors.
#include "support/test_support.h"

#include <cmath>
#include <vector>

namespace dtrain {
namespace {

struct RmsRef {
  std::vector<double> y, rstd, dx, dw;
};

// x (rows, d) row-major; w empty for no weight; g the output gradient.
RmsRef rms_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& g,
               std::int64_t rows, std::int64_t d, double eps) {
  RmsRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(static_cast<std::size_t>(d), 0);
  for (std::int64_t i = 0; i < rows; ++i) {
    const auto at = [&](std::int64_t j) { return static_cast<std::size_t>(i * d + j); };
    double squares = 0;
    for (std::int64_t j = 0; j < d; ++j) squares += x[at(j)] * x[at(j)];
    const double s = 1 / std::sqrt(squares / static_cast<double>(d) + eps);
    r.rstd.push_back(s);
    const auto weight = [&](std::int64_t j) { return w.empty() ? 1.0 : w[static_cast<std::size_t>(j)]; };
    // d/dx_k of y_j = x_j s w_j: s w_j [j == k] - x_j w_j s^3 x_k / d.
    double hx = 0;
    for (std::int64_t j = 0; j < d; ++j) hx += g[at(j)] * weight(j) * x[at(j)];
    for (std::int64_t j = 0; j < d; ++j) {
      r.y[at(j)] = x[at(j)] * s * weight(j);
      r.dx[at(j)] = g[at(j)] * weight(j) * s - x[at(j)] * s * s * s * hx / static_cast<double>(d);
      r.dw[static_cast<std::size_t>(j)] += g[at(j)] * x[at(j)] * s;
    }
  }
  return r;
}

// x (B, T, H, D) row-major, tables (T, D/2); sign -1 for the backward.
std::vector<double> rope_ref(const std::vector<double>& x, const Shape& shape, const std::vector<double>& cos,
                             const std::vector<double>& sin, double sign) {
  const std::int64_t b = shape[0], t = shape[1], h = shape[2], d = shape[3], half = d / 2;
  std::vector<double> out(x.size());
  for (std::int64_t bi = 0; bi < b; ++bi)
    for (std::int64_t ti = 0; ti < t; ++ti)
      for (std::int64_t hi = 0; hi < h; ++hi) {
        const std::size_t base = static_cast<std::size_t>(((bi * t + ti) * h + hi) * d);
        for (std::int64_t i = 0; i < half; ++i) {
          const double c = cos[static_cast<std::size_t>(ti * half + i)];
          const double s = sign * sin[static_cast<std::size_t>(ti * half + i)];
          const double lo = x[base + static_cast<std::size_t>(i)], up = x[base + static_cast<std::size_t>(i + half)];
          out[base + static_cast<std::size_t>(i)] = lo * c - up * s;
          out[base + static_cast<std::size_t>(i + half)] = up * c + lo * s;
        }
      }
  return out;
}

Tensor as(const std::vector<double>& v, const Shape& shape, DType dtype) {
  return Tensor::from_vector(v, shape).to(dtype);
}

}  // namespace

TEST_CASE("rms_norm forward and backward match the formulas, with and without a weight", "[cpu][tensor]") {
  for (const bool weighted : {true, false}) {
    for (DType dtype : {DType::f64, DType::f32}) {
      INFO((weighted ? "weight " : "no weight ") << dtype_name(dtype));
      // 3 x 5 rows of 40: rows over several threads' chunks; one row of large values.
      Tensor x = test::random_tensor({3, 5, 40}, 1, DType::f64, -2, 2);
      x = add(x, Tensor::from_vector<double>({0, 0, 100}, {3, 1, 1}));
      const Tensor w = test::random_tensor({40}, 2, DType::f64, 0.5, 1.5);
      const Tensor g = test::random_tensor({3, 5, 40}, 3, DType::f64);
      const double eps = 1e-6;
      const RmsRef ref = rms_ref(x.to_vector<double>(), weighted ? w.to_vector<double>() : std::vector<double>{},
                                 g.to_vector<double>(), 15, 40, eps);
      const Tensor wt = weighted ? w.to(dtype) : Tensor();
      const RmsNormResult r = rms_norm_forward(x.to(dtype), wt, eps);
      CHECK(r.y.dtype() == dtype);
      CHECK(r.rstd.shape() == Shape{3, 5, 1});
      const double tol = dtype == DType::f64 ? 1e-12 : 2e-5;
      test::require_close(r.y, as(ref.y, {3, 5, 40}, dtype), tol, tol);
      test::require_close(r.rstd, as(ref.rstd, {3, 5, 1}, dtype), tol, tol);
      const RmsNormGrads d = rms_norm_backward(g.to(dtype), x.to(dtype), r.rstd, wt);
      test::require_close(d.x, as(ref.dx, {3, 5, 40}, dtype), tol, tol);
      if (weighted) test::require_close(d.weight, as(ref.dw, {40}, dtype), tol, tol);
      else CHECK_FALSE(d.weight.defined());
    }
  }
}

TEST_CASE("rms_norm: non-contiguous input, many rows, one thread or several", "[cpu][tensor]") {
  // (40, 2000) transposed: rows of 40 read through strides; enough rows for several blocks
  // of the weight gradient.
  const Tensor x = test::random_tensor({40, 2000}, 4).t();
  const Tensor w = test::random_tensor({40}, 5), g = test::random_tensor({2000, 40}, 6);
  const RmsNormResult r = rms_norm_forward(x, w, 1e-5);
  const RmsNormResult rc = rms_norm_forward(x.contiguous(), w, 1e-5);
  test::require_close(r.y, rc.y, 0, 0);
  const RmsNormGrads d = rms_norm_backward(g, x, r.rstd, w);
  const int threads = num_threads();
  set_num_threads(1);
  const RmsNormGrads d1 = rms_norm_backward(g, x, r.rstd, w);
  set_num_threads(threads);
  test::require_close(d.x, d1.x, 0, 0);
  test::require_close(d.weight, d1.weight, 0, 0);  // fixed blocks: the same sums
  // The blocks' partial sums add up to the sum over every row.
  test::require_close(d.weight, sum(mul(mul(g, x), r.rstd), {0}), 1e-4, 1e-4);
}

TEST_CASE("rms_norm refuses 16-bit floats, integers and a mismatched weight, naming them", "[cpu][tensor]") {
  const Tensor x = test::random_tensor({2, 4}, 7);
  CHECK_THROWS_WITH(rms_norm_forward(x.to(DType::bf16), Tensor(), 1e-6),
                    Catch::Contains("rms_norm") && Catch::Contains("bf16") && Catch::Contains("f32"));
  CHECK_THROWS_WITH(rms_norm_forward(x.to(DType::i64), Tensor(), 1e-6), Catch::Contains("i64"));
  CHECK_THROWS_WITH(rms_norm_forward(x, Tensor::ones({3}), 1e-6),
                    Catch::Contains("rms_norm: weight must be (4)") && Catch::Contains("[3]"));
  CHECK_THROWS_WITH(rms_norm_forward(x, Tensor::ones({4}, {DType::f64}), 1e-6), Catch::Contains("f64"));
  const RmsNormResult r = rms_norm_forward(x, Tensor(), 1e-6);
  CHECK_THROWS_WITH(rms_norm_backward(x, x, Tensor::ones({3}), Tensor()), Catch::Contains("rstd"));
  CHECK_THROWS_WITH(rms_norm_backward(x.t().contiguous(), x, r.rstd, Tensor()), Catch::Contains("gradient"));
}

TEST_CASE("rope_tables: theta^(-2i/D) frequencies from first_position, in f64 then cast", "[cpu][tensor]") {
  const RopeTables t = rope_tables(5, 8, 10000, DType::f64, Device::cpu(), 3);
  REQUIRE(t.cos.shape() == Shape{5, 4});
  REQUIRE(t.sin.shape() == Shape{5, 4});
  const auto c = t.cos.to_vector<double>(), s = t.sin.to_vector<double>();
  for (int p = 0; p < 5; ++p) {
    for (int i = 0; i < 4; ++i) {
      const double angle = (p + 3) / std::pow(10000.0, 2.0 * i / 8);
      CHECK(c[static_cast<std::size_t>(p * 4 + i)] == Approx(std::cos(angle)).epsilon(1e-15).margin(1e-15));
      CHECK(s[static_cast<std::size_t>(p * 4 + i)] == Approx(std::sin(angle)).epsilon(1e-15).margin(1e-15));
    }
  }
  const RopeTables f = rope_tables(5, 8, 10000, DType::f32, Device::cpu(), 3);
  CHECK(f.cos.dtype() == DType::f32);
  test::require_close(f.cos, t.cos.to(DType::f32), 0, 0);  // rounded once from f64
  CHECK_THROWS_WITH(rope_tables(4, 7, 10000, DType::f32, Device::cpu()), Catch::Contains("head_dim must be even"));
  CHECK_THROWS_WITH(rope_tables(4, 8, 10000, DType::bf16, Device::cpu()), Catch::Contains("bf16"));
}

TEST_CASE("rope_forward rotates pairs (i, i + D/2); rope_backward is its transpose", "[cpu][tensor]") {
  const Shape shape{2, 5, 3, 8};
  const RopeTables t = rope_tables(5, 8, 500, DType::f64, Device::cpu());
  const Tensor x = test::random_tensor(shape, 8, DType::f64);
  const Tensor g = test::random_tensor(shape, 9, DType::f64);
  const auto c = t.cos.to_vector<double>(), s = t.sin.to_vector<double>();
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == DType::f64 ? 1e-14 : 1e-6;
    const Tensor cos = t.cos.to(dtype), sin = t.sin.to(dtype);
    const Tensor y = rope_forward(x.to(dtype), cos, sin);
    test::require_close(y, as(rope_ref(x.to_vector<double>(), shape, c, s, 1), shape, dtype), tol, tol);
    test::require_close(rope_backward(g.to(dtype), cos, sin),
                        as(rope_ref(g.to_vector<double>(), shape, c, s, -1), shape, dtype), tol, tol);
  }
  // <rope(x), g> = <x, rope_backward(g)>, and a rotation keeps each pair's length.
  const double lhs = sum(mul(rope_forward(x, t.cos, t.sin), g)).item();
  const double rhs = sum(mul(x, rope_backward(g, t.cos, t.sin))).item();
  CHECK(lhs == Approx(rhs).epsilon(1e-13));
  CHECK(sum(square(rope_forward(x, t.cos, t.sin))).item() == Approx(sum(square(x)).item()).epsilon(1e-13));
  // Position 0 is the identity.
  const RopeTables t0 = rope_tables(1, 8, 500, DType::f64, Device::cpu());
  const Tensor x0 = test::random_tensor({2, 1, 3, 8}, 10, DType::f64);
  test::require_close(rope_forward(x0, t0.cos, t0.sin), x0, 0, 0);
}

TEST_CASE("rope_forward of a non-contiguous view (heads split from a transposed projection)", "[cpu][tensor]") {
  // (B, H, T, D) stored, viewed as (B, T, H, D) by a transpose: as attention code has it.
  const Tensor stored = test::random_tensor({2, 3, 5, 8}, 11);
  const Tensor x = stored.transpose(1, 2);
  REQUIRE_FALSE(x.is_contiguous());
  const RopeTables t = rope_tables(5, 8, 10000, DType::f32, Device::cpu());
  test::require_close(rope_forward(x, t.cos, t.sin), rope_forward(x.contiguous(), t.cos, t.sin), 0, 0);
}

TEST_CASE("rope_forward refuses mismatched tables and shapes, naming them", "[cpu][tensor]") {
  const Tensor x = test::random_tensor({2, 5, 3, 8}, 12);
  const RopeTables t = rope_tables(5, 8, 10000, DType::f32, Device::cpu());
  const RopeTables longer = rope_tables(6, 8, 10000, DType::f32, Device::cpu());
  CHECK_THROWS_WITH(
      rope_forward(x, longer.cos, longer.sin),
      Catch::Contains("rope_forward: cos and sin must be (T, D/2) = [5, 4]") && Catch::Contains("[6, 4]"));
  CHECK_THROWS_WITH(rope_forward(x, t.cos.to(DType::f64), t.sin.to(DType::f64)), Catch::Contains("f64"));
  CHECK_THROWS_WITH(rope_forward(x.reshape({10, 3, 8}), t.cos, t.sin), Catch::Contains("(B, T, H, D)"));
  CHECK_THROWS_WITH(rope_forward(x.to(DType::f16), t.cos, t.sin), Catch::Contains("f16"));
}

}  // namespace dtrain
