// make_strategy at any world size (1, 2, 4 ranks): which strategy each spec builds and on
// which mesh, the errors for specs that cannot run, and a strategy defined by this test
// alone (one class and one registration line) that the Trainer runs unchanged.
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/dist/ps/ps_strategy.h"
#include "dtrain/dist/core/strategy_factory.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/trainer.h"
#include "support/test_support.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// Every rank trains its own replica on its own shard, without exchanging gradients (a
// strategy the library does not have): prepare() is all it overrides (the base class's
// placement reads shard r of the world's on rank r, and adds evaluation sums over it).
class IndependentReplicas final : public dist::Strategy {
 public:
  IndependentReplicas(dist::CommunicatorPtr world, Device device) : Strategy("independent", device, std::move(world)) {}
  std::shared_ptr<nn::Module> prepare(std::shared_ptr<nn::Module> model) override {
    model->to(device_);
    module_ = std::move(model);
    return module_;
  }
};

const bool registered = [] {
  dist::register_strategy(
      "independent", [](dist::StrategySpec&, const dist::CommunicatorPtr& world, Device device,
                        const dist::StrategyHints&) { return std::make_shared<IndependentReplicas>(world, device); });
  return true;
}();

}  // namespace

TEST_CASE("strategy spec: items, flags and numbers, and malformed specs", "[cpu][dist]") {
  auto spec = dist::StrategySpec::parse("pp=2,recompute,micro=8,bucket_mb=0.5");
  CHECK(spec.integer("pp", 1) == 2);
  CHECK(spec.flag("recompute"));
  CHECK_FALSE(spec.flag("sync_bn"));
  CHECK(spec.number("bucket_mb", 4) == 0.5);
  CHECK(spec.unread() == std::vector<std::string>{"micro"});
  CHECK(spec.integer("recompute", 7, 2) == 7);  // a bare key: the fallback
  CHECK_THROWS_WITH(dist::StrategySpec::parse("pp=2,pp=3"), Contains("'pp' is given twice"));
  CHECK_THROWS_WITH(dist::StrategySpec::parse("pp=2,,dp"), Contains("an empty item"));
  CHECK_THROWS_WITH(dist::StrategySpec::parse("pp="), Contains("'pp=' has no value"));
  auto bad = dist::StrategySpec::parse("pp=two");
  CHECK_THROWS_WITH(bad.integer("pp", 1), Contains("strategy spec 'pp=two': pp=two must be an integer >= 1"));
}

TEST_CASE("make_strategy: data parallel by default, local on one rank", "[cpu][dist]") {
  auto world = dist::world();
  const std::string expected = world->size() == 1 ? "local" : "data_parallel";
  CHECK(dist::make_strategy("", world, Device::cpu())->name() == expected);
  CHECK(dist::make_strategy("dp,bucket_mb=1,exchange=all_reduce", world, Device::cpu())->name() == expected);
  CHECK_THROWS_WITH(dist::make_strategy("dp,foo=1", world, Device::cpu()),
                    Contains("strategy spec 'dp,foo=1': 'foo' not used by the dp strategy"));
  CHECK_THROWS_WITH(dist::make_strategy("bogus=1", world, Device::cpu()),
                    Contains("strategy spec 'bogus=1' names no strategy: expected one of ps, pp, zero, dp, local"));
  CHECK_THROWS_WITH(dist::make_strategy(fmt::format("dp={}", world->size() + 1), world, Device::cpu()),
                    Contains(fmt::format("but the job has {} ranks", world->size())));
  if (world->size() > 1) {
    CHECK_THROWS_WITH(dist::make_strategy("local", world, Device::cpu()), Contains("local trains one process"));
  }
}

TEST_CASE("make_strategy: a pipeline on the dp x pp mesh", "[cpu][dist]") {
  auto world = dist::world();
  if (world->size() % 2 != 0) {
    CHECK_THROWS_WITH(dist::make_strategy("pp=2", world, Device::cpu()), Contains("is not a multiple of the 2 stages"));
    return;
  }
  auto strategy = dist::make_strategy("pp=2,micro=2,schedule=gpipe", world, Device::cpu());
  auto* pipeline = dynamic_cast<dist::PipelineStrategy*>(strategy.get());
  REQUIRE(pipeline != nullptr);
  CHECK(pipeline->stage() == world->rank() % 2);
  CHECK(pipeline->replica() == world->rank() / 2);
  CHECK(pipeline->replicas() == world->size() / 2);
  CHECK(pipeline->mesh().describe() == fmt::format("dp={} x pp=2", world->size() / 2));
  CHECK_THROWS_WITH(dist::make_strategy(fmt::format("pp=2,dp={}", world->size()), world, Device::cpu()),
                    Contains(fmt::format("pp=2 x dp={} is {} ranks", world->size(), 2 * world->size())));
  CHECK_THROWS_WITH(dist::make_strategy("pp=2,balance=time", world, Device::cpu()),
                    Contains("balance=time needs the shape of an example"));
}

TEST_CASE("make_strategy: parameter servers on the worker + ps mesh", "[cpu][dist]") {
  auto world = dist::world();
  if (world->size() < 2) {
    CHECK_THROWS_WITH(dist::make_strategy("ps=1", world, Device::cpu()), Contains("need at least one worker besides"));
    return;
  }
  auto strategy = dist::make_strategy("ps=1,mode=ssp:2", world, Device::cpu());
  auto* ps = dynamic_cast<dist::ParameterServerStrategy*>(strategy.get());
  REQUIRE(ps != nullptr);
  CHECK(ps->trains() == (world->rank() < world->size() - 1));
  CHECK(ps->mesh().role() == (ps->trains() ? "worker" : "ps"));
  CHECK(ps->data_shard().count == world->size() - 1);
  CHECK_THROWS_WITH(dist::make_strategy("ps=1,mode=sometimes", world, Device::cpu()), Contains("sometimes"));
}

TEST_CASE("make_strategy: a strategy registered by the test trains under the Trainer", "[cpu][dist]") {
  REQUIRE(registered);
  auto world = dist::world();
  auto strategy = dist::make_strategy("independent", world, Device::cpu());
  REQUIRE(strategy->name() == "independent");
  manual_seed(3);
  strategy->prepare(nn::mlp(4, {8}, 3));
  optim::SGD sgd(strategy->module().parameters(), {.lr = 0.1});
  const std::int64_t n = 64;
  std::vector<std::int64_t> labels(n);
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = i % 3;
  auto data = std::make_shared<data::TensorDataset>(test::random_tensor({n, 4}, 9), Tensor::from_vector(labels, {n}));
  train::Trainer trainer(strategy, {.train = data, .test = data, .batch_size = 8 * world->size()},
                         {.epochs = 1, .verbose = false});
  const train::FitResult fit = trainer.fit(sgd);
  REQUIRE(fit.epochs.size() == 1);
  CHECK(fit.epochs[0].samples == n);  // every rank's shard, summed by reduce_sums
  CHECK(fit.epochs[0].updates == n / 8 / world->size());
}
