// A GPT (tied embeddings, dropout off, clipping on) trained for 20 AdamW updates through the
// Trainer on token windows: data parallelism, ZeRO-2 and ZeRO-3 (also one unit per layer) at np 2 (and 4) and a
// 2-stage pipeline, whose first and last stages share the tied weight and sum its gradient,
// end with one process's validation loss on the same global batches within 1e-5 relative
// (f32 sums in other orders). The clipping norm is low enough to act at every update, so a
// tied weight counted twice in the norm would show. Blocks recomputed in backward
// (GptConfig::recompute) under ZeRO-3, a pipeline and tensor parallelism, whose forward hooks
// run again in the recomputation, equal one process too.
#include "dtrain/comm/communicator.h"
#include "dtrain/data/token_windows.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/dist/tensor_parallel/gpt_plan.h"
#include "dtrain/layers/gpt.h"
#include "dtrain/optim/adam.h"
#include "dtrain/train/trainer.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

using namespace dtrain;

namespace {

struct Outcome {
  double first_loss = 0;  // validation loss before training
  double val_loss = 0;
  double grad_norm = 0;
};

data::TokenStream token_stream() {
  // A stream with structure to learn: runs of a repeating pattern with a drift.
  auto v = std::make_shared<std::vector<std::int32_t>>();
  for (int i = 0; i < 3000; ++i) v->push_back((i * 7 + i / 13) % 17);  // ids below both vocabularies
  return v;
}

// 17 ids: uneven vocabulary shards under tensor parallelism (ZeRO with sequence
// parallelism needs even ones: 18).
Outcome train_gpt(const std::string& spec, const dist::CommunicatorPtr& world, std::int64_t updates = 20,
                  std::int64_t vocab = 17, nn::Recompute recompute = nn::Recompute::None) {
  const nn::GptConfig config{
      .vocab_size = vocab, .block_size = 8, .layers = 2, .heads = 4, .embd = 16, .recompute = recompute};
  auto strategy =
      dist::make_strategy(spec, world, Device::cpu(), {.tensor_parallel_plan = dist::gpt_tensor_parallel_plan(config)});
  manual_seed(11);
  strategy->prepare(nn::gpt(config));
  optim::AdamW adamw(
      strategy->module().parameters(),
      {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1, .exclude_1d_from_weight_decay = true});
  const auto tokens = token_stream();
  const std::int64_t split = data::validation_split(static_cast<std::int64_t>(tokens->size()));
  auto train_set = data::TokenWindows::random(tokens, 0, split, 8, updates * 8, 5);
  auto val_set = data::TokenWindows::sequential(tokens, split, static_cast<std::int64_t>(tokens->size()), 8);
  // Under tensor parallelism the model's output is this rank's vocabulary columns.
  const dist::TensorParallel* tp = strategy->tensor_parallel();
  train::TrainerOptions options{
      .epochs = 1, .clip_grad_norm = 0.05, .loss = tp ? dist::LossFn(tp->loss()) : nn::lm_loss, .verbose = false};
  options.eval_metrics = std::vector<train::Metric>{};
  train::Trainer trainer(
      strategy, {.train = train_set, .test = val_set, .batch_size = 8, .eval_batch_size = 8, .seed = 5}, options);
  Outcome out;
  out.first_loss = trainer.evaluate().loss();
  double norm = 0;
  trainer.on_step_end([&](const train::StepEvent& e) { norm = e.stats->grad_norm.value_or(0); });
  const train::FitResult r = trainer.fit(adamw);
  out.val_loss = r.epochs.back().test_loss;
  out.grad_norm = norm;
  return out;
}

}  // namespace

TEST_CASE(
    "GPT: dp, ZeRO-2 and 3, a pipeline with tied weights, tensor parallelism alone and composed equal one process",
    "[dist][mpi][gpt]") {
  auto world = dist::world();
  const int W = world->size();
  if (W != 2 && W != 4) {
    SUCCEED("the GPT's parallel runs need 2 or 4 ranks");
    return;
  }
  const Outcome one = train_gpt("", dist::single_process_communicator());
  INFO("one process: validation loss " << one.first_loss << " -> " << one.val_loss << ", last norm " << one.grad_norm);
  REQUIRE(one.val_loss < 0.9 * one.first_loss);  // it learned: a comparison that can fail
  REQUIRE(one.grad_norm > 0.05);                 // clipping acted at the last update
  // zero=3,gather_mb=0: a gather unit per layer, the head's borrowing the embedding's.
  // Tensor parallelism (the 17-id vocabulary in uneven shards), alone, with sequence
  // parallelism, and composed with data parallelism, ZeRO (sharded over dp_shard only) and a pipeline.
  std::vector<std::string> specs = {"dp", "zero=2", "zero=3", "zero=3,gather_mb=0", "pp=2,micro=2"};
  for (const std::string spec :
       W == 2 ? std::vector<std::string>{"tp=2", "tp=2,sp"}
              : std::vector<std::string>{"tp=4", "tp=4,sp", "dp=2,tp=2", "zero=2,tp=2", "zero=3,tp=2",
                                         "pp=2,tp=2,micro=2", "pp=2,tp=2,sp,micro=2"}) {
    specs.push_back(spec);
  }
  for (const std::string& spec : specs) {
    const Outcome run = train_gpt(spec, world);
    INFO(spec << " at np " << W << ": validation loss " << run.val_loss << ", one process's " << one.val_loss
              << "; last norm " << run.grad_norm << ", one process's " << one.grad_norm);
    CHECK(std::abs(run.val_loss - one.val_loss) <= 1e-5 * one.val_loss);
    CHECK(std::abs(run.grad_norm - one.grad_norm) <= 1e-4 * one.grad_norm);
  }
  // Recomputation: ZeRO-3 gathers a recomputed layer's unit again (one per layer, and the
  // default units), a pipeline's stages and tensor parallelism's collectives run again.
  using nn::Recompute;
  for (const auto& [spec, recompute] :
       std::vector<std::pair<std::string, Recompute>>{{"zero=3,gather_mb=0", Recompute::Full},
                                                      {"zero=3", Recompute::Attention},
                                                      {"pp=2,micro=2", Recompute::Full},
                                                      {W == 2 ? "tp=2,sp" : "zero=3,tp=2", Recompute::Full}}) {
    const Outcome run = train_gpt(spec, world, 20, 17, recompute);
    INFO(spec << ", recompute " << nn::recompute_name(recompute) << " at np " << W << ": validation loss "
              << run.val_loss << ", one process's " << one.val_loss << "; last norm " << run.grad_norm
              << ", one process's " << one.grad_norm);
    CHECK(std::abs(run.val_loss - one.val_loss) <= 1e-5 * one.val_loss);
    CHECK(std::abs(run.grad_norm - one.grad_norm) <= 1e-4 * one.grad_norm);
  }
  if (W == 4) {
    // ZeRO with sequence parallelism sums the norms' gradient slices over the tensor-parallel
    // ranks: with an even vocabulary it equals one process; with an uneven one it is refused.
    const Outcome one_even = train_gpt("", dist::single_process_communicator(), 20, 18);
    for (const std::string spec : {"zero=2,tp=2,sp", "zero=3,tp=2,sp"}) {
      const Outcome run = train_gpt(spec, world, 20, 18);
      INFO(spec << " (vocabulary 18): validation loss " << run.val_loss << ", one process's " << one_even.val_loss
                << "; last norm " << run.grad_norm << ", one process's " << one_even.grad_norm);
      CHECK(std::abs(run.val_loss - one_even.val_loss) <= 1e-5 * one_even.val_loss);
      CHECK(std::abs(run.grad_norm - one_even.grad_norm) <= 1e-4 * one_even.grad_norm);
    }
    REQUIRE_THROWS_WITH(train_gpt("zero=2,tp=2,sp", world),
                        Catch::Contains("zero=2 with tp=2,sp: sequence parallelism sums gradient slices over the "
                                        "tensor-parallel ranks, which needs the same parameter shapes"));
  }
  // Under a pipeline, ZeRO would slice the tied weight differently on its two stages.
  REQUIRE_THROWS_WITH(
      train_gpt("pp=2,micro=2,zero=1", world),
      Catch::Contains("layers 0 and 3 on stages 0 and 1 share a parameter (tied weights); with zero=1"));
}

// The 3-D layout at 8 ranks (ctest dist.np8_gpt_3d), 5 updates: pipeline stages of
// tensor-parallel groups, two replicas of each, with and without sequence parallelism.
TEST_CASE("GPT: pp=2,dp=2,tp=2 at np 8 equals one process", "[.np8]") {
  auto world = dist::world();
  REQUIRE(world->size() == 8);
  const Outcome one = train_gpt("", dist::single_process_communicator(), 5);
  for (const std::string spec : {"pp=2,dp=2,tp=2,micro=2", "pp=2,dp=2,tp=2,sp,micro=2"}) {
    const Outcome run = train_gpt(spec, world, 5);
    INFO(spec << ": validation loss " << run.val_loss << ", one process's " << one.val_loss << "; last norm "
              << run.grad_norm << ", one process's " << one.grad_norm);
    CHECK(std::abs(run.val_loss - one.val_loss) <= 1e-5 * one.val_loss);
    CHECK(std::abs(run.grad_norm - one.grad_norm) <= 1e-4 * one.grad_norm);
  }
}
