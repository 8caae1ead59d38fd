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
#include "dtrain/dist/nccl.h"
#include "dtrain/dist/strategy.h"
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
  int epochs = 3;
  std::int64_t batch_size = 64;  // global, per update: split across ranks and accumulation steps
  int accumulate = 1;
  double clip_grad_norm = 0;  // 0: off
  bool scale_lr = false;
  double lr = 0;  // 0: the model's default below
  std::string optimizer = "sgd";
  double momentum = 0.9;
  double weight_decay = 5e-4;
  std::string schedule = "cosine";
  double warmup_epochs = 0.2;
  std::uint64_t seed = 1;
  int threads = 0;  // 0: dtrain's default (cores / local ranks)
  std::string metrics;
  train::CheckpointOptions checkpoint;
  examples::ReportingFlags reporting;
  std::int64_t limit_train = 0;  // 0: all
  std::int64_t limit_test = 0;
  bool check_replicas = false;
  int evaluations_per_epoch = 1;
  double timeout_s = 300;
  double target_accuracy = 0;  // 0: train every epoch; else stop once test accuracy reaches it
  std::string device = "cpu";
  std::string precision = "fp32";
  examples::ParallelFlags parallel;
  int straggler_delay_ms = 0;
  int straggler_rank = 1;
};

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--data", c.data, "directory with the MNIST IDX files (plain or .gz)")->capture_default_str();
  app.add_option("--model", c.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--hidden", c.hidden, "the MLP's hidden layer widths, comma-separated (e.g. 512,512,512,512)")
      ->delimiter(',')->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "global samples per optimizer update (split across ranks and --accumulate)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--accumulate", c.accumulate,
                 "micro-batches per optimizer update (gradient accumulation; ranks communicate once per update)")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--clip-grad-norm", c.clip_grad_norm, "clip the gradients' global L2 norm to this (0: off)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate (default: 0.05 for sgd, 0.001 for adam/adamw)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--scale-lr", c.scale_lr, "scale --lr linearly with the global batch size (base batch 64)");
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->check(CLI::Range(0.0, 0.999))->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "L2 penalty (decoupled for adamw)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--schedule", c.schedule, "learning-rate schedule: cosine, step or constant")
      ->check(CLI::IsMember({"cosine", "step", "constant"}))->capture_default_str();
  app.add_option("--warmup-epochs", c.warmup_epochs, "linear warm-up length in epochs")
      ->check(CLI::Range(0.0, 100.0))->capture_default_str();
  app.add_option("--seed", c.seed, "seed for initialization and shuffling")->capture_default_str();
  app.add_option("--threads", c.threads, "intra-op threads (default: cores / local ranks)")->check(CLI::Range(1, 1024));
  app.add_option("--metrics", c.metrics, "write metrics as JSON lines to this file");
  examples::add_checkpoint_flags(app, c.checkpoint);
  examples::add_reporting_flags(app, c.reporting);
  app.add_option("--limit-train", c.limit_train, "train on the first N examples only")->check(CLI::PositiveNumber);
  app.add_option("--limit-test", c.limit_test, "evaluate on the first N test examples only")->check(CLI::PositiveNumber);
  app.add_option("--target-accuracy", c.target_accuracy,
                 "stop after the first epoch whose test accuracy (a fraction) reaches this; prints the time taken")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--evals-per-epoch", c.evaluations_per_epoch,
                 "evaluate (and check --target-accuracy) this many times per epoch, evenly spaced")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_flag("--check-replicas", c.check_replicas, "after each epoch, report the largest parameter difference across ranks");
  app.add_option("--device", c.device, "cpu, cuda (this rank's GPU: local rank mod device count) or cuda:N")
      ->capture_default_str();
  app.add_option("--precision", c.precision, "fp32, or bf16/f16 products under autocast (f16 with loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "f16"}))
      ->capture_default_str();
  examples::add_parallel_flags(app, c.parallel);
  app.add_option("--straggler-delay-ms", c.straggler_delay_ms,
                 "slow down one rank on purpose: it sleeps this long after each update (demonstrations, benchmarks)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--straggler-rank", c.straggler_rank, "the rank that --straggler-delay-ms slows")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--timeout", c.timeout_s, "seconds a collective may wait for the other ranks before the job is aborted")
      ->check(CLI::PositiveNumber)->capture_default_str();
}

std::shared_ptr<const data::Dataset> maybe_limit(std::shared_ptr<const data::Dataset> d, std::int64_t limit) {
  return limit > 0 ? data::Subset::first(std::move(d), limit) : std::move(d);
}

int run(Config c, const dist::CommunicatorPtr& comm) {
  logging::init(comm->rank(), comm->size());
  if (c.threads > 0) set_num_threads(c.threads);
  manual_seed(c.seed);  // same initial model everywhere; DataParallel also broadcasts rank 0's
  if (c.scale_lr) c.lr = optim::linear_scaled_lr(c.lr, c.batch_size, 64);
  DTRAIN_CHECK(std::filesystem::is_directory(c.data),
               "--data '{}': not a directory (expected the MNIST IDX files; Debian's dataset-fashion-mnist "
               "package installs them in {})",
               c.data, kDebianFashionMnist);
  auto train_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Train), c.limit_train);
  auto test_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Test), c.limit_test);

  const Device device = c.device == "cuda" ? dist::rank_cuda_device() : Device::parse(c.device);
  const std::optional<DType> autocast = examples::autocast_type(c.precision);
  // --parallel and its aliases (examples/common/parallel_flags.h); a pipeline balanced by
  // time is timed on one micro-batch of 28x28 images.
  auto strategy = examples::make_strategy(c.parallel, comm, device,
                                          {.example_shape = {1, 28, 28}, .batch_size = c.batch_size,
                                           .accumulate = c.accumulate});
  std::shared_ptr<nn::Module> whole = c.model == "mlp" ? nn::mlp(28 * 28, c.hidden, 10) : nn::lenet_cnn(1, 10);
  const std::int64_t parameters = whole->num_parameters();
  auto model = strategy->prepare(std::move(whole));  // a pipeline keeps this rank's stage
  auto optimizer = examples::make_optimizer(
      {.name = c.optimizer, .lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay}, model->parameters());
  train::Trainer trainer(strategy, {.train = train_set, .test = test_set, .batch_size = c.batch_size, .seed = c.seed},
                         {.epochs = c.epochs,
                          .accumulate = c.accumulate,
                          .clip_grad_norm = c.clip_grad_norm,
                          .autocast = autocast,
                          .loss_scaler = {.enabled = c.precision == "f16"},  // bf16 has f32's range
                          .target_accuracy = c.target_accuracy,
                          .evaluations_per_epoch = c.evaluations_per_epoch,
                          .check_replicas = c.check_replicas,
                          .metrics = c.metrics,
                          .checkpoint = c.checkpoint,
                          .progress = c.reporting.progress,
                          .trace = c.reporting.trace,
                          .tensorboard = c.reporting.tensorboard});
  auto schedule = examples::make_schedule(
      {.name = c.schedule, .lr = c.lr, .warmup_epochs = c.warmup_epochs, .epochs = c.epochs}, trainer.updates_per_epoch());
  if (strategy->reports()) {
    fmt::print("train_mnist: {} ({} parameters), {} train / {} test examples from {}, {} rank(s) x {} thread(s), "
               "global batch {}{}, {} lr {:g}, on {}{}\n",
               c.model, parameters, train_set->size(), test_set->size(), c.data, comm->size(),
               num_threads(), c.batch_size,
               c.accumulate > 1 ? fmt::format(" ({} micro-batches of {} per rank)", c.accumulate,
                                              trainer.micro_batch_size())
                                : "",
               c.optimizer, c.lr, device.is_cuda() ? "cuda" : "cpu", autocast ? ", " + c.precision + " autocast" : "");
    if (const std::string layout = examples::describe_layout(*strategy, comm->size()); !layout.empty()) {
      fmt::print("{}\n", layout);
    }
    std::fflush(stdout);
  }
  if (c.straggler_delay_ms > 0 && comm->rank() == c.straggler_rank) {
    trainer.on_step_end([ms = c.straggler_delay_ms](const train::StepEvent&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    });
  }
  trainer.fit(*optimizer, schedule.get());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP or CNN on MNIST-format data (Fashion-MNIST by default); data-parallel under mpirun",
               "train_mnist"};
  Config config;
  add_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  if (config.lr == 0) config.lr = config.optimizer == "sgd" ? 0.05 : 1e-3;
  return examples::run_example("train_mnist", config.timeout_s,
                               [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
