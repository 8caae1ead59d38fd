// A pipeline whose stages shard their optimizer (ZeRO-1), or their gradients too (ZeRO-2),
// over the stage's data-parallel replicas (PipelineOptions::zero, the spec's
// `pp=K,dp=D,zero=1|2`) at any world size W (1 as a plain process, 2 and 4 under mpirun):
// K x D = 1 x 1 at W = 1, 1 x 2 and 2 x 1 at W = 2, 2 x 2 and 1 x 4 at W = 4 (one replica
// shards nothing, and still runs). After 5 updates of Adam, SGD with momentum and LAMB (whose trust ratios sum the
// slices' squared norms over the replicas), with clipping by the global norm and with
// gradient accumulation, under buckets of 64 bytes (parameters straddle the replicas'
// chunks), every stage's parameters equal the same pipeline's with an unsharded optimizer
// within 1e-5 relative (the gradients are reduce-scattered instead of all-reduced, and the
// norm is summed by slices: f32 sums in another order); the replicas stay equal and each
// holds optimizer state for 1/D of its stage. A checkpoint resumes bit for bit and loads
// into the unsharded pipeline (ZeRO-3 under a pipeline: test_composition.cpp). On
// GPUs over NCCL ([nccl]) it equals the unsharded pipeline on the CPU.
// Checks come after the last collective of each case, so that a failure on one rank cannot
// leave the others waiting.
#include "dtrain/comm/nccl.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/adam.h"
#include "dtrain/optim/lamb.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/trainer.h"
#include "sharded_test_helpers.h"
#include "nccl_ranks.h"
#include "support/test_support.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

using namespace dtrain;
using Catch::Matchers::Contains;
using test::relative_diff;
using test::snapshot;
namespace fs = std::filesystem;

namespace {

constexpr double kRelative = 1e-5;

std::shared_ptr<nn::Sequential> fresh_model() {
  manual_seed(7);
  return nn::mlp(5, {7, 6}, 3);  // 3 layers with parameters: 42 + 48 + 21 elements
}

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, const nn::Module& m) {
  if (kind == "adam") return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 0.01});
  if (kind == "lamb") return std::make_unique<optim::LAMB>(m.parameters(), optim::LambOptions{.lr = 0.01});
  return std::make_unique<optim::SGD>(m.parameters(), optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
}

struct Setting {
  std::string optimizer;
  int accumulate = 1;
  double clip = 0;
};

struct Trained {
  std::vector<Tensor> params;  // the stage's
  double divergence = 0;
  std::int64_t shard_elements = 0;
  std::int64_t stage_elements = 0;
};

// The replicas' largest difference (0 with one replica: nothing to compare).
double replica_divergence(dist::Strategy& strategy) {
  const dist::Capabilities caps = strategy.capabilities();
  return caps.replica_divergence ? caps.replica_divergence() : 0;
}

Trained train_steps(const dist::CommunicatorPtr& world, int stages, int zero, const Setting& s,
                    Device device = Device::cpu()) {
  dist::PipelineOptions o{.stages = stages, .micro_batches = 2};
  o.data_parallel.data_parallel.bucket_bytes = 64;  // 16 f32: parameters straddle the chunks
  o.zero = zero;
  auto strategy = std::make_shared<dist::PipelineStrategy>(world, device, o);
  auto stage = strategy->prepare(fresh_model());
  auto optimizer = make_optimizer(s.optimizer, *stage);
  const dist::StepConfig config{.loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); },
                                .clip_grad_norm = s.clip};
  for (int step = 0; step < 5; ++step) {
    strategy->train_step(
        test::three_class_batches(step, s.accumulate, strategy->replica(), strategy->replicas(), 8, device), *optimizer,
        config);
  }
  std::vector<Tensor> params;
  for (const Tensor& t : snapshot(*stage)) params.push_back(t.to(Device::cpu()));
  Trained t{.params = std::move(params),
            .divergence = replica_divergence(*strategy),
            .shard_elements = strategy->shard_elements(),
            .stage_elements = stage->num_parameters()};
  return t;
}

}  // namespace

TEST_CASE("A pipeline whose replicas shard each stage's optimizer equals the unsharded pipeline after 5 updates",
          "[dist][mpi][pipeline]") {
  auto world = dist::world();
  const int W = world->size();
  std::vector<int> stage_counts{1};
  if (W >= 2) stage_counts.push_back(2);
  const std::vector<Setting> settings{{"adam", 1, 0}, {"sgd", 1, 0}, {"adam", 2, 0.05}, {"lamb", 1, 0.05}};
  for (int stages : stage_counts) {
    for (const Setting& s : settings) {
      for (int stage : {1, 2}) {
        const Trained plain = train_steps(world, stages, 0, s);
        const Trained zero = train_steps(world, stages, stage, s);
        // Each stage's replicas hold its elements once between them.
        const int replicas = W / stages;
        Tensor held = Tensor::full({1}, static_cast<double>(zero.shard_elements), {DType::f64});
        world->all_reduce(held, ReduceOp::Sum);  // the last collective: every rank's slices, all stages
        INFO(stages << " stage(s) x " << replicas << " replicas, zero=" << stage << ", " << s.optimizer
                    << ", accumulate " << s.accumulate << ", clip " << s.clip);
        CHECK(relative_diff(zero.params, plain.params) <= kRelative);
        CHECK(zero.divergence == 0);
        CHECK(plain.shard_elements == 0);
        CHECK(zero.shard_elements > 0);
        CHECK(zero.shard_elements <=
              (zero.stage_elements + replicas - 1) / replicas + 16);  // 1/D, and a bucket's padding
        CHECK(held.item() == 42 + 48 + 21);
      }
    }
  }
}

TEST_CASE("A sharded pipeline optimizer's checkpoint resumes bit for bit, and into an unsharded one",
          "[dist][mpi][pipeline][checkpoint]") {
  auto world = dist::world();
  const int W = world->size();
  if (W == 1) return;  // one replica: no shards to resume into other layouts
  const std::string layout = W == 4 ? "pp=2,dp=2" : "pp=1,dp=2";
  const fs::path dir = test::shared_temp_dir(*world, "dtrain_pp_zero_ckpt");
  const auto run = [&](const std::string& spec, train::CheckpointOptions checkpoint) {
    auto strategy = dist::make_strategy(spec, world, Device::cpu());
    strategy->prepare(fresh_model());
    optim::Adam adam(strategy->module().parameters(), {.lr = 0.01});
    train::Trainer trainer(strategy, {.train = test::three_class_data(), .test = nullptr, .batch_size = 16, .seed = 4},
                           {.epochs = 2, .verbose = false, .checkpoint = checkpoint});
    trainer.fit(adam);
    return snapshot(strategy->module());
  };
  const std::string sharded = layout + ",micro=2,zero=1,bucket_mb=0.0001";  // ~100-byte buckets
  const std::vector<Tensor> whole = run(sharded, {.dir = dir, .async = false});
  // From the checkpoint at the end of epoch 1 (the first of the two), epoch 2 again.
  const fs::path first = test::first_checkpoint(dir);
  world->barrier();
  REQUIRE(!first.empty());
  const std::vector<Tensor> resumed = run(sharded, {.resume = first.string()});
  const std::vector<Tensor> unsharded = run(layout + ",micro=2", {.resume = first.string()});
  world->barrier();
  INFO(layout);
  CHECK(relative_diff(resumed, whole) == 0);
  CHECK(relative_diff(unsharded, whole) <= kRelative);
  if (world->rank() == 0) fs::remove_all(dir);
}

// The same on GPUs, one per rank, the chunks travelling over NCCL: the sharded pipeline
// against the unsharded one on the CPU (the tolerance is looser: cuBLAS sums in another
// order). Needs two replicas and a CUDA device per rank of the host; skips with the reason
// otherwise (ctest's dist.np2_nccl and scripts/gpu-check.sh --multi-gpu run it).
TEST_CASE("A sharded pipeline optimizer on CUDA over NCCL equals the unsharded pipeline on the CPU",
          "[cuda][dist][nccl][pipeline]") {
  auto world = dist::world();
  if (!test::nccl_ranks_ready(world)) return;
  const Setting s{"adam", 2, 0.05};
  const int stages = world->size() == 4 ? 2 : 1;
  const Trained plain = train_steps(world, stages, 0, s);
  const Trained zero = train_steps(world, stages, 1, s, dist::rank_cuda_device());
  INFO(stages << " stage(s), " << world->size() << " ranks");
  CHECK(relative_diff(zero.params, plain.params) <= 1e-4);
  CHECK(zero.shard_elements > 0);
}
