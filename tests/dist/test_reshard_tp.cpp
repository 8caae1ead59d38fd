// Tensor-parallel checkpoints across layouts: a GPT (the 17-id vocabulary in uneven shards,
// tied embeddings, Adam) trains one epoch of 10 updates under a tensor-parallel layout and
// saves; the checkpoint (each rank's slices named by their place in the whole tensors)
// resumes on three other layouts for a second epoch, each ending with the validation loss
// of one process trained both epochs without a stop, within 1e-5 relative. At np 2: saved
// at tp=2, resumed in one process, under dp=2 and under tp=2,sp. At np 4: saved at
// dp=2,tp=2 and at pp=2,tp=2, resumed in one process, at tp=4 and under the other of the two.
#include "dtrain/comm/communicator.h"
#include "dtrain/data/token_windows.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/dist/tensor_parallel/gpt_plan.h"
#include "dtrain/layers/gpt.h"
#include "dtrain/optim/adam.h"
#include "dtrain/train/trainer.h"
#include "sharded_test_helpers.h"
#include "support/test_support.h"

#include <cmath>
#include <filesystem>

using namespace dtrain;
namespace fs = std::filesystem;

namespace {

const nn::GptConfig kConfig{.vocab_size = 17, .block_size = 8, .layers = 2, .heads = 4, .embd = 16};

// The validation loss after `epochs` epochs under `spec` over `world`, saving at each
// epoch's end into `dir` when given, resuming from `resume` when given (then training the
// second epoch alone).
double train_run(const std::string& spec, const dist::CommunicatorPtr& world, const fs::path& dir,
                 const fs::path& resume, int epochs) {
  auto strategy = dist::make_strategy(spec, world, Device::cpu(),
                                      {.tensor_parallel_plan = dist::gpt_tensor_parallel_plan(kConfig)});
  manual_seed(11);
  strategy->prepare(nn::gpt(kConfig));
  optim::Adam adam(strategy->module().parameters(), {.lr = 3e-3});
  auto tokens = std::make_shared<std::vector<std::int32_t>>();
  for (int i = 0; i < 2000; ++i) tokens->push_back((i * 7 + i / 13) % 17);
  const std::int64_t split = data::validation_split(static_cast<std::int64_t>(tokens->size()));
  auto train_set = data::TokenWindows::random(tokens, 0, split, 8, 10 * 8, 5);
  auto val_set = data::TokenWindows::sequential(tokens, split, static_cast<std::int64_t>(tokens->size()), 8);
  const dist::TensorParallel* tp = strategy->tensor_parallel();
  train::TrainerOptions options{
      .epochs = epochs, .loss = tp ? dist::LossFn(tp->loss()) : nn::lm_loss, .verbose = false};
  options.eval_metrics = std::vector<train::Metric>{};
  options.checkpoint = {.dir = dir, .async = false, .resume = resume.string()};
  train::Trainer trainer(
      strategy, {.train = train_set, .test = val_set, .batch_size = 8, .eval_batch_size = 8, .seed = 5}, options);
  const train::FitResult r = trainer.fit(adam);
  REQUIRE(r.epochs.size() == (resume.empty() ? static_cast<std::size_t>(epochs) : 1u));
  return r.epochs.back().test_loss;
}

}  // namespace

TEST_CASE("A tensor-parallel checkpoint resumes on three other layouts with the uninterrupted run's loss",
          "[dist][mpi][checkpoint][tp]") {
  auto world = dist::world();
  const int W = world->size(), r = world->rank();
  if (W != 2 && W != 4) {
    SUCCEED("tensor-parallel resharding runs at 2 or 4 ranks");
    return;
  }
  const double whole = train_run("", dist::single_process_communicator(), {}, {}, 2);
  struct Case {
    std::string saved, second, third;
  };
  const std::vector<Case> cases = W == 2 ? std::vector<Case>{{"tp=2", "dp", "tp=2,sp"}}
                                         : std::vector<Case>{{"dp=2,tp=2", "tp=4", "pp=2,tp=2,micro=2"},
                                                             {"pp=2,tp=2,micro=2", "tp=4", "dp=2,tp=2"}};
  for (const Case& c : cases) {
    const fs::path dir = test::shared_temp_dir(*world, "dtrain_reshard_tp");
    REQUIRE(std::isfinite(train_run(c.saved, world, dir, {}, 1)));
    const fs::path saved = test::first_checkpoint(dir);
    REQUIRE(!saved.empty());
    const double one_process = train_run("", world->split(r, 0), {}, saved, 2);
    const double on_second = train_run(c.second, world, {}, saved, 2);
    const double on_third = train_run(c.third, world, {}, saved, 2);
    INFO("saved at " << c.saved << " (np " << W << "); uninterrupted one process " << whole
                     << "; resumed in one process " << one_process << ", " << c.second << " " << on_second << ", "
                     << c.third << " " << on_third);
    CHECK(std::abs(one_process - whole) <= 1e-5 * whole);
    CHECK(std::abs(on_second - whole) <= 1e-5 * whole);
    CHECK(std::abs(on_third - whole) <= 1e-5 * whole);
    world->barrier();
    if (r == 0) fs::remove_all(dir);
  }
}
