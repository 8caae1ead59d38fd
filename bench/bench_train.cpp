// bench_train: single-process training throughput, the figure bench/peers/pytorch_train.py
// reports for PyTorch on the same cases. A step is zero_grad + forward + cross-entropy +
// backward + SGD step (lr 0.01, momentum 0.9) on one fixed synthetic batch (normal
// inputs, uniform labels), the model in training mode. After the warm-up steps, each
// measured step is timed on its own; samples/s is the batch over the median step time.
//
//   bench_train --model cnn --batch 64,256 --threads 1,2 --steps 20 [--json]
//
// Every (batch, threads) pair is one case, with a freshly initialized model. With
// --device cuda[:N] the model and batch live on that GPU (--threads then only sets the
// host's threads) and each step ends by waiting for the device, so that a step's time is
// the GPU's work and not just the time to queue it. --precision bf16|f16 runs forward
// under autocast (dtrain/autograd/autocast.h; f16 with dynamic loss scaling).
#include "dtrain/autograd/autocast.h"
#include "dtrain/core/parallel.h"
#include "dtrain/optim/loss_scaler.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/tensor/stream.h"

#include "bench_models.h"
#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>

namespace {

using namespace dtrain;

struct Config {
  std::string model = "cnn";
  std::string device_name = "cpu";
  Device device = Device::cpu();
  std::string precision = "fp32";
  std::optional<DType> autocast;  // from precision: bf16/f16, none for fp32
  std::vector<std::int64_t> batches{64};
  std::vector<int> threads{1};
  int steps = 20;
  int warmup = 3;
  bool json = false;
};

double timed_step(const Config& c, nn::Module& model, optim::SGD& optimizer, optim::LossScaler& scaler,
                  const Variable& x, const Tensor& y) {
  const auto start = std::chrono::steady_clock::now();
  optimizer.zero_grad();
  Variable loss;
  {
    AutocastGuard autocast(c.autocast.value_or(DType::bf16), c.autocast.has_value());
    loss = cross_entropy(model.forward(x), y);
  }
  scaler.scale(loss).backward();
  scaler.step(optimizer);
  scaler.update();
  synchronize(c.device);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Step times of one (batch, threads) case.
std::vector<double> run_case(const Config& c, std::int64_t batch, int threads) {
  set_num_threads(threads);
  manual_seed(1);
  bench::BenchModel m = bench::bench_model(c.model);
  m.model->to(c.device);
  m.model->train();
  optim::SGD optimizer(m.model->parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  optim::LossScaler scaler({.enabled = c.precision == "f16"});  // bf16 keeps f32's range
  const auto [x, y] = bench::synthetic_batch(m, batch, 100);
  const Variable input(x.to(c.device));
  const Tensor labels = y.to(c.device);
  for (int i = 0; i < c.warmup; ++i) timed_step(c, *m.model, optimizer, scaler, input, labels);
  std::vector<double> seconds;
  for (int i = 0; i < c.steps; ++i) seconds.push_back(timed_step(c, *m.model, optimizer, scaler, input, labels));
  return seconds;
}

void report(const Config& c, std::int64_t batch, int threads, const std::vector<double>& seconds) {
  const bench::Stats s = bench::stats(seconds);
  const auto rate = [batch](double ms) { return bench::round4(static_cast<double>(batch) / (ms / 1e3)); };
  if (c.json) {
    nlohmann::ordered_json j = {{"bench", "train"},
                                {"framework", "dtrain"},
                                {"model", c.model},
                                {"device", c.device.str()},
                                {"precision", c.precision},
                                {"batch", batch},
                                {"threads", threads},
                                {"steps", c.steps},
                                {"samples_per_s", rate(s.median_ms)},
                                {"samples_per_s_min", rate(s.max_ms)},
                                {"samples_per_s_max", rate(s.min_ms)},
                                {"step_ms_median", s.median_ms},
                                {"step_ms_min", s.min_ms},
                                {"step_ms_max", s.max_ms}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{:<16}{:>7}{:>9}{:>14.1f}{:>12.2f}{:>9.2f}{:>9.2f}\n", c.model, batch, threads, rate(s.median_ms),
               s.median_ms, s.min_ms, s.max_ms);
  }
  std::fflush(stdout);
}

int run(const Config& c) {
  if (c.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "train"}, {"machine", bench::machine_description()}}.dump());
  } else {
    fmt::print("bench_train: {} steps after {} warm-up, SGD momentum 0.9, synthetic data, on {}, {}; {}\n", c.steps,
               c.warmup, c.device.str(), c.precision, bench::machine_description());
    fmt::print("{:<16}{:>7}{:>9}{:>14}{:>12}{:>9}{:>9}\n", "model", "batch", "threads", "samples/s", "median ms",
               "min ms", "max ms");
  }
  for (int threads : c.threads) {
    for (std::int64_t batch : c.batches) report(c, batch, threads, run_case(c, batch, threads));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training-step throughput of one process on synthetic data", "bench_train"};
  Config config;
  app.add_option("--model", config.model,
                 "mlp (784-512-512-10), cnn (LeNet-style), resnet18_cifar, resnet18_224 or resnet50_224")
      ->check(CLI::IsMember(bench::bench_model_names()))
      ->capture_default_str();
  app.add_option("--device", config.device_name, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--precision", config.precision, "fp32, or bf16/f16 products under autocast (f16 with loss scaling)")
      ->check(CLI::IsMember({"fp32", "bf16", "f16"}))
      ->capture_default_str();
  app.add_option("--batch", config.batches, "samples per step; a comma-separated list runs each")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--threads", config.threads, "intra-op threads; a comma-separated list runs each")
      ->delimiter(',')
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--steps", config.steps, "measured steps per case")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--warmup", config.warmup, "unmeasured steps per case first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_flag("--json", config.json, "print JSON lines (the machine, then one per case) instead of a table");
  CLI11_PARSE(app, argc, argv);
  try {
    config.device = Device::parse(config.device_name);
    if (config.precision != "fp32") config.autocast = config.precision == "bf16" ? DType::bf16 : DType::f16;
    return run(config);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_train: error: {}\n", e.what());
    return 1;
  }
}
