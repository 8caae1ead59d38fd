// DataParallel against single-process references computed on every rank. Every test runs
// at any world size W (1 as a plain process, 2 and 4 under mpirun): rank r trains on rows
// [r*b, (r+1)*b) of a fixed synthetic batch of b*W rows, and the reference trains one
// fresh model (from the same seed) on all of them. Comparisons come after the last
// collective of a test, so a failing check on one rank cannot leave the others waiting.
//
// Tolerance: parameters after 3 SGD steps (lr 0.1, momentum 0.9) in f32 agree to 1e-5
// absolute; the only differences are the order of floating-point sums (the mean over
// W slices, then over ranks, against one mean over the batch).
#include "dist/data_parallel/reducer.h"
#include "dtrain/core/environment.h"
#include "dtrain/dist/data_parallel/data_parallel.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/dist/data_parallel/sync_batch_norm.h"
#include "dtrain/layers/layers.h"
#include "dtrain/optim/sgd.h"
#include "support/test_support.h"

#include <functional>

using namespace dtrain;
using dtrain::dist::DataParallelOptions;
using dtrain::test::random_tensor;

namespace {

constexpr double kTolerance = 1e-5;
constexpr std::int64_t kRowsPerRank = 3;
constexpr std::int64_t kClasses = 3;
constexpr int kSteps = 3;

using Factory = std::function<std::shared_ptr<nn::Module>()>;

Factory mlp_factory(std::uint64_t seed) {
  return [seed] {
    manual_seed(seed);
    return nn::mlp(6, {8, 5}, kClasses);
  };
}

Factory cnn_factory(std::uint64_t seed) {
  return [seed] {
    manual_seed(seed);
    return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        std::make_shared<nn::Conv2d>(2, 4, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::BatchNorm2d>(4),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(4 * 3 * 3, kClasses)});
  };
}

struct Batch {
  Tensor x, y;
  // Rows [first, first + count).
  Batch rows(std::int64_t first, std::int64_t count) const {
    return {x.narrow(0, first, count), y.narrow(0, first, count)};
  }
};

Batch make_batch(const Shape& example_shape, std::int64_t rows, std::uint64_t seed) {
  Shape shape{rows};
  shape.insert(shape.end(), example_shape.begin(), example_shape.end());
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) labels[static_cast<std::size_t>(i)] = (i * 7 + 1) % kClasses;
  return {random_tensor(shape, seed), Tensor::from_vector(labels, {rows})};
}

optim::SGD make_sgd(const nn::Module& model) { return optim::SGD(model.parameters(), {.lr = 0.1, .momentum = 0.9}); }

Variable loss_on(nn::Module& model, const Batch& b) { return cross_entropy(model(Variable(b.x)), b.y); }
Variable loss_through(dist::DataParallel& ddp, const Batch& b) {
  return cross_entropy(ddp.forward(Variable(b.x)), b.y);
}

std::vector<Tensor> snapshot(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.data().clone());
  return out;
}

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, max_abs_diff(a[i], b[i]));
  return worst;
}

// kSteps of single-process SGD on the whole batch.
std::vector<Tensor> train_reference(const Factory& make, const Batch& batch) {
  auto model = make();
  auto sgd = make_sgd(*model);
  for (int step = 0; step < kSteps; ++step) {
    sgd.zero_grad();
    loss_on(*model, batch).backward();
    sgd.step();
  }
  return snapshot(*model);
}

struct DdpResult {
  std::vector<Tensor> params;
  double replica_diff;
};

// kSteps of DataParallel SGD, this rank on its rows. Each rank initializes differently
// (seed + rank) so that the result also depends on the broadcast from rank 0.
DdpResult train_data_parallel(const std::function<std::shared_ptr<nn::Module>(int rank)>& make, const Batch& batch,
                              DataParallelOptions options, bool sync_batch_norm = false) {
  auto comm = dist::world();
  auto model = make(comm->rank());
  if (sync_batch_norm) dist::convert_sync_batch_norm(*model, comm);
  dist::DataParallel ddp(model, comm, options);
  auto sgd = make_sgd(*model);
  const Batch mine = batch.rows(comm->rank() * kRowsPerRank, kRowsPerRank);
  for (int step = 0; step < kSteps; ++step) {
    sgd.zero_grad();
    loss_through(ddp, mine).backward();
    ddp.finish_gradient_sync();
    sgd.step();
  }
  return {snapshot(*model), ddp.check_replicas()};
}

}  // namespace

TEST_CASE("assign_buckets walks parameters backwards, caps bytes and splits dtypes", "[cpu][dist]") {
  using dist::assign_buckets;
  const DType f = DType::f32, d = DType::f64;
  using Plan = std::vector<std::vector<std::size_t>>;
  // Sizes 40, 8, 16, 40 bytes: reverse walk 3, 2, 1, 0.
  std::vector<dist::BucketParam> params{{f, 40}, {f, 8}, {f, 16}, {f, 40}};
  CHECK(assign_buckets(params, 1) == Plan{{3}, {2}, {1}, {0}});
  CHECK(assign_buckets(params, 1000) == Plan{{3, 2, 1, 0}});
  // A bucket closes once it holds at least the cap.
  CHECK(assign_buckets(params, 50) == Plan{{3, 2}, {1, 0}});
  CHECK(assign_buckets(params, 64) == Plan{{3, 2, 1}, {0}});
  // Each dtype has its own buckets, ordered by their first parameter in the walk.
  std::vector<dist::BucketParam> mixed{{f, 8}, {d, 8}, {f, 8}, {d, 8}, {f, 8}};
  CHECK(assign_buckets(mixed, 16) == Plan{{4, 2}, {3, 1}, {0}});
  CHECK(assign_buckets({}, 16).empty());
}

TEST_CASE("DataParallel MLP training equals single-process training on the global batch", "[cpu][dist]") {
  const int world = dist::world()->size();
  const Batch batch = make_batch({6}, kRowsPerRank * world, 11);
  auto expected = train_reference(mlp_factory(5), batch);
  auto make = [](int rank) { return mlp_factory(5 + static_cast<std::uint64_t>(rank) * 100)(); };

  auto overlapped = train_data_parallel(make, batch, {});
  auto many_buckets = train_data_parallel(make, batch, {.bucket_bytes = 1});
  auto one_bucket = train_data_parallel(make, batch, {.bucket_bytes = std::size_t{1} << 30});
  auto at_finish = train_data_parallel(make, batch, {.bucket_bytes = 64, .overlap = false});

  for (const auto* run : {&overlapped, &many_buckets, &one_bucket, &at_finish}) {
    CHECK(max_diff(run->params, expected) <= kTolerance);
    CHECK(run->replica_diff == 0.0);  // every rank applies the same averaged gradient
  }
  // Bucketing changes only how the same values travel.
  CHECK(max_diff(many_buckets.params, one_bucket.params) <= 1e-6);
  CHECK(max_diff(at_finish.params, overlapped.params) <= 1e-6);
  CHECK(max_diff(expected, snapshot(*mlp_factory(5)())) > 100 * kTolerance);  // training moved the parameters
}

TEST_CASE("DataParallel CNN with SyncBatchNorm equals single-process training with BatchNorm", "[cpu][dist]") {
  const int world = dist::world()->size();
  const Batch batch = make_batch({2, 6, 6}, kRowsPerRank * world, 12);
  auto expected = train_reference(cnn_factory(6), batch);
  auto make = [](int rank) { return cnn_factory(6 + static_cast<std::uint64_t>(rank) * 100)(); };

  auto synced = train_data_parallel(make, batch, {.bucket_bytes = 256}, true);
  CHECK(max_diff(synced.params, expected) <= kTolerance);
  CHECK(synced.replica_diff == 0.0);
  CHECK(max_diff(expected, snapshot(*cnn_factory(6)())) > 100 * kTolerance);
}

namespace {
// A trunk every rank uses and a branch only odd ranks use.
class Branchy : public nn::Module {
 public:
  explicit Branchy(bool use_branch) : use_branch_(use_branch) {
    trunk_ = register_module("trunk", std::make_shared<nn::Linear>(6, kClasses));
    branch_ = register_module("branch", std::make_shared<nn::Linear>(6, kClasses));
  }
  Variable forward(const Variable& x) override {
    Variable y = trunk_->forward(x);
    return use_branch_ ? add(y, branch_->forward(x)) : y;
  }
  std::string describe() const override { return "Branchy"; }

 private:
  bool use_branch_;
  std::shared_ptr<nn::Linear> trunk_, branch_;
};

std::shared_ptr<Branchy> make_branchy(int rank) {
  manual_seed(21);
  return std::make_shared<Branchy>(rank % 2 == 1);
}

std::vector<Tensor> gradients(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.has_grad() ? p.grad().clone() : Tensor());
  return out;
}
}  // namespace

TEST_CASE("DataParallel averages the gradient of a parameter some ranks do not use", "[cpu][dist]") {
  auto comm = dist::world();
  const int world = comm->size();
  const Batch batch = make_batch({6}, kRowsPerRank * world, 13);

  // Expected: the mean over ranks of each rank's local gradient, simulated here; zero for
  // the branch when no rank uses it.
  std::vector<Tensor> expected;
  for (int r = 0; r < world; ++r) {
    auto replica = make_branchy(r);
    loss_on(*replica, batch.rows(r * kRowsPerRank, kRowsPerRank)).backward();
    auto g = gradients(*replica);
    if (expected.empty()) expected.assign(g.size(), Tensor());
    for (std::size_t i = 0; i < g.size(); ++i) {
      Tensor contribution = g[i].defined() ? div(g[i], world) : Tensor::zeros(replica->parameters()[i].shape());
      expected[i] = expected[i].defined() ? add(expected[i], contribution) : contribution;
    }
  }

  auto model = make_branchy(comm->rank());
  dist::DataParallel ddp(model, comm, {.bucket_bytes = 1});
  const Batch mine = batch.rows(comm->rank() * kRowsPerRank, kRowsPerRank);
  std::vector<std::vector<Tensor>> steps;
  for (int step = 0; step < 2; ++step) {  // the second step checks that the first one reset
    model->zero_grad();
    loss_through(ddp, mine).backward();
    ddp.finish_gradient_sync();
    steps.push_back(gradients(*model));
  }
  for (const auto& grads : steps) {
    for (std::size_t i = 0; i < grads.size(); ++i) {
      REQUIRE(grads[i].defined());  // unused parameters get the average too
      CHECK(max_abs_diff(grads[i], expected[i]) <= 1e-6);
    }
  }
}

TEST_CASE("DataParallel no_sync accumulates locally; the synced step reduces the sum", "[cpu][dist]") {
  auto comm = dist::world();
  const int world = comm->size();
  const int rank = comm->rank();
  // Micro-batch m of rank r is rows [(m * W + r) * b, ... + b) of the global batch, so the
  // union over ranks and micro-batches is the whole batch. Each micro-batch loss is
  // halved, as in gradient accumulation, so the accumulated gradient is the batch mean's.
  const Batch batch = make_batch({6}, 2 * kRowsPerRank * world, 14);
  auto reference = mlp_factory(7)();
  auto reference_sgd = make_sgd(*reference);
  loss_on(*reference, batch).backward();
  reference_sgd.step();

  auto model = mlp_factory(7)();
  dist::DataParallel ddp(model, comm, {.bucket_bytes = 128});
  auto sgd = make_sgd(*model);
  const Batch first = batch.rows(rank * kRowsPerRank, kRowsPerRank);
  const Batch second = batch.rows((world + rank) * kRowsPerRank, kRowsPerRank);
  {
    auto guard = ddp.no_sync();
    mul(loss_through(ddp, first), 0.5).backward();
    ddp.finish_gradient_sync();  // a no-op inside no_sync()
  }
  auto after_first = gradients(*model);
  mul(loss_through(ddp, second), 0.5).backward();
  ddp.finish_gradient_sync();
  sgd.step();
  const double replicas = ddp.check_replicas();

  // The guarded step stayed local: it equals a lone replica's gradient on `first`.
  auto local = mlp_factory(7)();
  mul(loss_on(*local, first), 0.5).backward();
  CHECK(max_diff(after_first, gradients(*local)) == 0.0);
  CHECK(max_diff(snapshot(*model), snapshot(*reference)) <= kTolerance);
  CHECK(replicas == 0.0);
}

TEST_CASE("DataParallel without communication, or once destroyed, leaves gradients local", "[cpu][dist]") {
  auto comm = dist::world();
  const Batch batch = make_batch({6}, kRowsPerRank * comm->size(), 15);
  const Batch mine = batch.rows(comm->rank() * kRowsPerRank, kRowsPerRank);
  auto local = mlp_factory(8)();
  loss_on(*local, mine).backward();

  auto model = mlp_factory(8)();
  std::vector<Tensor> silent, after_destruction;
  {
    dist::DataParallel ddp(model, comm, {.bucket_bytes = 64, .communicate = false});
    loss_through(ddp, mine).backward();
    ddp.finish_gradient_sync();
    silent = gradients(*model);
  }
  model->zero_grad();
  loss_on(*model, mine).backward();  // no hooks left behind
  after_destruction = gradients(*model);
  CHECK(max_diff(silent, gradients(*local)) == 0.0);
  CHECK(max_diff(after_destruction, gradients(*local)) == 0.0);
}

TEST_CASE("DataParallel rejects a second backward before finish_gradient_sync", "[cpu][dist]") {
  auto comm = dist::world();
  auto model = mlp_factory(9)();
  dist::DataParallel ddp(model, comm, {.bucket_bytes = 64});
  const Batch mine = make_batch({6}, 2, 16);
  loss_through(ddp, mine).backward();
  std::string message;
  try {
    loss_through(ddp, mine).backward();
  } catch (const Error& e) {
    message = e.message();
  }
  ddp.finish_gradient_sync();  // the first step still completes on every rank
  CHECK_THAT(message,
             Catch::Contains("got a second gradient before finish_gradient_sync") && Catch::Contains("no_sync"));
}

TEST_CASE("DataParallel names the first parameter that differs between ranks", "[cpu][dist]") {
  auto comm = dist::world();
  const int world = comm->size();
  auto run = [&](const std::shared_ptr<nn::Module>& model) {
    try {
      dist::DataParallel ddp(model, comm);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string();
  };
  // The last rank has a wider hidden layer, then one layer more.
  const bool odd_one = world > 1 && comm->rank() == world - 1;
  const std::string wider = run(nn::mlp(6, {odd_one ? 9 : 8}, kClasses));
  const std::string deeper = run(odd_one ? nn::mlp(6, {8, 8}, kClasses) : nn::mlp(6, {8}, kClasses));
  const std::string same = run(nn::mlp(6, {8}, kClasses));
  CHECK(same.empty());
  if (world == 1) {
    CHECK(wider.empty());
    CHECK(deeper.empty());
  } else {
    const std::string last = std::to_string(world - 1);
    CHECK_THAT(wider, Catch::Contains("1 of " + std::to_string(world) + " differ") &&
                          Catch::Contains("rank 0 has parameter '1.weight' [8, 6] f32 where rank " + last +
                                          " has parameter '1.weight' [9, 6] f32"));
    CHECK_THAT(deeper, Catch::Contains("rank 0 has parameter '3.weight' [3, 8] f32 where rank " + last +
                                       " has parameter '3.weight' [8, 8] f32"));
  }
}

TEST_CASE("DataParallel broadcasts rank 0's state; check_replicas measures divergence", "[cpu][dist]") {
  auto comm = dist::world();
  const int rank = comm->rank();
  const bool drifts = comm->size() > 1 && rank == comm->size() - 1;
  auto model = cnn_factory(30 + static_cast<std::uint64_t>(rank))();
  auto& bn = dynamic_cast<nn::BatchNorm&>(*std::dynamic_pointer_cast<nn::Sequential>(model)->operator[](1));
  bn.running_mean.fill_(rank + 1);  // buffers are broadcast too
  dist::DataParallel ddp(model, comm);
  const auto after_broadcast = snapshot(*model);
  const double initial = ddp.check_replicas();
  // The last rank's batch-norm weight drifts by 0.25.
  if (drifts) {
    Tensor w = bn.weight.data();
    w.copy_(add(w, 0.25));
  }
  const double drifted = ddp.check_replicas();

  CHECK(max_diff(after_broadcast, snapshot(*cnn_factory(30)())) == 0.0);
  CHECK(bn.running_mean.to_vector<float>() == std::vector<float>(4, 1.0f));
  CHECK(initial == 0.0);
  CHECK(drifted == Approx(comm->size() > 1 ? 0.25 : 0.0).margin(1e-6));
}

// The same equivalence with the replicas on GPUs, one per rank, their gradients averaged
// over NCCL (DataParallel builds the NCCL communicator over the MPI world by itself).
// Needs a CUDA device per rank of the host; skips with the reason otherwise (ctest's
// dist.np1_nccl and dist.np2_nccl run it alone, tagged [nccl], so that the skip is the
// entry's: the other dist entries leave it out). The tolerance is looser than the CPU
// runs': cuBLAS sums in another order than the CPU reference.
TEST_CASE("DataParallel on CUDA over NCCL equals single-process CPU training", "[cuda][dist][nccl]") {
  auto comm = dist::world();
  const int world = comm->size();
  if (cuda::device_count() < env::local_world_size()) {
    test::skip_test_case(fmt::format("{} rank(s) on this host need as many CUDA devices, found {}{}",
                                     env::local_world_size(), cuda::device_count(),
                                     cuda::available() ? "" : " (" + cuda::unavailable_reason() + ")"));
    return;
  }
  const Batch batch = make_batch({6}, kRowsPerRank * world, 11);
  auto expected = train_reference(mlp_factory(5), batch);

  const Device gpu = dist::rank_cuda_device();
  auto model = mlp_factory(5 + static_cast<std::uint64_t>(comm->rank()) * 100)();
  model->to(gpu);
  // One rank: DataParallel would keep the local group; ask for NCCL so that it is used.
  dist::DataParallel ddp(model, world == 1 ? dist::nccl_communicator(comm, gpu) : comm, {.bucket_bytes = 64});
  auto sgd = make_sgd(*model);
  const Batch mine = batch.rows(comm->rank() * kRowsPerRank, kRowsPerRank);
  const Batch on_gpu{mine.x.to(gpu), mine.y.to(gpu)};
  for (int step = 0; step < kSteps; ++step) {
    sgd.zero_grad();
    loss_through(ddp, on_gpu).backward();
    ddp.finish_gradient_sync();
    sgd.step();
  }
  const double replica_diff = ddp.check_replicas();
  REQUIRE(ddp.tensor_communicator()->backend() == "nccl");
  std::vector<Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p.data().to(Device::cpu()));
  CHECK(max_diff(params, expected) <= 1e-4);
  CHECK(replica_diff == 0.0);
}
