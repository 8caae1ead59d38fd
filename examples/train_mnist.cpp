// train_mnist: trains an MLP or the LeNet-style CNN on MNIST-format data (Fashion-MNIST
// from Debian's dataset-fashion-mnist package by default) and reports test accuracy.
//
//   build/examples/train_mnist --model cnn --epochs 3
//
// Errors (bad flags, missing or corrupt data) print one line and exit non-zero.
#include "dtrain/core/log.h"
#include "dtrain/core/parallel.h"
#include "dtrain/data/mnist.h"
#include "dtrain/data/subset.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/adam.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/loop.h"
#include "dtrain/train/metrics_log.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>

namespace {

using namespace dtrain;

const char* const kDebianFashionMnist = "/usr/share/datasets/fashion-mnist";

struct Config {
  std::string data = kDebianFashionMnist;
  std::string model = "cnn";
  int epochs = 3;
  std::int64_t batch_size = 64;
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
};

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--data", c.data, "directory with the MNIST IDX files (plain or .gz)")->capture_default_str();
  app.add_option("--model", c.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "samples per step")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate (default: 0.05 for sgd, 0.001 for adam/adamw)")
      ->check(CLI::PositiveNumber);
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

int run(const Config& c) {
  logging::init();
  if (c.threads > 0) set_num_threads(c.threads);
  manual_seed(c.seed);
  DTRAIN_CHECK(std::filesystem::is_directory(c.data),
               "--data '{}': not a directory (expected the MNIST IDX files; Debian's dataset-fashion-mnist "
               "package installs them in {})",
               c.data, kDebianFashionMnist);
  auto train_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Train), c.limit_train);
  auto test_set = maybe_limit(data::MnistDataset::load(c.data, data::MnistDataset::Split::Test), c.limit_test);

  auto model = c.model == "mlp" ? nn::mlp(28 * 28, {512, 512}, 10) : nn::lenet_cnn(1, 10);
  auto optimizer = make_optimizer(c, model->parameters());
  data::DataLoader train_loader(train_set, {.batch_size = c.batch_size, .shuffle = true, .seed = c.seed});
  data::DataLoader test_loader(test_set, {.batch_size = 500});
  auto schedule = make_schedule(c, train_loader.num_batches());
  train::MetricsLog metrics = c.metrics.empty() ? train::MetricsLog() : train::MetricsLog(c.metrics);

  fmt::print("train_mnist: {} ({} parameters), {} train / {} test examples from {}, {} threads, {} lr {:g}\n",
             c.model, model->num_parameters(), train_set->size(), test_set->size(), c.data, num_threads(),
             c.optimizer, c.lr);
  double accuracy = 0;
  for (int epoch = 0; epoch < c.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    train::Progress progress(fmt::format("epoch {}/{}", epoch + 1, c.epochs), train_loader.num_batches());
    train::EpochOptions opts{.schedule = schedule.get(), .first_step = epoch * train_loader.num_batches()};
    train::EpochStats s = train::train_epoch(*model, train_loader, *optimizer, opts, &progress);
    train::EvalStats e = train::evaluate(*model, test_loader);
    accuracy = e.accuracy();
    double rate = static_cast<double>(s.samples) / s.seconds;
    fmt::print("epoch {}/{}: train loss {:.4f}, train accuracy {:.2f}%, test loss {:.4f}, test accuracy {:.2f}%, "
               "{:.0f} samples/s, {:.1f} s\n",
               epoch + 1, c.epochs, s.mean_loss, 100 * s.accuracy, e.loss(), 100 * accuracy, rate, s.seconds);
    std::fflush(stdout);
    metrics.write("epoch", {{"epoch", epoch + 1}, {"train_loss", s.mean_loss}, {"train_accuracy", s.accuracy},
                            {"test_loss", e.loss()}, {"test_accuracy", accuracy}, {"samples_per_s", rate},
                            {"seconds", s.seconds}});
  }
  fmt::print("final test accuracy: {:.2f}%\n", 100 * accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP or CNN on MNIST-format data (Fashion-MNIST by default)", "train_mnist"};
  Config config;
  add_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  if (config.lr == 0) config.lr = config.optimizer == "sgd" ? 0.05 : 1e-3;
  try {
    return run(config);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "train_mnist: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "train_mnist: error: {}\n", e.what());
  }
  return 1;
}
