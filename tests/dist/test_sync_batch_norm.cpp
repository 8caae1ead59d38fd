// SyncBatchNorm on rank r's slice of a global batch against BatchNorm on the whole batch,
// computed on every rank. Ranks hold different batch sizes (rank r has r + 2 rows), at
// any world size.
#include "dtrain/dist/data_parallel/sync_batch_norm.h"
#include "dtrain/layers/layers.h"
#include "support/test_support.h"

using namespace dtrain;
using dtrain::test::random_tensor;

namespace {

constexpr double kTolerance = 2e-5;

std::int64_t rows_of(int rank) { return rank + 2; }
std::int64_t first_row_of(int rank) {
  std::int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += rows_of(r);
  return first;
}

// Random affine parameters, so that gamma and beta matter in the gradients.
void randomize_affine(nn::BatchNorm& bn, std::uint64_t seed) {
  Tensor w = bn.weight.data(), b = bn.bias.data();
  w.copy_(random_tensor(w.shape(), seed, DType::f32, 0.5, 1.5));
  b.copy_(random_tensor(b.shape(), seed + 1));
}

struct Result {
  Tensor y, dx, dgamma, dbeta, running_mean, running_var;
};

// y = bn(x), loss = sum(y * weights); gradients of the loss.
Result run(nn::BatchNorm& bn, const Tensor& x_data, const Tensor& weights) {
  Variable x(x_data.clone(), true);
  Variable y = bn(x);
  sum(mul(y, Variable(weights))).backward();
  return {y.data(), x.grad(), bn.weight.grad(), bn.bias.grad(), bn.running_mean, bn.running_var};
}

double max_diff(const Tensor& a, const Tensor& b) { return a.shape() == b.shape() ? max_abs_diff(a, b) : 1e9; }

void check_against_batch_norm(const std::shared_ptr<nn::BatchNorm>& reference_bn, const Shape& example_shape) {
  auto comm = dist::world();
  const int rank = comm->rank();
  const std::int64_t total = first_row_of(comm->size());
  Shape shape{total};
  shape.insert(shape.end(), example_shape.begin(), example_shape.end());
  // Offset and scaled, so that the statistics are not those of U(-1, 1).
  const Tensor x = add(mul(random_tensor(shape, 40), 3.0), 2.0);
  const Tensor weights = random_tensor(shape, 41);

  randomize_affine(*reference_bn, 42);
  dist::SyncBatchNorm sync(*reference_bn, comm);
  const Result expected = run(*reference_bn, x, weights);

  const std::int64_t first = first_row_of(rank), rows = rows_of(rank);
  Result mine = run(sync, x.narrow(0, first, rows), weights.narrow(0, first, rows));
  // Each rank holds the gradient of its own part of the loss; their sum is the whole's.
  comm->all_reduce(mine.dgamma, dist::ReduceOp::Sum);
  comm->all_reduce(mine.dbeta, dist::ReduceOp::Sum);

  CHECK(max_diff(mine.y, expected.y.narrow(0, first, rows)) <= kTolerance);
  CHECK(max_diff(mine.dx, expected.dx.narrow(0, first, rows)) <= kTolerance);
  CHECK(max_diff(mine.dgamma, expected.dgamma) <= kTolerance * static_cast<double>(total));
  CHECK(max_diff(mine.dbeta, expected.dbeta) <= kTolerance * static_cast<double>(total));
  CHECK(max_diff(mine.running_mean, expected.running_mean) <= kTolerance);
  // Unbiased over the global batch, not each rank's share.
  CHECK(max_diff(mine.running_var, expected.running_var) <= kTolerance);
}

}  // namespace

TEST_CASE("SyncBatchNorm2d over unequal rank batches equals BatchNorm2d on their union", "[cpu][dist]") {
  check_against_batch_norm(std::make_shared<nn::BatchNorm2d>(3), {3, 4, 5});
}

TEST_CASE("SyncBatchNorm1d over unequal rank batches equals BatchNorm1d on their union", "[cpu][dist]") {
  check_against_batch_norm(std::make_shared<nn::BatchNorm1d>(4), {4});
}

TEST_CASE("convert_sync_batch_norm replaces every BatchNorm in the tree and keeps its state", "[cpu][dist]") {
  auto comm = dist::world();
  auto bn2 = std::make_shared<nn::BatchNorm2d>(4);
  auto bn1 = std::make_shared<nn::BatchNorm1d>(3, nn::BatchNormOptions{.eps = 1e-3, .affine = false});
  randomize_affine(*bn2, 50);
  bn2->running_mean.fill_(0.5);
  bn1->running_var.fill_(2.0);
  bn2->bias.set_requires_grad(false);
  auto head =
      std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{std::make_shared<nn::Linear>(4, 3), bn1});
  nn::Sequential model{std::make_shared<nn::Conv2d>(1, 4, 3), bn2, std::make_shared<nn::ReLU>(), head};
  model.eval();
  const nn::StateDict before = model.state_dict();

  CHECK(dist::convert_sync_batch_norm(model, comm) == 2);
  CHECK(dist::convert_sync_batch_norm(model, comm) == 0);  // already synchronized

  auto* sync2 = dynamic_cast<dist::SyncBatchNorm*>(model[1].get());
  auto* sync1 = dynamic_cast<dist::SyncBatchNorm*>((*head)[1].get());
  REQUIRE(sync2 != nullptr);
  REQUIRE(sync1 != nullptr);
  CHECK(sync2->describe() == "SyncBatchNorm2d(4)");
  CHECK(sync1->describe() == "SyncBatchNorm1d(3, affine=false)");
  CHECK(sync1->options().eps == 1e-3);
  CHECK_FALSE(sync2->is_training());
  CHECK(sync2->weight.requires_grad());
  CHECK_FALSE(sync2->bias.requires_grad());  // frozen stays frozen
  const nn::StateDict after = model.state_dict();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    INFO(after[i].first);
    CHECK(after[i].first == before[i].first);
    CHECK(max_abs_diff(after[i].second.to(DType::f64), before[i].second.to(DType::f64)) == 0.0);
  }
  // The replacement owns new tensors: training it leaves the original untouched.
  CHECK_FALSE(sync2->weight.is(bn2->weight));
}

TEST_CASE("SyncBatchNorm needs more than one value per channel over all ranks", "[cpu][dist]") {
  auto comm = dist::world();
  dist::SyncBatchNorm bn(nn::BatchNorm1d(2), comm);
  // One row per rank: fine with several ranks, an error alone.
  Variable x(random_tensor({1, 2}, 60 + static_cast<std::uint64_t>(comm->rank())), true);
  if (comm->size() == 1) {
    CHECK_THROWS_WITH(bn(x), Catch::Contains("SyncBatchNorm") && Catch::Contains("more than one value per channel"));
  } else {
    Variable y = bn(x);
    sum(y).backward();
    CHECK(x.has_grad());
  }
}
