// Indexing and joining against direct loops: index_select / index_add (the pair behind
// Embedding), gather / scatter_add (behind cross-entropy), cat and stack.
#include "support/test_support.h"

#include <vector>

namespace dtrain {
namespace {

// Row-major offset of `coords` in `shape`.
std::int64_t flat(const Shape& shape, const std::vector<std::int64_t>& coords) {
  std::int64_t f = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) f = f * shape[k] + coords[k];
  return f;
}

// Calls f(coords) for every position of `shape` in row-major order.
template <class F>
void for_each_coord(const Shape& shape, F f) {
  std::vector<std::int64_t> c(shape.size(), 0);
  for (std::int64_t i = 0; i < shape_numel(shape); ++i) {
    f(c);
    for (std::size_t k = shape.size(); k-- > 0;) {
      if (++c[k] < shape[k]) break;
      c[k] = 0;
    }
  }
}

Tensor index_tensor(const std::vector<std::int64_t>& values, const Shape& shape, DType dtype) {
  return Tensor::from_vector(values, shape).to(dtype);
}

}  // namespace

TEST_CASE("index_select picks rows along any dim, with i64 and i32 indices", "[cpu][tensor]") {
  Tensor x = test::random_tensor({4, 5, 3}, 1);
  std::vector<double> xv = x.to_vector<double>();
  const std::vector<std::int64_t> picks = {2, 0, 2, 1};
  for (DType idx_type : {DType::i64, DType::i32}) {
    for (std::int64_t dim : {0, 1, 2, -1}) {
      const std::int64_t d = dim < 0 ? dim + 3 : dim;
      Tensor out = index_select(x, dim, index_tensor(picks, {4}, idx_type));
      Shape shape = x.shape();
      shape[d] = 4;
      std::vector<double> expected;
      for_each_coord(shape, [&](std::vector<std::int64_t> c) {
        c[d] = picks[c[d]];
        expected.push_back(xv[flat(x.shape(), c)]);
      });
      test::require_close(out, Tensor::from_vector(expected, shape), 0, 0);
    }
  }
  // Any dtype of data.
  Tensor ints = Tensor::from_vector(std::vector<std::int64_t>{10, 11, 12}, {3});
  CHECK(index_select(ints, 0, index_tensor({2, 2, 0}, {3}, DType::i64)).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{12, 12, 10});
}

TEST_CASE("index_add accumulates repeated indices", "[cpu][tensor]") {
  Tensor src = test::random_tensor({3, 5, 4}, 2, DType::f64);
  std::vector<double> sv = src.to_vector<double>();
  const std::vector<std::int64_t> targets = {1, 3, 1, 0, 1};
  Tensor out = index_add({3, 4, 4}, 1, index_tensor(targets, {5}, DType::i32), src);
  std::vector<double> expected(3 * 4 * 4, 0.0);
  for_each_coord(src.shape(), [&](std::vector<std::int64_t> c) {
    double v = sv[flat(src.shape(), c)];
    c[1] = targets[c[1]];
    expected[flat({3, 4, 4}, c)] += v;
  });
  test::require_close(out, Tensor::from_vector(expected, {3, 4, 4}), 1e-12, 1e-12);

  // The embedding-backward shape: (tokens, dim) rows added into a (vocab, dim) table.
  Tensor rows = test::random_tensor({1000, 64}, 3, DType::f64);
  std::vector<std::int64_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int64_t>((i * 7) % 13);
  Tensor table = index_add({13, 64}, 0, index_tensor(tokens, {1000}, DType::i64), rows);
  std::vector<double> rv = rows.to_vector<double>(), tv(13 * 64, 0.0);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    for (std::size_t j = 0; j < 64; ++j) tv[tokens[i] * 64 + j] += rv[i * 64 + j];
  test::require_close(table, Tensor::from_vector(tv, {13, 64}), 1e-12, 1e-12);
}

TEST_CASE("gather and scatter_add along each dim match the direct loops", "[cpu][tensor]") {
  const Shape xshape = {3, 4, 5};
  Tensor x = test::random_tensor(xshape, 4, DType::f64);
  std::vector<double> xv = x.to_vector<double>();
  for (std::int64_t d : {0, 1, 2}) {
    INFO("dim " << d);
    Shape ishape = xshape;
    ishape[d] = 6;  // more picks than the dim holds: repeats
    std::vector<std::int64_t> iv(shape_numel(ishape));
    for (std::size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<std::int64_t>((i * 5 + 3) % xshape[d]);
    Tensor index = index_tensor(iv, ishape, d == 1 ? DType::i32 : DType::i64);

    std::vector<double> gathered;
    for_each_coord(ishape, [&](std::vector<std::int64_t> c) {
      c[d] = iv[flat(ishape, c)];
      gathered.push_back(xv[flat(xshape, c)]);
    });
    test::require_close(gather(x, d, index), Tensor::from_vector(gathered, ishape), 0, 0);

    Tensor src = test::random_tensor(ishape, 5, DType::f64);
    std::vector<double> sv = src.to_vector<double>(), scattered(shape_numel(xshape), 0.0);
    for_each_coord(ishape, [&](std::vector<std::int64_t> c) {
      const std::int64_t i = flat(ishape, c);
      c[d] = iv[i];
      scattered[flat(xshape, c)] += sv[i];
    });
    test::require_close(scatter_add(xshape, d, index, src), Tensor::from_vector(scattered, xshape), 1e-12, 1e-12);
  }
}

TEST_CASE("out-of-range indices name the op, the index and the dim size", "[cpu][tensor]") {
  Tensor x = Tensor::zeros({3, 4});
  REQUIRE_THROWS_WITH(index_select(x, 0, index_tensor({0, 3}, {2}, DType::i64)),
                      Catch::Contains("index_select") && Catch::Contains("index 3") && Catch::Contains("size 3"));
  REQUIRE_THROWS_WITH(index_select(x, 1, index_tensor({-1}, {1}, DType::i32)),
                      Catch::Contains("index -1") && Catch::Contains("size 4"));
  REQUIRE_THROWS_WITH(index_add({2, 4}, 0, index_tensor({0, 2, 1}, {3}, DType::i64), x),
                      Catch::Contains("index_add") && Catch::Contains("index 2") && Catch::Contains("size 2"));
  REQUIRE_THROWS_WITH(gather(x, 1, index_tensor({0, 1, 2, 9, 0, 0}, {3, 2}, DType::i64)),
                      Catch::Contains("gather") && Catch::Contains("index 9"));
  REQUIRE_THROWS_WITH(scatter_add({3, 4}, 1, index_tensor({4, 0, 0}, {3, 1}, DType::i64), Tensor::zeros({3, 1})),
                      Catch::Contains("scatter_add") && Catch::Contains("index 4"));
  REQUIRE_THROWS_WITH(index_select(x, 0, Tensor::zeros({2})), Catch::Contains("i64 or i32"));
  REQUIRE_THROWS_WITH(gather(x, 1, index_tensor({0, 0}, {1, 2}, DType::i64)), Catch::Contains("[1, 2]"));
}

TEST_CASE("cat joins contiguous and strided tensors along any dim", "[cpu][tensor]") {
  Tensor a = test::random_tensor({2, 3, 4}, 6);
  Tensor b = test::random_tensor({4, 2, 3}, 7).permute({1, 2, 0});  // (2, 3, 4), strided
  Tensor c = test::random_tensor({2, 3, 4}, 8);
  std::vector<std::vector<double>> vals = {a.to_vector<double>(), b.to_vector<double>(), c.to_vector<double>()};
  const Shape piece = {2, 3, 4};
  for (std::int64_t d : {0, 1, 2}) {
    INFO("dim " << d);
    Shape shape = piece;
    shape[d] *= 3;
    std::vector<double> expected;
    for_each_coord(shape, [&](std::vector<std::int64_t> co) {
      const std::int64_t which = co[d] / piece[d];
      co[d] %= piece[d];
      expected.push_back(vals[which][flat(piece, co)]);
    });
    test::require_close(cat({a, b, c}, d), Tensor::from_vector(expected, shape), 0, 0);
  }
  // Empty pieces contribute nothing.
  test::require_close(cat({a, Tensor::zeros({2, 0, 4}), c}, 1), cat({a, c}, 1), 0, 0);
}

TEST_CASE("stack adds a new dim", "[cpu][tensor]") {
  Tensor a = test::random_tensor({2, 3}, 9), b = test::random_tensor({2, 3}, 10);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Tensor s0 = stack({a, b}, 0);
  CHECK(s0.shape() == Shape{2, 2, 3});
  std::vector<double> e0 = av;
  e0.insert(e0.end(), bv.begin(), bv.end());
  test::require_close(s0, Tensor::from_vector(e0, {2, 2, 3}), 0, 0);
  Tensor s2 = stack({a, b}, -1);
  CHECK(s2.shape() == Shape{2, 3, 2});
  std::vector<double> e2;
  for (std::size_t i = 0; i < av.size(); ++i) e2.insert(e2.end(), {av[i], bv[i]});
  test::require_close(s2, Tensor::from_vector(e2, {2, 3, 2}), 0, 0);
}

TEST_CASE("cat and stack shape errors name the tensors", "[cpu][tensor]") {
  REQUIRE_THROWS_WITH(cat({Tensor::zeros({2, 3}), Tensor::zeros({3, 3})}, 1),
                      Catch::Contains("cat") && Catch::Contains("[3, 3]") && Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(cat({Tensor::zeros({2}), Tensor::zeros({2}, {DType::f64})}, 0), Catch::Contains("f64"));
  REQUIRE_THROWS_WITH(cat({}, 0), Catch::Contains("at least one"));
  REQUIRE_THROWS_WITH(stack({Tensor::zeros({2, 3}), Tensor::zeros({3, 2})}, 0),
                      Catch::Contains("stack") && Catch::Contains("[3, 2]"));
}

}  // namespace dtrain
