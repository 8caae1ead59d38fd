// bench_zero_memory: what one rank holds under plain data parallelism and under sharded
// data parallelism (ZeRO stages), training the same model with Adam, next to the ZeRO
// paper's per-rank formulas for f32 training (4 bytes of parameters, 4 of gradients and 8
// of Adam state per parameter, Psi parameters, N ranks):
//
//   dp       16 Psi            (parameters + gradients + optimizer state)
//   zero=1    8 Psi +  8 Psi/N (optimizer state sharded)
//   zero=2    4 Psi + 12 Psi/N (gradients too; plus the buckets in flight)
//   zero=3   16 Psi/N          (parameters too; plus the gather units whole at the time)
//
// Per spec, after --warmup updates (the optimizer's state exists from the first), one
// update is measured on every rank: the bytes of the optimizer's state (the shard's under
// ZeRO), the whole gradients the parameters still hold after the update, the peak of the
// device's block cache during the update (memory_stats: everything the rank allocated,
// activations included), what stays in use after it and, at stage 3, the most gather units
// whole at once during it. Rank 0 prints one row per spec, the largest figure over the ranks.
// A pipeline's spec (`pp=2,dp=2` against `pp=2,dp=2,zero=1`, its stages' optimizer state
// sharded over their replicas) is measured per rank too: its formula is the one above for
// the largest stage's parameters, N its replicas.
// At stage 3 "params MB" is the model's size (the parameters' logical bytes), not what is
// allocated for them.
//
//   mpirun -np 2 bench_zero_memory --model mlp_50m --batch 256 --specs dp,zero=1,zero=2,zero=3 [--json]
//   mpirun -np 4 bench_zero_memory --model mlp_50m --batch 256 --spec pp=2,dp=2 --spec pp=2,dp=2,zero=1
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/dist/zero/zero_strategy.h"
#include "dtrain/optim/adam.h"
#include "dtrain/tensor/memory_stats.h"

#include "bench_machine.h"
#include "bench_models.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

using namespace dtrain;

namespace {

struct Config {
  std::string model = "mlp_50m";
  std::int64_t batch = 256;  // global, split over the ranks
  std::vector<std::string> specs{"dp", "zero=1", "zero=2", "zero=3"};
  int warmup = 1;
  bool json = false;
  bool show_loss = false;  // rank 0 prints every update's loss and time
};

std::size_t state_bytes(const optim::Optimizer& o) {
  std::size_t bytes = 0;
  for (const auto& [key, t] : o.state_view()) {
    if (key != "lr" && key != "steps" && key != "updates") bytes += t.nbytes();
  }
  return bytes;
}

struct Row {
  std::string spec;
  double params = 0, state = 0, grads = 0, peak = 0, in_use = 0;  // bytes, largest over the ranks
  double whole_units = 0;  // stage 3: the most gather units whole at once in the measured update
  double units = 0;        // stage 3: the gather units
  int replicas = 1;        // the data-parallel replicas (of each stage, for a pipeline)
};

Row measure(const Config& c, const std::string& spec, const dist::CommunicatorPtr& world) {
  manual_seed(1);
  bench::BenchModel m = bench::bench_model(c.model);
  const std::string full = world->size() == 1 && spec == "dp" ? "local" : spec;
  auto strategy = dist::make_strategy(full, world, Device::cpu());
  auto model = strategy->prepare(m.model);
  optim::Adam adam(model->parameters(), {.lr = 1e-4});
  const int replicas = strategy->data_shard().count;
  const auto [x, y] = bench::synthetic_batch(m, c.batch / replicas, 7 + static_cast<std::uint64_t>(world->rank()));
  const dist::StepConfig config{.loss = [](const Variable& out, const Tensor& t) { return cross_entropy(out, t); }};
  const std::vector<dist::MicroBatch> micro{{x, y}};
  auto* sharded = dynamic_cast<dist::ZeroStrategy*>(strategy.get());
  auto* pipeline = dynamic_cast<dist::PipelineStrategy*>(strategy.get());
  int update = 0;
  const auto step = [&] {
    const auto start = std::chrono::steady_clock::now();
    const Tensor loss = strategy->train_step(micro, adam, config).loss;  // a pipeline's last stage has it
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (c.show_loss && strategy->reports()) {
      fmt::print("{} update {}: loss {:.6f} (the reporting rank's batch), {:.1f} s\n", spec, ++update, loss.item(),
                 seconds);
      std::fflush(stdout);
    }
  };
  for (int i = 0; i < c.warmup; ++i) step();
  if (sharded != nullptr) sharded->take_peak_whole_units();
  reset_peak_memory(Device::cpu());
  step();
  const MemoryStats after = memory_stats(Device::cpu());

  const optim::Optimizer& stepped = sharded != nullptr ? *sharded->shard_optimizer()
                                    : pipeline != nullptr && pipeline->shard_optimizer() != nullptr
                                        ? *pipeline->shard_optimizer()
                                        : adam;
  std::vector<double> v{0,
                        static_cast<double>(state_bytes(stepped)),
                        0,
                        static_cast<double>(after.peak_bytes),
                        static_cast<double>(after.in_use_bytes),
                        sharded != nullptr ? static_cast<double>(sharded->take_peak_whole_units()) : 0,
                        sharded != nullptr ? static_cast<double>(sharded->gather_units()) : 0};
  for (const Variable& p : model->parameters()) {
    v[0] += static_cast<double>(p.data().nbytes());
    if (p.has_grad()) v[2] += static_cast<double>(p.grad().nbytes());
  }
  Tensor t = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())});
  world->all_reduce(t, ReduceOp::Max);
  const std::vector<double> w = t.to_vector<double>();
  return {spec, w[0], w[1], w[2], w[3], w[4], w[5], w[6], replicas};
}

// The ZeRO paper's bytes per rank for f32 Adam, from the parameter bytes and the replicas.
double formula(const std::string& spec, double param_bytes, int replicas) {
  const double psi = param_bytes / 4, n = replicas;
  if (spec.find("zero=1") != std::string::npos) return 8 * psi + 8 * psi / n;
  if (spec.find("zero=2") != std::string::npos) return 4 * psi + 12 * psi / n;
  if (spec.find("zero=3") != std::string::npos) return 16 * psi / n;
  return 16 * psi;
}

}  // namespace

namespace {
int run(const Config& c, const dist::CommunicatorPtr& world);
}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"What one rank holds under data parallelism and ZeRO stages (Adam, f32)"};
  app.add_option("--model", c.model, "a bench model (bench_models.h)")
      ->check(CLI::IsMember(bench::bench_model_names()));
  app.add_option("--batch", c.batch, "global batch, split over the ranks")->check(CLI::PositiveNumber);
  auto* specs =
      app.add_option("--specs", c.specs, "strategy specs to compare (dtrain/dist/strategy/strategy_factory.h)")
          ->delimiter(',');
  std::vector<std::string> whole_specs;
  app.add_option("--spec", whole_specs, "one strategy spec, commas included (repeatable; instead of --specs)")
      ->excludes(specs);
  app.add_option("--warmup", c.warmup, "updates before the measured one (>= 1: Adam's state exists from the first)")
      ->check(CLI::Range(1, 100));
  app.add_flag("--json", c.json, "one JSON line per spec instead of the table");
  app.add_flag("--show-loss", c.show_loss, "print every update's loss and time (rank 0)");
  CLI11_PARSE(app, argc, argv);
  if (!whole_specs.empty()) c.specs = whole_specs;
  // An error (out of memory, say) is reported by the rank that met it, and ends the job.
  return dist::run_program("bench_zero_memory", [&](const dist::CommunicatorPtr& world) { return run(c, world); });
}

namespace {

int run(const Config& c, const dist::CommunicatorPtr& world) {
  DTRAIN_CHECK(c.batch % world->size() == 0, "bench_zero_memory: --batch {} is not a multiple of the {} ranks", c.batch,
               world->size());  // a pipeline's replicas divide the ranks: their count divides the batch too
  std::vector<Row> rows;
  for (const std::string& spec : c.specs) rows.push_back(measure(c, spec, world));
  if (world->rank() != 0) return 0;

  constexpr double kMB = 1e6;
  const double dp_state = rows.front().state;
  if (!c.json) {
    fmt::print("{}, Adam f32, global batch {}, {} rank(s), {}\n", c.model, c.batch, world->size(), bench::cpu_model());
    fmt::print("{:<18} {:>10} {:>12} {:>8} {:>12} {:>12} {:>12} {:>14} {:>12}\n", "spec", "params MB", "opt state MB",
               "vs first", "grads MB", "peak MB", "in use MB", "ZeRO formula MB", "whole units");
  }
  for (const Row& r : rows) {
    const double f = formula(r.spec, r.params, r.replicas);
    if (c.json) {
      fmt::print("{}\n", nlohmann::json{{"bench", "zero_memory"},
                                        {"model", c.model},
                                        {"spec", r.spec},
                                        {"ranks", world->size()},
                                        {"replicas", r.replicas},
                                        {"batch", c.batch},
                                        {"param_bytes", r.params},
                                        {"optimizer_state_bytes", r.state},
                                        {"state_vs_first", r.state / dp_state},
                                        {"gradient_bytes_held", r.grads},
                                        {"peak_step_bytes", r.peak},
                                        {"in_use_bytes", r.in_use},
                                        {"zero_formula_bytes", f},
                                        {"whole_units_peak", r.whole_units},
                                        {"gather_units", r.units}}
                             .dump());
    } else {
      const std::string units = r.units > 0 ? fmt::format("{:.0f} of {:.0f}", r.whole_units, r.units) : "-";
      fmt::print("{:<18} {:>10.1f} {:>12.1f} {:>8.3f} {:>12.1f} {:>12.1f} {:>12.1f} {:>14.1f} {:>12}\n", r.spec,
                 r.params / kMB, r.state / kMB, r.state / dp_state, r.grads / kMB, r.peak / kMB, r.in_use / kMB,
                 f / kMB, units);
    }
  }
  return 0;
}

}  // namespace
