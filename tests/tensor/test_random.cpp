// Random ops: Philox known-answer vectors, reproducibility per (seed, offset) whatever the
// thread count or layout, and the moments of the distributions.
#include "support/test_support.h"

#include "dtrain/core/parallel.h"
#include "tensor/philox.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

namespace dtrain {
namespace {

struct Moments {
  double mean, var;
};

Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  return {mean, var / static_cast<double>(v.size())};
}

struct ThreadCount {
  int saved = num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("Philox 4x32-10 matches the Random123 known answers", "[cpu][tensor]") {
  using detail::PhiloxBlock;
  auto words = [](PhiloxBlock b) { return std::vector<std::uint32_t>(b.v, b.v + 4); };
  CHECK(words(detail::philox4x32_10(PhiloxBlock{{0, 0, 0, 0}}, 0, 0)) ==
        std::vector<std::uint32_t>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(words(detail::philox4x32_10(PhiloxBlock{{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u)) ==
        std::vector<std::uint32_t>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(words(detail::philox4x32_10(PhiloxBlock{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822,
                                    0x299f31d0)) ==
        std::vector<std::uint32_t>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("random fills are reproducible per seed and differ across seeds", "[cpu][tensor]") {
  auto draw = [](std::uint64_t seed) {
    Generator gen(seed);
    Tensor t = Tensor::empty({1000});
    uniform_(t, 0, 1, &gen);
    return t.to_vector<float>();
  };
  CHECK(draw(7) == draw(7));
  CHECK(draw(7) != draw(8));

  // Consecutive calls reserve fresh counters.
  Generator gen(7);
  Tensor a = Tensor::empty({100}), b = Tensor::empty({100});
  uniform_(a, 0, 1, &gen);
  CHECK(gen.offset() == 100);
  uniform_(b, 0, 1, &gen);
  CHECK(gen.offset() == 200);
  CHECK(a.to_vector<float>() != b.to_vector<float>());

  // manual_seed resets the default generator.
  Tensor c = Tensor::empty({50}, {DType::f64}), d = Tensor::empty({50}, {DType::f64});
  manual_seed(42);
  normal_(c);
  manual_seed(42);
  normal_(d);
  CHECK(c.to_vector<double>() == d.to_vector<double>());
}

TEST_CASE("random fills do not depend on the thread count", "[cpu][tensor]") {
  auto draw = [](int threads) {
    ThreadCount tc(threads);
    Generator gen(3);
    Tensor u = Tensor::empty({70000}), n = Tensor::empty({70000}, {DType::f64}), b = Tensor::empty({70000});
    uniform_(u, -2, 3, &gen);
    normal_(n, 1, 2, &gen);
    bernoulli_(b, 0.3, &gen);
    return std::make_tuple(u.to_vector<float>(), n.to_vector<double>(), b.to_vector<float>());
  };
  CHECK(draw(1) == draw(2));
}

TEST_CASE("a strided tensor gets the values of its row-major order", "[cpu][tensor]") {
  Generator g1(11), g2(11);
  Tensor strided = Tensor::zeros({6, 4}).t();  // (4, 6) view, not contiguous
  Tensor dense = Tensor::empty({4, 6});
  uniform_(strided, 0, 1, &g1);
  uniform_(dense, 0, 1, &g2);
  CHECK(strided.to_vector<float>() == dense.to_vector<float>());
}

TEST_CASE("uniform and normal have the right moments", "[cpu][tensor]") {
  Generator gen(5);
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor u = Tensor::empty({100000}, {dtype});
    uniform_(u, -1, 3, &gen);
    std::vector<double> uv = u.to_vector<double>();
    CHECK(*std::min_element(uv.begin(), uv.end()) >= -1);
    CHECK(*std::max_element(uv.begin(), uv.end()) < 3);
    Moments mu = moments(u);
    CHECK(mu.mean == Approx(1.0).margin(0.02));
    CHECK(mu.var == Approx(16.0 / 12.0).epsilon(0.02));

    Tensor n = Tensor::empty({100000}, {dtype});
    normal_(n, 2, 0.5, &gen);
    Moments mn = moments(n);
    CHECK(mn.mean == Approx(2.0).margin(0.01));
    CHECK(mn.var == Approx(0.25).epsilon(0.02));
    std::vector<double> nv = n.to_vector<double>();
    const auto within_1sd = std::count_if(nv.begin(), nv.end(), [](double x) { return std::abs(x - 2) < 0.5; });
    CHECK(static_cast<double>(within_1sd) / 100000.0 == Approx(0.6827).margin(0.01));
  }
}

TEST_CASE("bernoulli hits with probability p", "[cpu][tensor]") {
  Generator gen(9);
  for (double p : {0.0, 0.1, 0.5, 1.0}) {
    Tensor t = Tensor::empty({100000}, {DType::u8});
    bernoulli_(t, p, &gen);
    std::vector<double> v = t.to_vector<double>();
    CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 0 || x == 1; }));
    CHECK(std::accumulate(v.begin(), v.end(), 0.0) / 100000.0 == Approx(p).margin(0.005));
  }
}

TEST_CASE("randperm is a reproducible permutation", "[cpu][tensor]") {
  Generator g1(4), g2(4), g3(5);
  std::vector<std::int64_t> p = randperm(1000, &g1).to_vector<std::int64_t>();
  std::vector<std::int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sorted == identity);
  CHECK(p != identity);
  CHECK(randperm(1000, &g2).to_vector<std::int64_t>() == p);
  CHECK(randperm(1000, &g3).to_vector<std::int64_t>() != p);
  CHECK(randperm(0, &g1).numel() == 0);
}

TEST_CASE("random op argument errors", "[cpu][tensor]") {
  Tensor t = Tensor::empty({4});
  REQUIRE_THROWS_WITH(uniform_(t, 2, 1), Catch::Contains("uniform_") && Catch::Contains("low <= high"));
  REQUIRE_THROWS_WITH(normal_(t, 0, -1), Catch::Contains("normal_") && Catch::Contains("stddev"));
  REQUIRE_THROWS_WITH(bernoulli_(t, 1.5), Catch::Contains("bernoulli_") && Catch::Contains("1.5"));
  Tensor ints = Tensor::empty({4}, {DType::i64});
  REQUIRE_THROWS_WITH(uniform_(ints), Catch::Contains("floating"));
  REQUIRE_THROWS_WITH(randperm(-1), Catch::Contains("randperm"));
}

}  // namespace dtrain
