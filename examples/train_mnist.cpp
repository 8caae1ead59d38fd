// train_mnist: trains an MLP or the LeNet-style CNN on MNIST-format data (Fashion-MNIST
// from Debian's dataset-fashion-mnist package by default) and reports test accuracy.
// Launched by mpirun it trains data-parallel: the global batch is split across ranks,
// each rank reads its own shard, gradients are averaged, evaluation is sharded. --parallel
// takes any strategy's spec (dist::make_strategy): pp=K,micro=M cuts the model into K
// stages on consecutive ranks fed M micro-batches per batch, the ranks forming a dp x pp
// grid; ps=S,mode=sync|async|ssp:K makes the last S ranks parameter servers (or the roles
// come from a TF_CONFIG-style --cluster file / DTRAIN_CLUSTER). The older flags
// (--pipeline-stages, --strategy ps, --num-ps, --ps-mode, ...) remain as aliases.
//
//   build/examples/train_mnist --model cnn --epochs 3
//   mpirun -np 2 build/examples/train_mnist --model cnn --epochs 3
//   mpirun -np 8 build/examples/train_mnist --device cuda --precision bf16   # a GPU per rank, NCCL
//   # 2 stages x 2 data-parallel replicas:
//   mpirun -np 4 build/examples/train_mnist --model mlp --hidden 512,512,512,512 --parallel pp=2,micro=8
//   # 2 workers and 1 parameter server, asynchronous updates:
//   mpirun -np 3 build/examples/train_mnist --parallel ps=1,mode=async
//
// --precision bf16|f16 runs forward under autocast (16-bit products, f32 everything else;
// f16 with dynamic loss scaling); on the CPU the 16-bit products are emulated exactly.
//
// Errors (bad flags, missing or corrupt data) print one line and exit non-zero; under
// mpirun a failing rank ends the whole job with its message.
#include "common/example_support.h"
#include "common/parallel_flags.h"
#include "dtrain/core/log.h"
#include "dtrain/core/parallel.h"
#include "dtrain/data/mnist.h"
#include "dtrain/data/subset.h"
#include "dtrain/comm/nccl.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/layers/models.h"
#include "dtrain/train/trainer.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <thread>

namespace {

using namespace dtrain;

const char* const kDebianFashionMnist = "/usr/share/datasets/fashion-mnist";

struct Config {
  std::string data = kDebianFashionMnist;
  std::string model = "cnn";
  std::vector<std::int64_t> hidden = {512, 512};  // the MLP's hidden widths
  examples::RunFlags run{.epochs = 3, .batch_size = 64, .timeout_s = 300};
  examples::OptimizerFlags opt{.warmup_epochs = 0.2};
  examples::ParallelFlags parallel;
  std::int64_t limit_train = 0;  // 0: all
  std::int64_t limit_test = 0;
  bool check_replicas = false;
  int straggler_delay_ms = 0;
  int straggler_rank = 1;
};

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--data", c.data, "directory with the MNIST IDX files (plain or .gz)")->capture_default_str();
  app.add_option("--model", c.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--hidden", c.hidden, "the MLP's hidden layer widths, comma-separated (e.g. 512,512,512,512)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  examples::add_run_flags(app, c.run, "initialization and shuffling");
  examples::add_optimizer_flags(app, c.opt, {"sgd", "adam", "adamw"}, "default: 0.05 for sgd, 0.001 for adam and adamw",
                                "default: 5e-4", true);
  examples::add_parallel_flags(app, c.parallel);
  app.add_option("--limit-train", c.limit_train, "train on the first N examples only")->check(CLI::PositiveNumber);
  app.add_option("--limit-test", c.limit_test, "evaluate on the first N test examples only")
      ->check(CLI::PositiveNumber);
  app.add_flag("--check-replicas", c.check_replicas,
               "after each epoch, report the largest parameter difference across ranks");
  app.add_option("--straggler-delay-ms", c.straggler_delay_ms,
                 "slow down one rank on purpose: it sleeps this long after each update (demonstrations, benchmarks)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--straggler-rank", c.straggler_rank, "the rank that --straggler-delay-ms slows")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

std::shared_ptr<const data::Dataset> maybe_limit(std::shared_ptr<const data::Dataset> d, std::int64_t limit) {
  return limit > 0 ? data::Subset::first(std::move(d), limit) : std::move(d);
}

int run(const Config& c, const dist::CommunicatorPtr& comm) {
  const examples::RunFlags& r = c.run;
  logging::init(comm->rank(), comm->size());
  if (r.threads > 0) set_num_threads(r.threads);
  manual_seed(r.seed);  // same initial model everywhere; DataParallel also broadcasts rank 0's
  const double lr = examples::peak_lr(c.opt, r.batch_size, c.opt.optimizer == "sgd" ? 0.05 : 1e-3);
  DTRAIN_CHECK(std::filesystem::is_directory(c.data),
               "--data '{}': not a directory (expected the MNIST IDX files; Debian's dataset-fashion-mnist "
               "package installs them in {})",
               c.data, kDebianFashionMnist);
  auto train_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Train), c.limit_train);
  auto test_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Test), c.limit_test);

  const Device device = examples::run_device(r);
  // --parallel and its aliases (examples/common/parallel_flags.h); a pipeline balanced by
  // time is timed on one micro-batch of 28x28 images.
  auto strategy =
      examples::make_strategy(c.parallel, comm, device,
                              {.example_shape = {1, 28, 28},
                               .batch_size = r.batch_size,
                               .accumulate = r.accumulate,
                               .timeout = std::chrono::milliseconds(static_cast<std::int64_t>(r.timeout_s * 1000))});
  std::shared_ptr<nn::Module> whole = c.model == "mlp" ? nn::mlp(28 * 28, c.hidden, 10) : nn::lenet_cnn(1, 10);
  const std::int64_t parameters = whole->num_parameters();
  auto model = strategy->prepare(std::move(whole));  // a pipeline keeps this rank's stage
  std::string momentum_note;
  const double momentum = examples::resolved_momentum(c.opt, *strategy, momentum_note);
  auto optimizer = examples::make_optimizer(
      {.name = c.opt.optimizer, .lr = lr, .momentum = momentum, .weight_decay = c.opt.weight_decay.value_or(5e-4)},
      model->parameters());
  train::TrainerOptions options = examples::trainer_options(r);
  options.check_replicas = c.check_replicas;
  train::Trainer trainer(strategy, {.train = train_set, .test = test_set, .batch_size = r.batch_size, .seed = r.seed},
                         options);
  auto schedule = examples::make_schedule(
      {.name = c.opt.schedule, .lr = lr, .warmup_epochs = c.opt.warmup_epochs, .epochs = r.epochs},
      trainer.updates_per_epoch());
  if (strategy->reports()) {
    fmt::print(
        "train_mnist: {} ({} parameters), {} train / {} test examples from {}, {} rank(s) x {} thread(s), "
        "global batch {}{}, {} lr {:g}, on {}{}\n",
        c.model, parameters, train_set->size(), test_set->size(), c.data, comm->size(), num_threads(), r.batch_size,
        r.accumulate > 1 ? fmt::format(" ({} micro-batches of {} per rank)", r.accumulate, trainer.micro_batch_size())
                         : "",
        c.opt.optimizer, lr, device.is_cuda() ? "cuda" : "cpu", examples::autocast_description(r.precision, device));
    if (const std::string layout = examples::describe_layout(*strategy, comm->size()); !layout.empty()) {
      fmt::print("{}{}\n", layout, momentum_note);
    }
    std::fflush(stdout);
  }
  if (c.straggler_delay_ms > 0 && comm->rank() == c.straggler_rank) {
    trainer.on_step_end([ms = c.straggler_delay_ms](const train::StepEvent&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    });
  }
  const train::FitResult result = trainer.fit(*optimizer, schedule.get());
  return result.stopped_for_relaunch ? train::kRelaunchExitCode : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP or CNN on MNIST-format data (Fashion-MNIST by default); data-parallel under mpirun",
               "train_mnist"};
  Config config;
  add_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  return examples::run_example("train_mnist", config.run.timeout_s,
                               [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
