// The gradient exchange is pluggable: a kind defined here, in the test alone (the mean taken
// in float64), is one class plus one registration line, and DataParallel runs it through
// the same reducer as the default. At any world size (1, 2, 4 ranks): it sees every bucket,
// and its parameters after 3 SGD steps equal the default all-reduce's to 1e-6 (the f32
// mean against the f64 mean rounded to f32).
#include "dtrain/dist/data_parallel/data_parallel.h"
#include "dtrain/dist/data_parallel/gradient_exchange.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/sgd.h"
#include "support/test_support.h"

#include <atomic>

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

std::atomic<int> g_planned_buckets{0}, g_started{0};
std::atomic<std::int64_t> g_planned_elements{0};

// Sums the bucket in float64 and divides there; the f32 bucket gets the rounded mean.
class F64Mean final : public dist::GradientExchange {
 public:
  explicit F64Mean(dist::CommunicatorPtr replicas) : replicas_(std::move(replicas)) {}
  std::string name() const override { return "f64_mean"; }
  void plan(const std::vector<dist::BucketLayout>& buckets) override {
    g_planned_buckets = static_cast<int>(buckets.size());
    for (const auto& b : buckets) g_planned_elements += b.numel;
  }
  dist::WorkPtr start(std::size_t, Tensor& buffer) override {
    ++g_started;
    Tensor wide = buffer.to(DType::f64);
    replicas_->all_reduce(wide, dist::ReduceOp::Sum);
    buffer.copy_(div(wide, static_cast<double>(replicas_->size())));
    return std::make_shared<Done>();
  }

 private:
  struct Done final : dist::Work {
    void wait() override {}
  };
  dist::CommunicatorPtr replicas_;
};

const bool registered = [] {
  dist::register_gradient_exchange("f64_mean",
                                   [](const dist::CommunicatorPtr& c) { return std::make_unique<F64Mean>(c); });
  return true;
}();

// 3 SGD steps of an MLP under DataParallel; rank r's inputs differ from the others'.
std::vector<Tensor> train(const dist::DataParallelOptions& options) {
  auto world = dist::world();
  manual_seed(5);
  auto model = nn::mlp(6, {8, 5}, 3);
  dist::DataParallel ddp(model, world, options);
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor x = test::random_tensor({4, 6}, 100 + static_cast<std::uint64_t>(world->rank()));
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 1, 2, 1}, {4});
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    cross_entropy(ddp.forward(Variable(x)), y).backward();
    ddp.finish_gradient_sync();
    sgd.step();
  }
  std::vector<Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p.data().clone());
  return params;
}

}  // namespace

TEST_CASE("gradient exchange: a kind registered by the test trains as the default does", "[cpu][dist]") {
  REQUIRE(registered);
  const std::vector<Tensor> reference = train({.bucket_bytes = 64});
  g_planned_buckets = 0;
  g_started = 0;
  g_planned_elements = 0;
  const std::vector<Tensor> f64 = train({.bucket_bytes = 64, .gradient_exchange = "f64_mean"});
  std::int64_t elements = 0;
  for (const Tensor& p : reference) elements += p.numel();
  CHECK(g_planned_elements == elements);  // every trainable element, in some bucket
  CHECK(g_planned_buckets > 1);           // 64-byte buckets: several
  CHECK(g_started == 3 * g_planned_buckets);
  REQUIRE(f64.size() == reference.size());
  for (std::size_t i = 0; i < f64.size(); ++i) {
    INFO("parameter " << i);
    CHECK(max_abs_diff(f64[i], reference[i]) <= 1e-6);
  }
}

TEST_CASE("gradient exchange: an unknown kind is refused with the known ones", "[cpu][dist]") {
  auto world = dist::world();
  CHECK_THROWS_WITH(dist::make_gradient_exchange("nope", world),
                    Contains("gradient exchange 'nope': no such kind") && Contains("all_reduce"));
  const auto names = dist::gradient_exchange_names();
  CHECK(std::find(names.begin(), names.end(), "all_reduce") != names.end());
  manual_seed(5);
  CHECK_THROWS_WITH(dist::DataParallel(nn::mlp(2, {2}, 2), world, {.gradient_exchange = "nope"}),
                    Contains("gradient exchange 'nope'"));
}
