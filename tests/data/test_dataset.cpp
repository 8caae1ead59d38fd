#include "data/idx_files.h"
#include "dtrain/data/dataset.h"

using namespace dtrain;
using namespace dtrain::data;
using dtrain::test::require_error;

namespace {
// Example i: input f64 (2, 3) with values 10*i + k, target i64 (1) = i; example `odd`
// (if any) returns a (3, 2) input instead.
class GridDataset final : public Dataset {
 public:
  explicit GridDataset(std::int64_t odd = -1) : odd_(odd) {}
  std::int64_t size() const override { return 6; }
  Example get(std::int64_t i) const override {
    Example ex{Tensor::empty(i == odd_ ? Shape{3, 2} : Shape{2, 3}, {DType::f64}), Tensor::empty({1}, {DType::i64})};
    for (int k = 0; k < 6; ++k) ex.input.data<double>()[k] = 10.0 * static_cast<double>(i) + k;
    *ex.target.data<std::int64_t>() = i;
    return ex;
  }

 private:
  std::int64_t odd_;
};
}  // namespace

TEST_CASE("Dataset::get_batch stacks examples by default", "[cpu][data]") {
  GridDataset ds;
  Batch batch = ds.get_batch({5, 1, 5});
  REQUIRE(batch.inputs.shape() == Shape{3, 2, 3});
  REQUIRE(batch.inputs.dtype() == DType::f64);
  REQUIRE(batch.targets.shape() == Shape{3, 1});
  CHECK(batch.targets.to_vector<std::int64_t>() == std::vector<std::int64_t>{5, 1, 5});
  auto inputs = batch.inputs.to_vector<double>();
  const std::int64_t order[] = {5, 1, 5};
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 6; ++k) CHECK(inputs[static_cast<std::size_t>(r * 6 + k)] == 10.0 * order[r] + k);
}

TEST_CASE("Dataset::get_batch rejects mismatched examples and empty batches", "[cpu][data]") {
  GridDataset ds(/*odd=*/4);
  require_error([&] { ds.get_batch({0, 4}); }, {"input of example 4", "[3, 2] f64", "[2, 3] f64"});
  require_error([&] { ds.get_batch({}); }, {"at least one index"});
}
