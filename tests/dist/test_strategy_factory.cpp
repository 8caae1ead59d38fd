// make_strategy at any world size (1, 2, 4 ranks): which strategy each spec builds and on
// which mesh, the errors for specs that cannot run, and a strategy defined by this test
// alone (one class and one registration line) that the Trainer runs unchanged.
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/dist/data_parallel/data_parallel_strategy.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/dist/ps/ps_strategy.h"
#include "dtrain/dist/zero/zero_strategy.h"
#include "dtrain/dist/strategy/parallel_dims.h"
#include "dtrain/dist/strategy/strategy_factory.h"
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

namespace {

// The dimensions of `text` for a job of `world` ranks whose hosts hold `per_host` each;
// throws as make_strategy would, before any strategy is built.
dist::ParallelDims dims(const std::string& text, int world, int per_host = 2) {
  auto spec = dist::StrategySpec::parse(text);
  return dist::parse_parallel_dims(spec, world, [&] { return per_host; });
}

}  // namespace

TEST_CASE("parallel dims: one grammar, sizes inferred, the product the world's size", "[cpu][dist]") {
  struct Case {
    std::string spec;
    int world, pp, dp_replicate, dp_shard, zero, tp = 1;
  };
  for (const Case& c : std::vector<Case>{{"", 4, 1, 4, 1, 0},
                                         {"dp=4", 4, 1, 4, 1, 0},
                                         {"pp=2", 4, 2, 2, 1, 0},
                                         {"pp=2,dp=2", 4, 2, 2, 1, 0},
                                         {"pp=2,zero=1", 4, 2, 1, 2, 1},
                                         {"pp=2,zero=2", 2, 2, 1, 1, 2},
                                         {"pp=2,dp=2,zero=2,shard=1", 4, 2, 2, 1, 2},
                                         {"zero", 2, 1, 1, 2, 1},
                                         {"zero=3", 3, 1, 1, 3, 3},
                                         {"zero=2,shard=2", 4, 1, 2, 2, 2},
                                         {"zero=2,hybrid", 6, 1, 3, 2, 2},
                                         {"tp=2", 4, 1, 2, 1, 0, 2},
                                         {"tp=2,sp", 2, 1, 1, 1, 0, 2},
                                         {"pp=2,tp=2", 4, 2, 1, 1, 0, 2},
                                         {"pp=2,dp=2,tp=2", 8, 2, 2, 1, 0, 2},
                                         {"zero=2,tp=2", 4, 1, 1, 2, 2, 2}}) {
    INFO(c.spec << " on " << c.world << " ranks");
    const dist::ParallelDims d = dims(c.spec, c.world);
    CHECK(d.pp == c.pp);
    CHECK(d.dp_replicate == c.dp_replicate);
    CHECK(d.dp_shard == c.dp_shard);
    CHECK(d.zero == c.zero);
    CHECK(d.tp == c.tp);
    CHECK(d.size() == c.world);
  }
  const dist::ParallelDims hybrid = dims("zero=2,shard=2", 4);
  CHECK(hybrid.describe() == "pp=1 x dp=4 (zero=2 over 2)");
  const std::vector<dist::MeshDim> mesh = hybrid.mesh_dims();
  REQUIRE(mesh.size() == 4);
  CHECK((mesh[0].name == "dp_replicate" && mesh[0].size == 2));
  CHECK((mesh[1].name == "dp_shard" && mesh[1].size == 2));
  CHECK((mesh[2].name == "pp" && mesh[2].size == 1));
  CHECK((mesh[3].name == "tp" && mesh[3].size == 1));  // last: a tensor-parallel group is consecutive ranks
  CHECK(dims("pp=2,tp=2,sp", 8).describe() == "pp=2 x dp=2 x tp=2 (sequence parallel)");
}

TEST_CASE("parallel dims: what does not fit or is not offered is refused when parsed, naming the keys", "[cpu][dist]") {
  const auto refused = [](const std::string& text, int world, const std::string& message) {
    INFO(text << " on " << world << " ranks");
    CHECK_THROWS_WITH(dims(text, world), Contains(fmt::format("strategy spec '{}': {}", text, message)));
  };
  refused("dp=2,sp", 2, "sp (sequence parallelism) splits inside tensor-parallel groups");
  refused("tp=3", 4, "4 ranks is not a multiple of pp=1 x tp=3");
  refused("dp=3,tp=2", 4, "pp=1 x dp=3 x tp=2 is 6 ranks, the job has 4");
  refused("dp=2,cp=2", 4, "cp (context parallelism) is not offered yet");
  refused("pp=3", 4, "4 ranks is not a multiple of the 3 stages");
  refused("pp=2,dp=3", 4, "pp=2 x dp=3 is 6 ranks, the job has 4");
  refused("dp=3", 4, "dp=3 but the job has 4 ranks");
  refused("pp", 4, "pp needs the number of stages (pp=K)");
  refused("zero=4", 4, "zero=4 must be a ZeRO stage, 1, 2 or 3");
  refused("shard=2", 4, "shard sets the ranks a ZeRO shard spans: give zero=1, 2 or 3 with it");
  refused("hybrid", 4, "hybrid sets the ranks a ZeRO shard spans");
  refused("zero=1,shard=2,hybrid", 4,
          "hybrid (shard inside each host) and shard=N (inside N ranks) exclude each other");
  refused("zero=2,shard=3", 4, "shard groups of 3 rank(s) do not divide the 4 ranks");
  refused("pp=2,zero=2,shard=3", 4, "shard groups of 3 rank(s) do not divide the 2 ranks");
}

TEST_CASE("make_strategy: parameter servers refuse other dimensions before any communication", "[cpu][dist]") {
  auto world = dist::world();
  // On every rank count, before the servers' mesh (a collective) is built.
  CHECK_THROWS_WITH(dist::make_strategy("ps=1,pp=2", world, Device::cpu()),
                    Contains("strategy spec 'ps=1,pp=2': parameter servers do not combine with pp"));
  CHECK_THROWS_WITH(dist::make_strategy("ps=1,zero=1", world, Device::cpu()),
                    Contains("parameter servers do not combine with zero"));
}

TEST_CASE("make_strategy: ZeRO-3's gather units are its buckets, under a pipeline too", "[cpu][dist]") {
  auto world = dist::world();
  // Refused before any strategy (a collective) is built, on every rank count.
  const int n = world->size();
  for (const std::string& pp : {std::string(), fmt::format("pp={},", n)}) {
    CHECK_THROWS_WITH(dist::make_strategy(pp + "zero=3,bucket_mb=1", world, Device::cpu()),
                      Contains("at zero=3 the gradient buckets are the gather units; size them with gather_mb"));
    CHECK_THROWS_WITH(dist::make_strategy(pp + "zero=2,gather_mb=1", world, Device::cpu()),
                      Contains("gather_mb sizes stage 3's gather units, and zero=2 gathers no layers"));
    CHECK_THROWS_WITH(dist::make_strategy(pp + "zero=3,exchange=powersgd:2", world, Device::cpu()),
                      Contains("exchange=powersgd:2 with zero=3: it compresses whole gradient matrices"));
  }
}

TEST_CASE("make_strategy: data parallel by default, local on one rank", "[cpu][dist]") {
  auto world = dist::world();
  const std::string expected = world->size() == 1 ? "local" : "data_parallel";
  CHECK(dist::make_strategy("", world, Device::cpu())->name() == expected);
  CHECK(dist::make_strategy("dp,bucket_mb=1,exchange=all_reduce", world, Device::cpu())->name() == expected);
  CHECK_THROWS_WITH(dist::make_strategy("dp,foo=1", world, Device::cpu()),
                    Contains("strategy spec 'dp,foo=1': 'foo' not used by the dp strategy"));
  CHECK_THROWS_WITH(dist::make_strategy("bogus=1", world, Device::cpu()),
                    Contains("strategy spec 'bogus=1' names no strategy: expected one of ps, pp, zero, dp, tp, local"));
  CHECK_THROWS_WITH(dist::make_strategy(fmt::format("dp={}", world->size() + 1), world, Device::cpu()),
                    Contains(fmt::format("but the job has {} ranks", world->size())));
  if (world->size() > 1) {
    CHECK_THROWS_WITH(dist::make_strategy("local", world, Device::cpu()), Contains("local trains one process"));
  }
}

TEST_CASE("make_strategy: data parallelism and ZeRO take their groups from the job's mesh", "[cpu][dist]") {
  auto world = dist::world();
  const int n = world->size();
  if (n == 1) {
    SUCCEED("one rank trains locally, without a mesh");
    return;
  }
  auto dp = std::dynamic_pointer_cast<dist::DataParallelStrategy>(dist::make_strategy("dp", world, Device::cpu()));
  REQUIRE(dp != nullptr);
  CHECK(dp->mesh().describe() == fmt::format("dp_replicate={} x dp_shard=1 x pp=1 x tp=1", n));
  CHECK(dp->communicator() == world);  // the dimension spans the world: no copy of it
  const std::string hybrid = n == 4 ? "zero=2,shard=2" : "zero=2";
  auto zero = std::dynamic_pointer_cast<dist::ZeroStrategy>(dist::make_strategy(hybrid, world, Device::cpu()));
  REQUIRE(zero != nullptr);
  const int shard = n == 4 ? 2 : n;
  CHECK(zero->mesh().describe() == fmt::format("dp_replicate={} x dp_shard={} x pp=1 x tp=1", n / shard, shard));
  CHECK(zero->options().shard_ranks == shard);
  CHECK(zero->mesh().group("dp_shard")->rank() == world->rank() % shard);
  CHECK(zero->mesh().coordinate("dp") == world->rank());
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
  CHECK(pipeline->mesh().describe() == fmt::format("dp_replicate={} x dp_shard=1 x pp=2 x tp=1", world->size() / 2));
  CHECK(pipeline->mesh().size("dp") == world->size() / 2);
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
