// The Trainer under DataParallelStrategy at any world size W (1 as a plain process, 2 and 4
// under mpirun): against the data-parallel loop train_mnist ran before the Trainer
// (bit-identical), against one process training on the same global batches (equal up to
// the order of float sums: 1e-5 absolute on parameters after 2 epochs of SGD with momentum),
// and with gradient accumulation against without it (same tolerance). Checks come after the
// last collective of each test, so a failure on one rank cannot leave the others waiting.
#include "dtrain/data/distributed_sampler.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/dist/data_parallel/data_parallel_strategy.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/trainer.h"
#include "support/test_support.h"

using namespace dtrain;

namespace {

constexpr double kTolerance = 1e-5;
constexpr std::int64_t kExamples = 256;
constexpr std::int64_t kGlobalBatch = 32;

// Three classes of 4-feature points, a random but fixed labelling.
std::shared_ptr<data::TensorDataset> dataset(std::uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty({kExamples, 4});
  normal_(x, 0, 1, &gen);
  std::vector<std::int64_t> labels(kExamples);
  for (std::int64_t i = 0; i < kExamples; ++i) labels[static_cast<std::size_t>(i)] = (i * 7 + 1) % 3;
  return std::make_shared<data::TensorDataset>(x, Tensor::from_vector(labels, {kExamples}));
}

std::shared_ptr<nn::Module> fresh_model() {
  manual_seed(21);
  return nn::mlp(4, {8}, 3);
}

optim::SGD make_sgd(const nn::Module& m) { return optim::SGD(m.parameters(), {.lr = 0.1, .momentum = 0.9}); }

std::vector<Tensor> snapshot(const nn::Module& m) {
  std::vector<Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.data().clone());
  return out;
}

double max_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, max_abs_diff(a[i], b[i]));
  return worst;
}

struct Run {
  std::vector<Tensor> params;
  train::FitResult fit;
  bool writes_model = false;  // this rank writes a part of the checkpoint
};

Run train_with(std::shared_ptr<dist::Strategy> strategy, int accumulate, std::shared_ptr<data::TensorDataset> test) {
  strategy->prepare(fresh_model());
  optim::SGD sgd = make_sgd(strategy->module());
  train::Trainer trainer(strategy,
                         {.train = dataset(1), .test = std::move(test), .batch_size = kGlobalBatch, .seed = 3},
                         {.epochs = 2, .accumulate = accumulate, .check_replicas = true, .verbose = false});
  train::FitResult fit = trainer.fit(sgd);
  return {snapshot(strategy->module()), fit, !strategy->checkpoint_plan().part.empty()};
}

}  // namespace

TEST_CASE("Trainer with DataParallelStrategy equals the data-parallel loop step by step", "[dist][mpi]") {
  auto world = dist::world();
  const Run trained = train_with(std::make_shared<dist::DataParallelStrategy>(world, Device::cpu()), 1, nullptr);

  // The reference: the loop of train_mnist before the Trainer, written out.
  auto model = fresh_model();
  dist::DataParallel ddp(model, world);
  optim::SGD sgd = make_sgd(*model);
  data::DataLoader loader(dataset(1), {.batch_size = kGlobalBatch / world->size()},
                          std::make_shared<data::DistributedSampler>(kExamples, world->rank(), world->size(), 3));
  for (int epoch = 0; epoch < 2; ++epoch) {
    loader.set_epoch(epoch);
    for (const data::Batch& b : loader) {
      sgd.zero_grad();
      cross_entropy(ddp.forward(Variable(b.inputs)), b.targets).backward();
      ddp.finish_gradient_sync();
      sgd.step();
    }
  }
  CHECK(max_diff(trained.params, snapshot(*model)) == 0);
  REQUIRE(trained.fit.epochs.size() == 2);
  CHECK(trained.fit.epochs[1].replica_divergence == 0.0);
  CHECK(trained.fit.epochs[1].samples == kExamples);
  // Rank 0 saves for every replica.
  CHECK(trained.writes_model == (world->rank() == 0));
}

TEST_CASE("W data-parallel ranks equal one process on the same global batches", "[dist][mpi]") {
  auto world = dist::world();
  const Run parallel = train_with(std::make_shared<dist::DataParallelStrategy>(world, Device::cpu()), 1, dataset(2));
  // Every rank computes the one-process reference by itself (no communication).
  const Run local = train_with(std::make_shared<dist::LocalStrategy>(), 1, dataset(2));
  CHECK(max_diff(parallel.params, local.params) < kTolerance);
  // Sharded evaluation, summed over the ranks, sees the whole test set.
  CHECK(parallel.fit.test_accuracy == Approx(local.fit.test_accuracy).margin(1e-12));
  CHECK(local.writes_model);
}

TEST_CASE("Data-parallel gradient accumulation equals one update over the same batch", "[dist][mpi]") {
  auto world = dist::world();
  const Run once = train_with(std::make_shared<dist::DataParallelStrategy>(world, Device::cpu()), 1, nullptr);
  const Run accumulated = train_with(std::make_shared<dist::DataParallelStrategy>(world, Device::cpu()), 2, nullptr);
  CHECK(max_diff(once.params, accumulated.params) < kTolerance);
  CHECK(accumulated.fit.epochs[1].replica_divergence == 0.0);
  CHECK(accumulated.fit.epochs[1].updates == once.fit.epochs[1].updates);
}
