// bench_zero_speed: what sharding costs in speed. The same model trains side by side under
// plain data parallelism and sharded data parallelism (ZeRO stages 1, 2 and 3), each case
// its own copy from the same initial state, with Adam (lr 1e-4) on one fixed synthetic batch
// per rank. After the warm-up the cases take their updates in turn (dp, zero=1, zero=2,
// zero=3, dp, ...), so that all of them see the same machine load; each update's time is
// the slowest rank's; the figure is the median. samples/s = ranks x batch / median update;
// "vs dp" = a case's samples/s over plain data parallelism's, the ratio the PyTorch peer
// (bench/peers/pytorch_zero.py: DDP, ZeroRedundancyOptimizer, FSDP2) prints too.
//
//   mpirun -np 2 bench_zero_speed --model cnn --batch 64 --threads 1 [--specs dp zero=1 zero=2 zero=3] [--json]
//   mpirun -np 2 bench_zero_speed --model cnn --specs zero=2 zero=2,exchange=bf16   (a spec's own commas stay)
//   mpirun -np 2 bench_zero_speed --model mlp_50m --batch 256 --threads 1 [--phases]
//
// An update is Strategy::train_step: forward, loss, backward with the gradient exchange
// overlapped, the optimizer's step (on the shards), and at stages 1 and 2 the parameters'
// all-gather; at stage 3 the next forward gathers them layer by layer.
#include "dtrain/core/environment.h"
#include "dtrain/core/parallel.h"
#include "dtrain/core/trace.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/optim/adam.h"

#include "bench_models.h"
#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>

namespace {

using namespace dtrain;

struct Config {
  std::string model = "cnn";
  std::int64_t batch = 64;  // per rank
  std::vector<std::string> specs{"dp", "zero=1", "zero=2", "zero=3"};
  int steps = 20;
  int warmup = 3;
  int threads = 0;  // 0: dtrain's default (cores / local ranks)
  bool json = false;
  bool phases = false;  // rank 0 prints each case's mean time per phase of an update
};

struct Case {
  std::string spec;
  std::shared_ptr<dist::Strategy> strategy;
  std::unique_ptr<optim::Adam> adam;
  std::vector<double> seconds;
  trace::PhaseTotals phases;  // rank 0's training thread, summed over the measured updates
};

int run(const Config& c, const dist::CommunicatorPtr& comm) {
  if (c.threads > 0) set_num_threads(c.threads);
  const dist::StepConfig config{.loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); }};
  std::vector<Case> cases;
  bench::BenchModel m;
  for (const std::string& spec : c.specs) {
    manual_seed(1);  // the same initial model in every case
    m = bench::bench_model(c.model);
    Case k{.spec = spec,
           .strategy = dist::make_strategy(spec, comm, Device::cpu()),
           .adam = nullptr,
           .seconds = {},
           .phases = {}};
    auto model = k.strategy->prepare(m.model);
    k.adam = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-4});
    cases.push_back(std::move(k));
  }
  const auto [x, y] = bench::synthetic_batch(m, c.batch, 100 + static_cast<std::uint64_t>(comm->rank()));
  const std::vector<dist::MicroBatch> micro{{x, y}};
  const auto step = [&](Case& k) {
    const auto start = std::chrono::steady_clock::now();
    (void)k.strategy->train_step(micro, *k.adam, config).loss.item();  // waits for the update
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (int i = 0; i < c.warmup; ++i) {
    for (Case& k : cases) step(k);
  }
  for (int i = 0; i < c.steps; ++i) {
    for (Case& k : cases) {
      const trace::PhaseTotals before = trace::thread_totals();
      k.seconds.push_back(step(k));
      const trace::PhaseTotals spent = trace::thread_totals() - before;
      for (std::size_t p = 0; p < trace::kPhases; ++p) k.phases.seconds[p] += spent.seconds[p];
    }
  }
  // Each update's time is the slowest rank's.
  const auto n = static_cast<std::int64_t>(c.steps);
  Tensor all = Tensor::empty({static_cast<std::int64_t>(cases.size()), n}, {DType::f64});
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::copy(cases[i].seconds.begin(), cases[i].seconds.end(), all.data<double>() + static_cast<std::int64_t>(i) * n);
  }
  comm->all_reduce(all, ReduceOp::Max);
  if (comm->rank() != 0) return 0;

  const auto samples_per_s = [&](const bench::Stats& s) {
    return static_cast<double>(comm->size() * c.batch) / (s.median_ms / 1e3);
  };
  std::vector<bench::Stats> figures;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const double* row = all.data<double>() + static_cast<std::int64_t>(i) * n;
    figures.push_back(bench::stats(std::vector<double>(row, row + n)));
  }
  const double first = samples_per_s(figures.front());
  if (c.json) {
    fmt::print("{}\n",
               nlohmann::ordered_json{{"bench", "zero_speed"}, {"machine", bench::machine_description()}}.dump());
  } else {
    fmt::print(
        "bench_zero_speed: {}, {} rank(s) x {} thread(s), batch {} per rank, Adam, {} updates after {} warm-up; "
        "{}\n",
        c.model, comm->size(), num_threads(), c.batch, c.steps, c.warmup, bench::machine_description());
    fmt::print("{:<10}{:>11}{:>9}{:>9}{:>12}{:>9}\n", "spec", "median ms", "min ms", "max ms", "samples/s",
               fmt::format("vs {}", cases.front().spec));
  }
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const bench::Stats& s = figures[i];
    const double rate = samples_per_s(s);
    if (c.json) {
      fmt::print("{}\n", nlohmann::ordered_json{{"bench", "zero_speed"},
                                                {"framework", "dtrain"},
                                                {"model", c.model},
                                                {"spec", cases[i].spec},
                                                {"ranks", comm->size()},
                                                {"batch_per_rank", c.batch},
                                                {"threads", num_threads()},
                                                {"steps", c.steps},
                                                {"step_ms_median", s.median_ms},
                                                {"step_ms_min", s.min_ms},
                                                {"step_ms_max", s.max_ms},
                                                {"samples_per_s", bench::round4(rate)},
                                                {"vs_first", bench::round4(rate / first)}}
                             .dump());
    } else {
      fmt::print("{:<10}{:>11.2f}{:>9.2f}{:>9.2f}{:>12.1f}{:>9.3f}\n", cases[i].spec, s.median_ms, s.min_ms, s.max_ms,
                 rate, rate / first);
    }
  }
  if (c.phases && !c.json) {
    fmt::print("rank 0, mean ms per update:\n{:<10}", "spec");
    for (std::size_t p = 0; p < trace::kPhases; ++p)
      fmt::print("{:>15}", trace::phase_name(static_cast<trace::Phase>(p)));
    fmt::print("\n");
    for (const Case& k : cases) {
      fmt::print("{:<10}", k.spec);
      for (double seconds : k.phases.seconds) fmt::print("{:>15.1f}", seconds * 1e3 / c.steps);
      fmt::print("\n");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Update time of plain and sharded data parallelism (ZeRO stages), side by side", "bench_zero_speed"};
  Config config;
  app.add_option("--model", config.model, "a bench model (bench_models.h)")
      ->check(CLI::IsMember(bench::bench_model_names()))
      ->capture_default_str();
  app.add_option("--batch", config.batch, "samples per rank per update")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--specs", config.specs,
                 "strategy specs separated by spaces (a spec may hold commas: zero=2,exchange=bf16), the first the "
                 "reference (strategy_factory.h)")
      ->capture_default_str();
  app.add_option("--steps", config.steps, "measured updates of each case")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", config.warmup, "unmeasured updates of each case first")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--threads", config.threads, "intra-op threads per rank (default: cores / local ranks)")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--phases", config.phases, "also print rank 0's mean time per phase (forward, backward, ...)");
  app.add_flag("--json", config.json, "print JSON lines (the machine, then one per spec) instead of a table");
  CLI11_PARSE(app, argc, argv);
  return dist::run_program("bench_zero_speed", [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
