// bench_ps: parameter-server training on Fashion-MNIST, per mode (sync, async, ssp:K),
// server count and straggler setting, as the Trainer runs it under train_mnist
// --strategy ps. Per case, the first W + S ranks of the job train (W workers, S servers;
// ranks beyond wait), from the same seed:
//   samples/s        training samples over training seconds (evaluations excluded), over
//                    every worker, for the epochs run
//   time to target   seconds from the first step to the end of the first evaluation whose
//                    test accuracy reaches --target (evaluated --evals-per-epoch times per
//                    epoch, on the whole test set); null when not reached in --epochs
//   staleness        mean and max over the run (server 0's histogram)
// Recipe: train_mnist's (SGD, Nesterov, lr 0.05 after a 0.2-epoch warm-up, cosine decay,
// weight decay 5e-4), with momentum 0.9 in sync mode and --async-momentum (0.7) in async
// and ssp modes, where each gradient is applied about one update late: staleness acts as
// momentum of its own (Mitliagkas et al., "Asynchrony begets momentum", 2016), and with
// 0.9 the CNN diverged in 1 of 5 short runs.
// "Slowed 2x": worker 1 sleeps after each of its updates for as long as its updates took
// (the median of its step times in the same mode and layout unslowed, measured in the
// same repetition just before), so that its steps take twice as long.
//
//   mpirun -np 4 bench_ps --model cnn --modes sync,async,ssp:1,ssp:4 --servers 1,2 [--json]
//   mpirun -np 4 bench_ps --workers 3 --batch 96 --modes sync,sync+backup=1,async+stale_lr,async+dc=0.04
// A mode may carry server options after '+': backup=B (sync: backup workers), stale_lr (the
// staleness-aware learning rate) and dc=LAMBDA (DC-ASGD), as in train_mnist's --parallel,
// and a recipe of its own: batch=N (per update in sync mode, per push in async and ssp
// modes, where a smaller one gives more updates per epoch), momentum=M and lr=L (the peak).
//
// Cases run in turn within each repetition (--reps), so that a slow spell of the machine
// hits all of them alike.
#include "dtrain/core/parallel.h"
#include "dtrain/data/mnist.h"
#include "dtrain/data/subset.h"
#include "dtrain/dist/ps/ps_strategy.h"
#include "dtrain/layers/models.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/trainer.h"

#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

namespace {

using namespace dtrain;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "cnn";
  std::vector<std::string> modes{"sync", "async", "ssp:1", "ssp:4"};
  std::vector<int> servers{1, 2};
  std::vector<std::string> slow{"none", "2x"};
  int workers = 2;
  int epochs = 2;
  int evals_per_epoch = 4;
  double target = 0.88;
  std::int64_t batch = 64;
  double momentum = 0.9;        // sync
  double async_momentum = 0.7;  // async and ssp: asynchrony adds momentum of its own
  std::int64_t limit_train = 0;
  int reps = 1;
  bool json = false;
};

struct Outcome {
  double samples_per_s = 0;
  std::optional<double> time_to_target;
  double final_accuracy = 0;
  double staleness_mean = 0, staleness_max = 0;
  double slow_ms = 0;  // worker 1's sleep per update (slowed cases)
  double step_ms = 0;  // worker 1's median update time without the sleep
  int epochs = 0;
};

// A case's recipe: its batch, momentum and peak learning rate.
struct Recipe {
  std::int64_t batch = 0;
  double momentum = 0;
  double lr = 0.05;
};

// "MODE[+KEY[=VALUE]]...": the mode (dist::parse_ps_mode), then backup=B, stale_lr, dc=LAMBDA,
// and the recipe's batch=N, momentum=M and lr=L (instead of --batch, the mode's momentum
// and 0.05).
Recipe parse_mode(const Config& c, const std::string& text, dist::PsOptions& options) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  for (std::size_t plus; (plus = text.find('+', at)) != std::string::npos; at = plus + 1) {
    parts.push_back(text.substr(at, plus - at));
  }
  parts.push_back(text.substr(at));
  dist::parse_ps_mode(parts.front(), options);
  Recipe recipe{.batch = c.batch, .momentum = options.mode == dist::PsMode::Sync ? c.momentum : c.async_momentum};
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p == "stale_lr") options.staleness_lr = true;
    else if (p.starts_with("batch=")) recipe.batch = std::stoll(p.substr(6));
    else if (p.starts_with("momentum=")) recipe.momentum = std::stod(p.substr(9));
    else if (p.starts_with("lr=")) recipe.lr = std::stod(p.substr(3));
    else if (p.starts_with("backup=")) options.backup_workers = std::stoi(p.substr(7));
    else if (p.starts_with("dc=")) options.delay_compensation = std::stod(p.substr(3));
    else
      DTRAIN_FAIL(
          "bench_ps: mode '{}': unknown option '{}' (expected backup=B, stale_lr, dc=LAMBDA, batch=N, "
          "momentum=M or lr=L)",
          text, p);
  }
  dist::check_ps_options(options);
  DTRAIN_CHECK(recipe.batch > 0 && recipe.lr > 0 && recipe.momentum >= 0 && recipe.momentum < 1,
               "bench_ps: mode '{}': need batch > 0, lr > 0 and momentum in [0, 1)", text);
  return recipe;
}

struct Case {
  std::string mode;
  int servers;
  bool slowed;
  dist::PsOptions options;  // the mode's, with its server count
  Recipe recipe;
};

// Runs one case on `comm` (the W + S ranks). `slow_ms`: worker 1's sleep per update (0:
// none). Returns, on rank 0, the outcome; on rank 1 its median step time.
Outcome run_case(const Config& c, const Case& k, const dist::CommunicatorPtr& comm,
                 std::shared_ptr<const data::Dataset> train, std::shared_ptr<const data::Dataset> test,
                 double slow_ms) {
  const Recipe& recipe = k.recipe;
  auto strategy = std::make_shared<dist::ParameterServerStrategy>(comm, Device::cpu(), k.options);
  manual_seed(1);
  std::shared_ptr<nn::Module> model = c.model == "mlp" ? nn::mlp(28 * 28, {512, 512}, 10) : nn::lenet_cnn(1, 10);
  model = strategy->prepare(model);
  optim::SGD sgd(model->parameters(),
                 {.lr = recipe.lr, .momentum = recipe.momentum, .weight_decay = 5e-4, .nesterov = true});
  train::Trainer trainer(
      strategy, {.train = train, .test = test, .batch_size = recipe.batch, .seed = 1},
      {.epochs = c.epochs, .target_accuracy = c.target, .evaluations_per_epoch = c.evals_per_epoch, .verbose = false});
  // train_mnist's schedule: a 0.2-epoch warm-up, then cosine decay over the run.
  const std::int64_t per_epoch = trainer.updates_per_epoch();
  const auto warmup = static_cast<std::int64_t>(0.2 * static_cast<double>(per_epoch));
  const optim::WarmupLr schedule(std::make_shared<optim::CosineLr>(recipe.lr, per_epoch * c.epochs - warmup), warmup,
                                 0.1);
  std::vector<double> step_s;
  auto last = Clock::now();
  if (comm->rank() == 1) {
    trainer.on_step_end([&](const train::StepEvent&) {
      const auto now = Clock::now();
      step_s.push_back(std::chrono::duration<double>(now - last).count());
      if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slow_ms));
      last = Clock::now();
    });
    trainer.on_epoch_end([&](const train::EpochSummary&) { last = Clock::now(); });
  }
  const train::FitResult r = trainer.fit(sgd, &schedule);
  Outcome out;
  if (comm->rank() == 1 && !step_s.empty()) {
    std::sort(step_s.begin(), step_s.end());
    out.step_ms = 1e3 * step_s[step_s.size() / 2];
  }
  if (comm->rank() != 0) return out;
  double samples = 0, seconds = 0;
  for (const train::EpochSummary& e : r.epochs) {
    samples += static_cast<double>(e.samples);
    seconds += e.seconds;
    for (const auto& [name, value] : e.strategy_report.values) {
      if (name == "staleness_max") out.staleness_max = std::max(out.staleness_max, value);
      if (name == "staleness_mean") out.staleness_mean += value * static_cast<double>(e.samples);
    }
  }
  out.staleness_mean = samples > 0 ? out.staleness_mean / samples : 0;
  out.samples_per_s = seconds > 0 ? samples / seconds : 0;
  if (r.reached_target) out.time_to_target = r.seconds;
  out.final_accuracy = r.test_accuracy;
  out.epochs = static_cast<int>(r.epochs.size());
  out.slow_ms = slow_ms;
  return out;
}

int run(const Config& c, const dist::CommunicatorPtr& world) {
  const int most_servers = *std::max_element(c.servers.begin(), c.servers.end());
  DTRAIN_CHECK(world->size() >= c.workers + most_servers,
               "bench_ps: {} workers and up to {} servers need mpirun -np {} (got {})", c.workers, most_servers,
               c.workers + most_servers, world->size());
  auto train = data::MnistDataset::load(c.data, data::MnistDataset::Split::Train);
  std::shared_ptr<const data::Dataset> train_set = train;
  if (c.limit_train > 0) train_set = data::Subset::first(train_set, c.limit_train);
  std::shared_ptr<const data::Dataset> test_set = data::MnistDataset::load(c.data, data::MnistDataset::Split::Test);
  const bool root = world->rank() == 0;
  if (root) {
    if (c.json) {
      fmt::print("{}\n", nlohmann::ordered_json{{"bench", "ps"}, {"machine", bench::machine_description()}}.dump());
    } else {
      fmt::print(
          "bench_ps: {} on Fashion-MNIST ({} train), {} workers, batch {} per update, momentum {:g} (sync) and "
          "{:g} (async, ssp), target {:.0f}% ({} evaluations per epoch, at most {} epochs); {}\n",
          c.model, train_set->size(), c.workers, c.batch, c.momentum, c.async_momentum, 100 * c.target,
          c.evals_per_epoch, c.epochs, bench::machine_description());
      fmt::print("{:<4}{:<18}{:>4}{:>6}{:>12}{:>16}{:>10}{:>12}{:>10}\n", "rep", "mode", "S", "slow", "samples/s",
                 "to target (s)", "final %", "staleness", "slow ms");
    }
    std::fflush(stdout);
  }
  for (int rep = 0; rep < c.reps; ++rep) {
    for (int servers : c.servers) {
      for (const std::string& mode : c.modes) {
        dist::PsOptions options{.servers = servers};
        const Recipe recipe = parse_mode(c, mode, options);
        double step_ms = 0;  // worker 1's, unslowed: the sleep of the slowed case
        for (const std::string& slow : c.slow) {
          const Case k{mode, servers, slow == "2x", options, recipe};
          const bool active = world->rank() < c.workers + servers;
          auto comm = world->split(active ? 0 : 1, world->rank());
          Outcome out;
          if (active) {
            out = run_case(c, k, comm, train_set, test_set, k.slowed ? step_ms : 0);
          }
          // Worker 1's measured step time reaches everyone (for the next, slowed case).
          Tensor t = Tensor::full({1}, world->rank() == 1 ? out.step_ms : 0.0, {DType::f64});
          world->all_reduce(t);
          if (!k.slowed) step_ms = t.item();
          if (!root) continue;
          const auto to_target = out.time_to_target ? fmt::format("{:.1f}", *out.time_to_target) : "-";
          if (c.json) {
            nlohmann::ordered_json j{
                {"bench", "ps"},
                {"model", c.model},
                {"rep", rep},
                {"mode", mode},
                {"workers", c.workers},
                {"servers", servers},
                {"ranks", c.workers + servers},
                {"oversubscribed", c.workers + servers > static_cast<int>(std::thread::hardware_concurrency())},
                {"slowed", k.slowed},
                {"slow_ms", out.slow_ms},
                {"batch", recipe.batch},
                {"momentum", recipe.momentum},
                {"lr", recipe.lr},
                {"samples_per_s", out.samples_per_s},
                {"target", c.target},
                {"time_to_target_s",
                 out.time_to_target ? nlohmann::ordered_json(*out.time_to_target) : nlohmann::ordered_json(nullptr)},
                {"epochs_run", out.epochs},
                {"final_accuracy", out.final_accuracy},
                {"staleness_mean", out.staleness_mean},
                {"staleness_max", out.staleness_max}};
            fmt::print("{}\n", j.dump());
          } else {
            fmt::print("{:<4}{:<18}{:>4}{:>6}{:>12.0f}{:>16}{:>10.2f}{:>7.2f}/{:<4.0f}{:>10.1f}\n", rep, mode, servers,
                       slow, out.samples_per_s, to_target, 100 * out.final_accuracy, out.staleness_mean,
                       out.staleness_max, out.slow_ms);
          }
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Parameter-server training: samples/s and time to a test accuracy per mode, servers and straggler",
               "bench_ps"};
  Config c;
  app.add_option("--data", c.data, "directory with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--model", c.model, "mlp or cnn")->check(CLI::IsMember({"mlp", "cnn"}))->capture_default_str();
  app.add_option("--modes", c.modes, "sync, async, ssp:K")->delimiter(',')->capture_default_str();
  app.add_option("--servers", c.servers, "server counts")->delimiter(',')->capture_default_str();
  app.add_option("--slow", c.slow, "none and/or 2x (worker 1 slowed)")
      ->delimiter(',')
      ->check(CLI::IsMember({"none", "2x"}))
      ->capture_default_str();
  app.add_option("--workers", c.workers, "workers")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--epochs", c.epochs, "at most this many epochs (the schedule's length)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--evals-per-epoch", c.evals_per_epoch, "test-set evaluations per epoch")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--target", c.target, "test accuracy to reach")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--batch", c.batch, "samples per update")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD (Nesterov) momentum in sync mode")->capture_default_str();
  app.add_option("--async-momentum", c.async_momentum,
                 "SGD momentum in async and ssp modes (stale gradients act as momentum of their own: with 2 workers "
                 "0.9 diverged in 1 of 5 short CNN runs)")
      ->capture_default_str();
  app.add_option("--limit-train", c.limit_train, "train on the first N examples (0: all)")->capture_default_str();
  app.add_option("--reps", c.reps, "repetitions")->check(CLI::Range(1, 100))->capture_default_str();
  app.add_flag("--json", c.json, "print JSON lines (the machine, then one per case) instead of a table");
  CLI11_PARSE(app, argc, argv);
  if (std::find(c.slow.begin(), c.slow.end(), "2x") != c.slow.end() &&
      std::find(c.slow.begin(), c.slow.end(), "none") == c.slow.end()) {
    fmt::print(stderr, "bench_ps: --slow 2x needs none too (the unslowed case measures the step time first)\n");
    return 1;
  }
  return dtrain::dist::run_program("bench_ps", [&](const dtrain::dist::CommunicatorPtr& world) {
    dtrain::set_num_threads(1);
    return run(c, world);
  });
}
