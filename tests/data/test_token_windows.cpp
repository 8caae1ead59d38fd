// TokenWindows: the training windows' positions depend on (seed, index) alone, inputs and
// targets are the same window shifted by one, validation windows tile their range in order,
// and too little text is refused naming the remedy.
#include "dtrain/data/token_windows.h"

#include "dtrain/data/sampler.h"

#include <catch2/catch.hpp>

#include <numeric>
#include <set>

using namespace dtrain;
using namespace dtrain::data;

namespace {
TokenStream counting(std::int64_t n) {
  auto v = std::make_shared<std::vector<std::int32_t>>(static_cast<std::size_t>(n));
  std::iota(v->begin(), v->end(), 0);
  return v;
}
}  // namespace

TEST_CASE("token windows: the split leaves the last 10% for validation", "[data]") {
  REQUIRE(validation_split(1000) == 900);
  REQUIRE(validation_split(1009) == 909);  // floor(1009 / 10) = 100 validation tokens
  REQUIRE(validation_split(5) == 5);
}

TEST_CASE("token windows: random training windows are keyed by (seed, index)", "[data]") {
  auto tokens = counting(1000);
  auto a = TokenWindows::random(tokens, 0, 900, 16, 64, 7);
  auto b = TokenWindows::random(tokens, 0, 900, 16, 64, 7);
  auto c = TokenWindows::random(tokens, 0, 900, 16, 64, 8);
  std::set<std::int64_t> positions;
  int differ = 0;
  for (std::int64_t i = 0; i < 64; ++i) {
    REQUIRE(a->position(i) == b->position(i));
    differ += a->position(i) != c->position(i);
    REQUIRE(a->position(i) >= 0);
    REQUIRE(a->position(i) + 16 + 1 <= 900);  // the target's last token inside the range
    positions.insert(a->position(i));
  }
  REQUIRE(differ > 50);
  REQUIRE(positions.size() > 50);
  // Input = tokens[p, p+T), target = tokens[p+1, p+T+1): the counting stream shows p.
  Batch batch = a->get_batch({3, 10});
  REQUIRE(batch.inputs.shape() == Shape{2, 16});
  REQUIRE(batch.inputs.dtype() == DType::i64);
  for (int r = 0; r < 2; ++r) {
    const std::int64_t p = a->position(r == 0 ? 3 : 10);
    for (int j = 0; j < 16; ++j) {
      REQUIRE(batch.inputs.data<std::int64_t>()[r * 16 + j] == p + j);
      REQUIRE(batch.targets.data<std::int64_t>()[r * 16 + j] == p + j + 1);
    }
  }
  Example e = a->get(5);
  REQUIRE(e.input.shape() == Shape{16});
  REQUIRE(e.input.data<std::int64_t>()[0] == a->position(5));
}

TEST_CASE("token windows: validation windows tile their range in order", "[data]") {
  auto tokens = counting(1000);
  auto all = TokenWindows::sequential(tokens, 900, 1000, 16);
  REQUIRE(all->size() == 6);  // (100 - 1) / 16: each window needs its shifted target
  for (std::int64_t i = 0; i < 6; ++i) REQUIRE(all->position(i) == 900 + 16 * i);
  auto first = TokenWindows::sequential(tokens, 900, 1000, 16, 2);
  REQUIRE(first->size() == 2);
  REQUIRE(TokenWindows::sequential(tokens, 900, 1000, 16, 50)->size() == 6);
}

TEST_CASE("token windows: too little text is refused", "[data]") {
  auto tokens = counting(40);
  REQUIRE_THROWS_WITH(TokenWindows::random(tokens, 0, 36, 64, 10, 1),
                      Catch::Contains("the training tokens (36) are fewer than one window of block size 64 + 1"));
  REQUIRE_THROWS_WITH(TokenWindows::sequential(tokens, 36, 40, 8),
                      Catch::Contains("the validation tokens (4) are fewer than one window of block size 8 + 1"));
  REQUIRE_THROWS_WITH(TokenWindows::random(tokens, 0, 50, 4, 10, 1), Catch::Contains("outside the stream of 40"));
}

TEST_CASE("token windows: every rank count draws the same global batches", "[data]") {
  auto tokens = counting(1000);
  auto train = TokenWindows::random(tokens, 0, 900, 16, 48, 3);
  // One rank: in index order. Two and three ranks: the first 4 (3) of each rank's indices,
  // together, are windows 0-11, the first global batch of 12.
  REQUIRE(train->rank_sampler(0, 1, 9, true)->indices(0) == [] {
    std::vector<std::int64_t> all(48);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }());
  for (int world : {2, 3}) {
    std::set<std::int64_t> first_batch;
    for (int r = 0; r < world; ++r) {
      const auto mine = train->rank_sampler(r, world, 9, true)->indices(0);
      first_batch.insert(mine.begin(), mine.begin() + 12 / world);
    }
    REQUIRE(first_batch == std::set<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  }
  REQUIRE(train->rank_sampler(0, 2, 9, false) == nullptr);  // evaluation: the Trainer's split
  REQUIRE(TokenWindows::sequential(tokens, 900, 1000, 16)->rank_sampler(0, 2, 9, true) == nullptr);
}
