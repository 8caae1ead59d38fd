#include "data/idx_files.h"
#include "dtrain/data/distributed_sampler.h"

#include <algorithm>
#include <map>

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::require_error;

namespace {
// Every rank's share of one epoch, in rank order.
std::vector<std::vector<std::int64_t>> shares(std::int64_t n, int world, std::uint64_t seed, bool shuffle,
                                              bool drop_last, std::int64_t epoch) {
  std::vector<std::vector<std::int64_t>> out;
  for (int r = 0; r < world; ++r) {
    out.push_back(DistributedSampler(n, r, world, seed, shuffle, drop_last).indices(epoch));
  }
  return out;
}

std::map<std::int64_t, int> visit_counts(const std::vector<std::vector<std::int64_t>>& all) {
  std::map<std::int64_t, int> counts;
  for (const auto& share : all)
    for (std::int64_t i : share) ++counts[i];
  return counts;
}
}  // namespace

TEST_CASE("DistributedSampler with drop_last: disjoint equal shares of floor(n/W)", "[cpu][data]") {
  for (std::int64_t n : {0, 3, 10, 17, 64}) {
    for (int world : {1, 2, 3, 4}) {
      INFO("n " << n << " world " << world);
      auto all = shares(n, world, 7, true, true, 2);
      const std::int64_t per_rank = n / world;
      for (int r = 0; r < world; ++r) {
        CHECK(static_cast<std::int64_t>(all[r].size()) == per_rank);
        CHECK(DistributedSampler(n, r, world, 7, true, true).size() == per_rank);
      }
      auto counts = visit_counts(all);
      CHECK(static_cast<std::int64_t>(counts.size()) == per_rank * world);  // disjoint
      for (auto [index, count] : counts) {
        CHECK(count == 1);
        CHECK((index >= 0 && index < n));
      }
      // The dropped examples are exactly the tail of this epoch's permutation.
      auto perm = random_permutation(n, 7, 2);
      for (std::int64_t p = per_rank * world; p < n; ++p) CHECK(counts.count(perm[p]) == 0);
    }
  }
}

TEST_CASE("DistributedSampler with padding covers everything, repeating from the start", "[cpu][data]") {
  for (std::int64_t n : {1, 5, 10, 17}) {
    for (int world : {1, 2, 3, 4, 7}) {
      INFO("n " << n << " world " << world);
      auto all = shares(n, world, 3, true, false, 1);
      const std::int64_t per_rank = (n + world - 1) / world;
      for (int r = 0; r < world; ++r) CHECK(static_cast<std::int64_t>(all[r].size()) == per_rank);
      // The padded order is the permutation followed by its own start, cyclically: each
      // example is visited once plus once more per time the padding wraps over it.
      auto perm = random_permutation(n, 3, 1);
      std::map<std::int64_t, int> expected;
      for (std::int64_t p = 0; p < per_rank * world; ++p) ++expected[perm[p % n]];
      CHECK(visit_counts(all) == expected);
      CHECK(static_cast<std::int64_t>(expected.size()) == n);
      // Strided: rank r's j-th index is position r + j * world of the padded order.
      for (int r = 0; r < world; ++r)
        for (std::int64_t j = 0; j < per_rank; ++j) CHECK(all[r][j] == perm[(r + j * world) % n]);
    }
  }
}

TEST_CASE("DistributedSampler without shuffle strides over 0..n-1", "[cpu][data]") {
  // n = 10, W = 4: padded order 0..9, 0, 1.
  CHECK(DistributedSampler(10, 0, 4, 1, false).indices(0) == std::vector<std::int64_t>{0, 4, 8});
  CHECK(DistributedSampler(10, 1, 4, 1, false).indices(0) == std::vector<std::int64_t>{1, 5, 9});
  CHECK(DistributedSampler(10, 2, 4, 1, false).indices(5) == std::vector<std::int64_t>{2, 6, 0});
  CHECK(DistributedSampler(10, 3, 4, 1, false).indices(5) == std::vector<std::int64_t>{3, 7, 1});
  CHECK(DistributedSampler(10, 3, 4, 1, false, true).indices(0) == std::vector<std::int64_t>{3, 7});
}

TEST_CASE("DistributedSampler is reproducible per (seed, epoch) and reshuffles per epoch", "[cpu][data]") {
  DistributedSampler s(100, 1, 3, 11);
  CHECK(s.indices(4) == s.indices(4));
  CHECK(s.indices(4) == DistributedSampler(100, 1, 3, 11).indices(4));
  CHECK(s.indices(0) != s.indices(1));
  CHECK(s.indices(0) != DistributedSampler(100, 1, 3, 12).indices(0));
  CHECK(s.rank() == 1);
  CHECK(s.world_size() == 3);
}

TEST_CASE("DistributedSampler rejects bad arguments", "[cpu][data]") {
  require_error([] { DistributedSampler(-1, 0, 2, 0); }, {"DistributedSampler", "dataset size", "-1"});
  require_error([] { DistributedSampler(10, 0, 0, 0); }, {"DistributedSampler", "world size", "0"});
  require_error([] { DistributedSampler(10, 2, 2, 0); }, {"DistributedSampler", "rank 2", "[0, 2)"});
  require_error([] { DistributedSampler(10, -1, 2, 0); }, {"DistributedSampler", "rank -1"});
  require_error([] { DistributedSampler(10, 0, 2, 0).indices(-3); }, {"epoch", "-3"});
}

// The elastic contract (docs/ELASTIC.md): with a global batch of G split into micro-batches
// of G / (W x accumulation) per rank, update u takes positions [u G, (u + 1) G) of one
// epoch order whatever W is, so a run resumed after update u on another number of ranks
// takes the rest of the epoch's samples, each once.
TEST_CASE("DistributedSampler: update u takes the same samples on any number of ranks", "[cpu][data]") {
  const std::int64_t n = 240, global = 24;
  const std::vector<std::int64_t> order = DistributedSampler(n, 0, 1, 5).indices(3);
  for (int world : {1, 2, 3, 4, 6, 8, 12}) {
    for (int accumulate : {1, 2}) {
      if (global % (world * accumulate) != 0) continue;
      const std::int64_t micro = global / (world * accumulate);
      const auto all = shares(n, world, 5, true, false, 3);
      for (std::int64_t u = 0; u < n / global; ++u) {
        std::vector<std::int64_t> taken;
        for (const auto& share : all) {
          // The rank's micro-batches u * accumulate .. u * accumulate + accumulate - 1.
          const auto first = share.begin() + u * accumulate * micro;
          taken.insert(taken.end(), first, first + accumulate * micro);
        }
        std::vector<std::int64_t> expected(order.begin() + u * global, order.begin() + (u + 1) * global);
        std::sort(taken.begin(), taken.end());
        std::sort(expected.begin(), expected.end());
        INFO("world " << world << ", accumulate " << accumulate << ", update " << u);
        REQUIRE(taken == expected);
      }
    }
  }
}
