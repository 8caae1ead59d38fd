#include "dtrain/data/subset.h"
#include "dtrain/data/tensor_dataset.h"
#include "support/test_support.h"

using namespace dtrain;

namespace {
std::shared_ptr<data::TensorDataset> numbered(std::int64_t n) {
  Tensor x = Tensor::arange(0, static_cast<double>(n)).reshape({n, 1});
  return std::make_shared<data::TensorDataset>(x, Tensor::arange(0, static_cast<double>(n), 1, {DType::i64}));
}
}  // namespace

TEST_CASE("Subset::first and Subset::shard pick the documented indices", "[data][cpu]") {
  auto d = numbered(10);
  auto head = data::Subset::first(d, 3);
  REQUIRE(head->size() == 3);
  CHECK(head->get(2).target.item() == 2);
  CHECK(data::Subset::first(d, 50)->size() == 10);
  std::vector<std::int64_t> seen;
  for (int r = 0; r < 3; ++r) {
    auto shard = data::Subset::shard(d, r, 3);
    CHECK(shard->size() == (r == 0 ? 4 : 3));
    auto batch = shard->get_batch({0, 1, 2});
    CHECK(batch.targets.to_vector<std::int64_t>()[1] == r + 3);
    for (std::int64_t i = 0; i < shard->size(); ++i) seen.push_back(static_cast<std::int64_t>(shard->get(i).target.item()));
  }
  std::sort(seen.begin(), seen.end());
  for (std::int64_t i = 0; i < 10; ++i) CHECK(seen[i] == i);
  CHECK_THROWS_WITH(data::Subset::shard(d, 3, 3), Catch::Contains("rank 3"));
  CHECK_THROWS_WITH(data::Subset(d, {0, 10}), Catch::Contains("index 10"));
  CHECK_THROWS_WITH(head->get(3), Catch::Contains("index 3"));
}

TEST_CASE("TensorDataset checks its tensors and stacks batches", "[data][cpu]") {
  auto d = numbered(4);
  auto b = d->get_batch({3, 1});
  CHECK(b.inputs.shape() == Shape{2, 1});
  CHECK(b.inputs.to_vector<float>() == std::vector<float>{3, 1});
  CHECK_THROWS_WITH(data::TensorDataset(Tensor::zeros({3, 2}), Tensor::zeros({4})), Catch::Contains("[3, 2]"));
}
