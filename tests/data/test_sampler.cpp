#include "data/idx_files.h"
#include "dtrain/data/sampler.h"

#include <algorithm>
#include <map>
#include <numeric>

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::require_error;

namespace {
std::vector<std::int64_t> iota_vector(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}
bool is_permutation_of_range(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v == iota_vector(static_cast<std::int64_t>(v.size()));
}
}  // namespace

TEST_CASE("SequentialSampler visits 0..n-1 in order every epoch", "[cpu][data]") {
  SequentialSampler s(7);
  CHECK(s.size() == 7);
  CHECK(s.indices(0) == iota_vector(7));
  CHECK(s.indices(5) == iota_vector(7));
  CHECK(SequentialSampler(0).indices(0).empty());
  require_error([] { SequentialSampler(-1); }, {"SequentialSampler", "-1"});
  require_error([&] { s.indices(-2); }, {"epoch", "-2"});
}

TEST_CASE("RandomSampler gives a reproducible permutation per (seed, epoch)", "[cpu][data]") {
  for (std::int64_t n : {0, 1, 2, 17, 1000}) {
    RandomSampler s(n, 42);
    REQUIRE(s.size() == n);
    for (std::int64_t epoch : {0, 1, 7}) {
      auto order = s.indices(epoch);
      REQUIRE(static_cast<std::int64_t>(order.size()) == n);
      CHECK(is_permutation_of_range(order));
      CHECK(order == s.indices(epoch));
      CHECK(order == RandomSampler(n, 42).indices(epoch));
      CHECK(order == random_permutation(n, 42, epoch));
    }
  }
  RandomSampler s(1000, 42);
  CHECK(s.indices(0) != s.indices(1));
  CHECK(s.indices(0) != RandomSampler(1000, 43).indices(0));
  CHECK(s.indices(0) != iota_vector(1000));
  // Seed and epoch are mixed, not added: (seed 1, epoch 0) differs from (seed 0, epoch 1).
  CHECK(random_permutation(100, 1, 0) != random_permutation(100, 0, 1));
  // The high halves count too.
  CHECK(random_permutation(100, std::uint64_t{1} << 32, 0) != random_permutation(100, 0, 0));
  require_error([&] { s.indices(-1); }, {"epoch", "-1"});
  require_error([] { RandomSampler(-3, 0); }, {"RandomSampler", "-3"});
}

TEST_CASE("random_permutation is uniform over permutations", "[cpu][data]") {
  // 3! = 6 orders over 6000 epochs: each should appear 1000 +- a few standard deviations
  // (sd ~ 29); a biased shuffle (e.g. swapping with any position) fails this.
  std::map<std::vector<std::int64_t>, int> counts;
  for (std::int64_t epoch = 0; epoch < 6000; ++epoch) ++counts[random_permutation(3, 7, epoch)];
  REQUIRE(counts.size() == 6);
  for (const auto& [order, count] : counts) {
    INFO("order " << order[0] << order[1] << order[2]);
    CHECK(count > 850);
    CHECK(count < 1150);
  }
}
