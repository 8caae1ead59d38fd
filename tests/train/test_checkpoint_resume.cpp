// Checkpoints through the Trainer (Local strategy): an interrupted run resumed from its
// last checkpoint repeats the uninterrupted run's losses and parameters bit for bit
// (dropout's random numbers, batch-norm statistics, momentum, the schedule and the data
// order all continue); a finished run resumed reports the restored model and extends to
// more epochs; a failed save leaves the previous checkpoint whole; and checkpoints of
// another model are refused by name.
#include "dtrain/checkpoint/store.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/layers/layers.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/trainer.h"
#include "support/test_support.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <bit>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>

using namespace dtrain;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<data::TensorDataset> blobs(std::int64_t n) {
  Generator gen(3);
  Tensor x = Tensor::empty({n, 4});
  normal_(x, 0, 1, &gen);
  Tensor labels = Tensor::empty({n}, {DType::i64});
  bernoulli_(labels, 0.5, &gen);
  Tensor xs = x.select(1, 0);
  xs.copy_(add(xs, mul(labels.to(DType::f32), 2.0)));
  return std::make_shared<data::TensorDataset>(x, labels);
}

// Dropout draws from the default generator and batch norm keeps running statistics: both
// must be restored for the resumed steps to match.
std::shared_ptr<dist::Strategy> model(std::uint64_t init_seed, std::int64_t hidden = 16) {
  manual_seed(init_seed);
  auto strategy = std::make_shared<dist::LocalStrategy>();
  strategy->prepare(std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(4, hidden), std::make_shared<nn::BatchNorm1d>(hidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Linear>(hidden, 2)}));
  return strategy;
}

struct Run {
  std::map<std::int64_t, std::uint32_t> loss_bits;  // global step -> the loss's f32 bits
  std::vector<Tensor> params;
  train::FitResult result;
  std::string output;
};

// Trains `epochs` with checkpoints as given; `stop_at` > 0 throws after that global step,
// as a crash would interrupt the run.
Run train_run(std::uint64_t init_seed, int epochs, train::CheckpointOptions checkpoint, std::int64_t stop_at = 0) {
  auto strategy = model(init_seed);
  optim::SGD sgd(strategy->module().parameters(), {.lr = 0.1, .momentum = 0.9});
  std::FILE* out = std::tmpfile();
  train::Trainer trainer(strategy, {.train = blobs(200), .test = blobs(64), .batch_size = 16, .seed = 11},
                         {.epochs = epochs, .verbose = true, .out = out, .checkpoint = checkpoint});
  const optim::CosineLr schedule(0.1, trainer.updates_per_epoch() * epochs);
  Run run;
  trainer.on_step_end([&](const train::StepEvent& e) {
    run.loss_bits[e.global_step] = std::bit_cast<std::uint32_t>(static_cast<float>(e.stats->loss.item()));
    if (e.global_step == stop_at) throw std::runtime_error("interrupted");
  });
  const auto read_output = [&] {
    std::rewind(out);
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, out)) > 0) run.output.append(buf, n);
    std::fclose(out);
  };
  try {
    run.result = trainer.fit(sgd, &schedule);
  } catch (const std::runtime_error& e) {
    read_output();
    if (std::string(e.what()) != "interrupted") throw;
    return run;
  }
  read_output();
  for (const Variable& p : strategy->module().parameters()) run.params.push_back(p.data().clone());
  return run;
}

}  // namespace

TEST_CASE("A run resumed from its checkpoint repeats the uninterrupted run bit for bit", "[train][checkpoint][cpu]") {
  test::TempDir dir;
  const Run whole = train_run(5, 3, {});
  REQUIRE(whole.loss_bits.size() == 39);  // 13 updates per epoch

  // Interrupted in epoch 2 at step 23, two steps after the checkpoint of step 21.
  const Run first = train_run(5, 3, {.dir = dir / "ckpt", .every = 7}, /*stop_at=*/23);
  REQUIRE(first.loss_bits.size() == 23);
  const checkpoint::CheckpointStore store(dir / "ckpt");
  REQUIRE(store.latest() == store.final_path(21));

  // Resumed with a differently initialised model: everything comes from the checkpoint.
  const Run rest = train_run(99, 3, {.dir = dir / "ckpt", .every = 7, .resume = "auto"});
  REQUIRE(rest.output.find("resuming from") != std::string::npos);
  REQUIRE(rest.output.find("epoch 2, update 8 of 13 (global step 21)") != std::string::npos);
  REQUIRE(rest.loss_bits.begin()->first == 22);
  for (const auto& [step, bits] : rest.loss_bits) {
    INFO("global step " << step);
    REQUIRE(bits == whole.loss_bits.at(step));
  }
  REQUIRE(rest.params.size() == whole.params.size());
  for (std::size_t i = 0; i < whole.params.size(); ++i) REQUIRE(max_abs_diff(rest.params[i], whole.params[i]) == 0);
  // The resumed epoch's line counts the updates before the interruption too.
  REQUIRE(rest.result.epochs.size() == 2);
  REQUIRE(rest.result.epochs[0].train_loss == whole.result.epochs[1].train_loss);
  REQUIRE(rest.result.epochs[0].updates == 13);
  REQUIRE(rest.result.test_accuracy == whole.result.test_accuracy);
  // Checkpoints every 7 steps and at each epoch's end (13, 26, 39).
  std::vector<fs::path> expected;
  for (std::int64_t s : {7, 13, 14, 21, 26, 28, 35, 39}) expected.push_back(store.final_path(s));
  REQUIRE(store.list() == expected);
}

TEST_CASE("A finished run resumed with more epochs trains the new ones and says so", "[train][checkpoint][cpu]") {
  test::TempDir dir;
  const Run two = train_run(5, 2, {.dir = dir / "ckpt", .keep = 1});
  REQUIRE(checkpoint::CheckpointStore(dir / "ckpt").list().size() == 1);
  const Run same = train_run(5, 2, {.dir = dir / "ckpt", .keep = 1, .resume = "auto"});
  REQUIRE(same.result.epochs.empty());
  REQUIRE(same.output.find("nothing left to train") != std::string::npos);
  // Its result is the restored model's evaluation: the finished run's, not a made-up 0%.
  REQUIRE(two.result.test_accuracy > 0.5);
  REQUIRE(same.result.test_accuracy == two.result.test_accuracy);
  REQUIRE(same.output.find(fmt::format("final test accuracy: {:.2f}% (the restored model",
                                       100 * two.result.test_accuracy)) != std::string::npos);
  const Run three = train_run(5, 3, {.dir = dir / "ckpt", .keep = 1, .resume = "auto"});
  REQUIRE(three.output.find("planned for 2 epoch(s), this one for 3") != std::string::npos);
  REQUIRE(three.result.epochs.size() == 1);
  REQUIRE(three.result.epochs[0].epoch == 3);
  REQUIRE(three.loss_bits.begin()->first == 27);
  // --resume auto on an empty directory starts afresh.
  const Run fresh = train_run(5, 1, {.dir = dir / "empty", .resume = "auto"});
  REQUIRE(fresh.output.find("starting afresh") != std::string::npos);
  REQUIRE(fresh.result.epochs.size() == 1);
}

TEST_CASE("A save that fails (a full disk) stops training and leaves the previous checkpoint whole",
          "[train][checkpoint][cpu]") {
  test::TempDir dir;
  struct rlimit old_limit {};
  getrlimit(RLIMIT_FSIZE, &old_limit);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  auto strategy = model(5);
  optim::SGD sgd(strategy->module().parameters(), {.lr = 0.1, .momentum = 0.9});
  train::Trainer trainer(strategy, {.train = blobs(200), .batch_size = 16, .seed = 11},
                         {.epochs = 3, .verbose = false, .checkpoint = {.dir = dir / "ckpt", .async = false}});
  // In epoch 2 the disk "fills up": no file may grow past 64 bytes. (The limit is the
  // process's: the saves are synchronous, so that epoch 1's is done before it is set.)
  trainer.on_step_end([&](const train::StepEvent& e) {
    if (e.epoch != 2 || e.step != 1) return;
    struct rlimit limit = old_limit;
    limit.rlim_cur = 64;
    setrlimit(RLIMIT_FSIZE, &limit);
  });
  REQUIRE_THROWS_WITH(trainer.fit(sgd), Catch::Contains("checkpoint step-000000026 failed on rank 0") &&
                                            Catch::Contains("over the file-size limit"));
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  const checkpoint::CheckpointStore store(dir / "ckpt");
  REQUIRE(store.latest() == store.final_path(13));
  const Run resumed = train_run(5, 3, {.dir = dir / "ckpt", .resume = "auto"});
  REQUIRE(resumed.result.epochs.size() == 2);
}

TEST_CASE("Resuming refuses another model, a changed batch size and a corrupt file by name",
          "[train][checkpoint][cpu]") {
  test::TempDir dir;
  train_run(5, 1, {.dir = dir / "ckpt"});
  const fs::path saved = dir / "ckpt" / "step-000000013";
  const auto resume_into = [&](std::shared_ptr<dist::Strategy> strategy, std::int64_t batch = 16) {
    optim::SGD sgd(strategy->module().parameters(), {.lr = 0.1, .momentum = 0.9});
    train::Trainer trainer(strategy, {.train = blobs(200), .batch_size = batch, .seed = 11},
                           {.epochs = 2, .verbose = false, .checkpoint = {.resume = saved.string()}});
    trainer.fit(sgd);
  };
  REQUIRE_THROWS_WITH(resume_into(model(1, 8)),
                      Catch::Contains("tensor '0.weight' has shape [16, 4] in model.safetensors, "
                                      "this model's is [8, 4]"));
  // One layer more: its tensor is named as missing.
  auto longer = model(1);
  auto& layers = dynamic_cast<nn::Sequential&>(longer->module());
  layers.push_back(std::make_shared<nn::Linear>(2, 2));
  REQUIRE_THROWS_WITH(resume_into(longer), Catch::Contains("tensor '5.weight' of this model is missing from "
                                                           "model.safetensors"));
  // No name in common: another model altogether.
  auto nested = std::make_shared<dist::LocalStrategy>();
  nested->prepare(std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{nn::mlp(4, {16}, 2)}));
  REQUIRE_THROWS_WITH(resume_into(nested), Catch::Contains("holds a different model: none of this model's 4 tensors"));
  REQUIRE_THROWS_WITH(resume_into(model(1), 32), Catch::Contains("saved with a batch size of 16, this run has 32"));
  // One flipped byte in the optimizer file.
  std::fstream f(saved / "optimizer.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(-3, std::ios::end);
  f.put('\x7f');
  f.close();
  REQUIRE_THROWS_WITH(resume_into(model(1)),
                      Catch::Contains("optimizer.safetensors has checksum") && Catch::Contains("corrupt"));
}
