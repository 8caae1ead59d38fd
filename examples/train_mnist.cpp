// train_mnist: trains an MLP or the LeNet-style CNN on MNIST-format data (Fashion-MNIST
// from Debian's dataset-fashion-mnist package by default) and reports test accuracy.
// Launched by mpirun it trains data-parallel: the global batch is split across ranks,
// each rank reads its own shard, gradients are averaged, evaluation is sharded.
//
//   build/examples/train_mnist --model cnn --epochs 3
//   mpirun -np 2 build/examples/train_mnist --model cnn --epochs 3
//   mpirun -np 8 build/examples/train_mnist --device cuda --precision bf16   # a GPU per rank, NCCL
//
// --precision bf16|f16 runs forward under autocast (16-bit products, f32 everything else;
// f16 with dynamic loss scaling); on the CPU the 16-bit products are emulated exactly.
//
// Errors (bad flags, missing or corrupt data) print one line and exit non-zero; under
// mpirun a failing rank ends the whole job with its message.
#include "dtrain/core/log.h"
#include "dtrain/core/parallel.h"
#include "dtrain/data/distributed_sampler.h"
#include "dtrain/data/mnist.h"
#include "dtrain/data/subset.h"
#include "dtrain/dist/data_parallel.h"
#include "dtrain/dist/nccl.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/adam.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/loop.h"
#include "dtrain/train/metrics_log.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <optional>

namespace {

using namespace dtrain;

const char* const kDebianFashionMnist = "/usr/share/datasets/fashion-mnist";

struct Config {
  std::string data = kDebianFashionMnist;
  std::string model = "cnn";
  int epochs = 3;
  std::int64_t batch_size = 64;  // global: split across ranks
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
  std::int64_t limit_train = 0;  // 0: all
  std::int64_t limit_test = 0;
  bool check_replicas = false;
  double timeout_s = 300;
  double target_accuracy = 0;  // 0: train every epoch; else stop once test accuracy reaches it
  std::string device = "cpu";
  std::string precision = "fp32";
};

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--data", c.data, "directory with the MNIST IDX files (plain or .gz)")->capture_default_str();
  app.add_option("--model", c.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "global samples per step (split across ranks)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
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
  app.add_option("--limit-train", c.limit_train, "train on the first N examples only")->check(CLI::PositiveNumber);
  app.add_option("--limit-test", c.limit_test, "evaluate on the first N test examples only")->check(CLI::PositiveNumber);
  app.add_option("--target-accuracy", c.target_accuracy,
                 "stop after the first epoch whose test accuracy (a fraction) reaches this; prints the time taken")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--check-replicas", c.check_replicas, "after each epoch, report the largest parameter difference across ranks");
  app.add_option("--device", c.device, "cpu, cuda (this rank's GPU: local rank mod device count) or cuda:N")
      ->capture_default_str();
  app.add_option("--precision", c.precision, "fp32, or bf16/f16 products under autocast (f16 with loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--timeout", c.timeout_s, "seconds a collective may wait for the other ranks before the job is aborted")
      ->check(CLI::PositiveNumber)->capture_default_str();
}

std::shared_ptr<const data::Dataset> maybe_limit(std::shared_ptr<const data::Dataset> d, std::int64_t limit) {
  return limit > 0 ? data::Subset::first(std::move(d), limit) : std::move(d);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Config& c, std::vector<Variable> params) {
  if (c.optimizer == "sgd") {
    return std::make_unique<optim::SGD>(
        std::move(params), optim::SgdOptions{.lr = c.lr, .momentum = c.momentum, .weight_decay = c.weight_decay,
                                             .nesterov = c.momentum > 0});
  }
  optim::AdamOptions o{.lr = c.lr, .weight_decay = c.weight_decay};
  if (c.optimizer == "adamw") return std::make_unique<optim::AdamW>(std::move(params), o);
  return std::make_unique<optim::Adam>(std::move(params), o);
}

std::shared_ptr<const optim::LrSchedule> make_schedule(const Config& c, std::int64_t steps_per_epoch) {
  const std::int64_t total = steps_per_epoch * c.epochs;
  const auto warmup = static_cast<std::int64_t>(c.warmup_epochs * static_cast<double>(steps_per_epoch));
  std::shared_ptr<const optim::LrSchedule> main;
  if (c.schedule == "cosine") main = std::make_shared<optim::CosineLr>(c.lr, std::max<std::int64_t>(total - warmup, 1));
  else if (c.schedule == "step") main = std::make_shared<optim::StepLr>(c.lr, std::max<std::int64_t>(total / 3, 1), 0.1);
  else main = std::make_shared<optim::ConstantLr>(c.lr);
  if (warmup == 0) return main;
  return std::make_shared<optim::WarmupLr>(main, warmup, 0.1);
}

// Sums of a sharded evaluation, added up over all ranks.
train::EvalStats all_ranks(const train::EvalStats& local, dist::Communicator& comm) {
  Tensor sums = Tensor::from_vector<double>(
      {local.loss_sum, static_cast<double>(local.correct), static_cast<double>(local.samples)}, {3});
  comm.all_reduce(sums);
  auto v = sums.to_vector<double>();
  return {v[0], static_cast<std::int64_t>(v[1]), static_cast<std::int64_t>(v[2])};
}

int run(Config c, const dist::CommunicatorPtr& comm) {
  const int rank = comm->rank(), world = comm->size();
  const bool lead = rank == 0;
  logging::init(rank, world);
  if (c.threads > 0) set_num_threads(c.threads);
  manual_seed(c.seed);  // same initial model everywhere; DataParallel also broadcasts rank 0's
  DTRAIN_CHECK(c.batch_size % world == 0, "--batch-size {}: must be divisible by the {} ranks", c.batch_size, world);
  if (c.scale_lr) c.lr = optim::linear_scaled_lr(c.lr, c.batch_size, 64);
  DTRAIN_CHECK(std::filesystem::is_directory(c.data),
               "--data '{}': not a directory (expected the MNIST IDX files; Debian's dataset-fashion-mnist "
               "package installs them in {})",
               c.data, kDebianFashionMnist);
  auto train_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Train), c.limit_train);
  auto test_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Test), c.limit_test);

  const Device device = c.device == "cuda" ? dist::rank_cuda_device() : Device::parse(c.device);
  const std::optional<DType> autocast =
      c.precision == "bf16" ? std::optional(DType::bf16) : c.precision == "f16" ? std::optional(DType::f16) : std::nullopt;
  std::shared_ptr<nn::Module> model = c.model == "mlp" ? nn::mlp(28 * 28, {512, 512}, 10) : nn::lenet_cnn(1, 10);
  model->to(device);
  dist::DataParallel ddp(model, comm);  // over NCCL for a model on a GPU
  auto optimizer = make_optimizer(c, model->parameters());
  optim::LossScaler scaler({.enabled = c.precision == "f16"});  // bf16 has f32's range
  auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), rank, world, c.seed);
  const bool pin = device.is_cuda();  // batches upload while the GPU computes
  data::DataLoader train_loader(train_set, {.batch_size = c.batch_size / world, .pin_memory = pin}, sampler);
  data::DataLoader test_loader(data::Subset::shard(test_set, rank, world), {.batch_size = 500, .pin_memory = pin});
  auto schedule = make_schedule(c, train_loader.num_batches());
  train::MetricsLog metrics = c.metrics.empty() || !lead ? train::MetricsLog() : train::MetricsLog(c.metrics);

  if (lead) {
    fmt::print("train_mnist: {} ({} parameters), {} train / {} test examples from {}, {} rank(s) x {} thread(s), "
               "global batch {}, {} lr {:g}, on {}{}\n",
               c.model, model->num_parameters(), train_set->size(), test_set->size(), c.data, world, num_threads(),
               c.batch_size, c.optimizer, c.lr, device.is_cuda() ? "cuda" : "cpu",
               autocast ? ", " + c.precision + " autocast" : "");
  }
  double accuracy = 0;
  // Time to accuracy runs from the first step to the end of the evaluation that reached
  // the target: evaluation is part of knowing that it was reached.
  const auto start = std::chrono::steady_clock::now();
  int epochs_run = 0;
  bool reached_target = false;
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    train::Progress progress(fmt::format("epoch {}/{}", epoch + 1, c.epochs), train_loader.num_batches(), lead);
    progress.set_sample_scale(world);
    train::EpochOptions opts{.schedule = schedule.get(),
                             .first_step = epoch * train_loader.num_batches(),
                             .after_backward = [&ddp] { ddp.finish_gradient_sync(); },
                             .autocast = autocast,
                             .scaler = scaler.enabled() ? &scaler : nullptr};
    train::EpochStats s = train::train_epoch(*model, train_loader, *optimizer, opts, &progress);
    train::EvalStats e = all_ranks(train::evaluate(*model, test_loader, autocast), *comm);
    accuracy = e.accuracy();
    epochs_run = epoch + 1;
    // Every rank has the same, all-reduced accuracy, so all of them stop together.
    reached_target = c.target_accuracy > 0 && accuracy >= c.target_accuracy;
    double rate = static_cast<double>(s.samples * world) / s.seconds;
    std::string replicas = c.check_replicas ? fmt::format(", replica max diff {:.3g}", ddp.check_replicas()) : "";
    if (lead) {
      fmt::print("epoch {}/{}: train loss {:.4f}, train accuracy {:.2f}%, test loss {:.4f}, test accuracy {:.2f}%, "
                 "{:.0f} samples/s, {:.1f} s{}\n",
                 epoch + 1, c.epochs, s.mean_loss, 100 * s.accuracy, e.loss(), 100 * accuracy, rate, s.seconds,
                 replicas);
      std::fflush(stdout);
      metrics.write("epoch", {{"epoch", epoch + 1}, {"train_loss", s.mean_loss}, {"train_accuracy", s.accuracy},
                              {"test_loss", e.loss()}, {"test_accuracy", accuracy}, {"samples_per_s", rate},
                              {"seconds", s.seconds}});
    }
    if (reached_target) break;
  }
  if (!lead) return 0;
  fmt::print("final test accuracy: {:.2f}%\n", 100 * accuracy);
  if (c.target_accuracy > 0) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (reached_target) {
      fmt::print("reached {:.2f}% test accuracy after {} epoch(s) in {:.1f} s\n", 100 * c.target_accuracy,
                 epochs_run, seconds);
    } else {
      fmt::print("did not reach {:.2f}% test accuracy in {} epoch(s), {:.1f} s\n", 100 * c.target_accuracy,
                 epochs_run, seconds);
    }
  }
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
  dist::CommunicatorPtr comm;
  std::string error;
  try {
    comm = dist::world({.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(config.timeout_s * 1000))});
    return run(config, comm);
  } catch (const dtrain::Error& e) {
    error = e.message();
  } catch (const std::exception& e) {
    error = e.what();
  }
  // One rank failing must not leave the others waiting in a collective: end the job.
  if (comm && comm->size() > 1) dist::abort_job("train_mnist: error: " + error);
  fmt::print(stderr, "train_mnist: error: {}\n", error);
  return 1;
}
