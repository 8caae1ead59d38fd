// bench_train: single-process training throughput, the figure bench/peers/pytorch_train.py
// reports for PyTorch on the same cases. A step is zero_grad + forward + cross-entropy +
// backward + SGD step (lr 0.01 unless --lr, momentum 0.9) on one fixed synthetic batch (normal
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
//
// A fast step that does not train is no result: every step's loss must be finite, no
// step may skip its update (f16's loss scaler skips a step whose gradients overflowed),
// and the loss must fall from the first step to the last (all fit the same batch). A case
// that fails any of these prints why and the program exits 1. The loss is read after the
// step's clock stops, so the check costs the timed step nothing.
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
#include <cmath>
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
  double lr = 0.01;
  bool json = false;
};

// One step's time, its loss and whether the optimizer applied the update.
struct StepResult {
  double seconds;
  double loss;
  bool updated;
};

StepResult timed_step(const Config& c, nn::Module& model, optim::SGD& optimizer, optim::LossScaler& scaler,
                      const Variable& x, const Tensor& y) {
  const auto start = std::chrono::steady_clock::now();
  optimizer.zero_grad();
  Variable loss;
  {
    AutocastGuard autocast(c.autocast.value_or(DType::bf16), c.autocast.has_value());
    loss = cross_entropy(model.forward(x), y);
  }
  scaler.scale(loss).backward();
  const bool updated = scaler.step(optimizer);
  scaler.update();
  synchronize(c.device);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {seconds, loss.data().item(), updated};
}

// The losses of a case's steps, warm-up included, in order, and how many steps skipped
// their update.
struct TrainingCheck {
  std::vector<double> losses;
  int skipped = 0;

  void add(const StepResult& r) {
    losses.push_back(r.loss);
    if (!r.updated) ++skipped;
  }
  // Why this case's figures would time a step that does not train; empty when it trains.
  std::string problem() const {
    for (std::size_t i = 0; i < losses.size(); ++i) {
      if (!std::isfinite(losses[i])) return fmt::format("the loss of step {} is {}", i + 1, losses[i]);
    }
    if (skipped > 0) return fmt::format("{} of {} steps skipped their update", skipped, losses.size());
    if (losses.size() >= 2 && !(losses.back() < losses.front())) {
      return fmt::format("the loss did not fall: {:.6g} at the first step, {:.6g} at the last ({} steps)",
                         losses.front(), losses.back(), losses.size());
    }
    return {};
  }
};

struct CaseResult {
  std::vector<double> seconds;  // the measured steps'
  TrainingCheck check;
};

// Step times of one (batch, threads) case.
CaseResult run_case(const Config& c, std::int64_t batch, int threads) {
  set_num_threads(threads);
  manual_seed(1);
  bench::BenchModel m = bench::bench_model(c.model);
  m.model->to(c.device);
  m.model->train();
  optim::SGD optimizer(m.model->parameters(), optim::SgdOptions{.lr = c.lr, .momentum = 0.9});
  optim::LossScaler scaler({.enabled = c.precision == "f16"});  // bf16 keeps f32's range
  const auto [x, y] = bench::synthetic_batch(m, batch, 100);
  const Variable input(x.to(c.device));
  const Tensor labels = y.to(c.device);
  CaseResult result;
  for (int i = 0; i < c.warmup; ++i) result.check.add(timed_step(c, *m.model, optimizer, scaler, input, labels));
  for (int i = 0; i < c.steps; ++i) {
    const StepResult step = timed_step(c, *m.model, optimizer, scaler, input, labels);
    result.check.add(step);
    result.seconds.push_back(step.seconds);
  }
  return result;
}

void report(const Config& c, std::int64_t batch, int threads, const CaseResult& result) {
  const bench::Stats s = bench::stats(result.seconds);
  const std::vector<double>& losses = result.check.losses;
  const auto rate = [batch](double ms) { return bench::round4(static_cast<double>(batch) / (ms / 1e3)); };
  if (c.json) {
    nlohmann::ordered_json j = {{"bench", "train"},
                                {"framework", "dtrain"},
                                {"model", c.model},
                                {"device", c.device.str()},
                                {"precision", c.precision},
                                {"batch", batch},
                                {"threads", threads},
                                {"pool_spin_us", pool_spin_us()},  // set by run_case's set_num_threads
                                {"steps", c.steps},
                                {"samples_per_s", rate(s.median_ms)},
                                {"samples_per_s_min", rate(s.max_ms)},
                                {"samples_per_s_max", rate(s.min_ms)},
                                {"step_ms_median", s.median_ms},
                                {"step_ms_min", s.min_ms},
                                {"step_ms_max", s.max_ms},
                                {"loss_first", losses.front()},
                                {"loss_last", losses.back()}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{:<16}{:>7}{:>9}{:>14.1f}{:>12.2f}{:>9.2f}{:>9.2f}{:>10.4f} ->{:>8.4f}\n", c.model, batch, threads,
               rate(s.median_ms), s.median_ms, s.min_ms, s.max_ms, losses.front(), losses.back());
  }
  std::fflush(stdout);
}

int run(const Config& c) {
  if (c.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "train"}, {"machine", bench::machine_description()}}.dump());
  } else {
    fmt::print("bench_train: {} steps after {} warm-up, SGD momentum 0.9, synthetic data, on {}, {}; {}\n", c.steps,
               c.warmup, c.device.str(), c.precision, bench::machine_description());
    fmt::print("{:<16}{:>7}{:>9}{:>14}{:>12}{:>9}{:>9}{:>21}\n", "model", "batch", "threads", "samples/s", "median ms",
               "min ms", "max ms", "loss first -> last");
  }
  int status = 0;
  for (int threads : c.threads) {
    for (std::int64_t batch : c.batches) {
      const CaseResult result = run_case(c, batch, threads);
      report(c, batch, threads, result);
      if (const std::string problem = result.check.problem(); !problem.empty()) {
        fmt::print(stderr, "bench_train: {} batch {} on {} thread(s) does not train, so its figure is void: {}\n",
                   c.model, batch, threads, problem);
        status = 1;
      }
    }
  }
  return status;
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
  app.add_option("--lr", config.lr, "SGD learning rate (the PyTorch peer uses the default)")
      ->check(CLI::NonNegativeNumber)
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
