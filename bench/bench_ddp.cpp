// bench_ddp: what data-parallel communication costs. Three replicas of one model train
// side by side on synthetic data, each wrapped in its own DataParallel:
//   overlap     communicate, buckets all-reduced during backward (the default options)
//   no_comm     communicate = false: the same step with every all-reduce skipped
//   no_overlap  communicate, every bucket all-reduced after backward
//   KIND        with --exchanges KIND,...: overlapped, each bucket through that gradient
//               exchange (gradient_exchange.h: fp16, bf16, powersgd:R[:W]); a compression's
//               own compute is part of its step
// After the warm-up the cases take their steps in turn (overlap, no_comm, no_overlap, ...)
// so that all of them see the same machine load, and each step's time is the slowest
// rank's. A step is zero_grad + forward + cross-entropy + backward + finish_gradient_sync
// + SGD step (momentum 0.9). efficiency = median(no_comm) / median(overlap) (and the same
// per exchange), the figure PyTorch DDP's no_sync() peer (bench/peers/pytorch_ddp.py)
// reports too.
//
//   mpirun -np 2 bench_ddp --model cnn --batch 64 --steps 20 --threads 1 [--exchanges bf16,powersgd:4:0] [--json]
//
// Before timing, after the warm-up steps, the communicating replicas are checked to be
// identical on every rank (each rank trains on different data, so they agree only if the
// gradients were averaged).
#include "dtrain/core/environment.h"
#include "dtrain/core/parallel.h"
#include "dtrain/dist/data_parallel/data_parallel.h"
#include "dtrain/optim/sgd.h"

#include "bench_models.h"
#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace {

using namespace dtrain;
using bench::machine_description;
using bench::round4;
using bench::stats;
using bench::Stats;

struct Config {
  std::string model = "cnn";
  std::int64_t batch = 64;             // per rank
  int steps = 20;                      // measured steps of each case
  int warmup = 3;                      // unmeasured steps of each case first; the replicas are checked after them
  int threads = 0;                     // 0: dtrain's default (cores / local ranks)
  std::vector<std::string> exchanges;  // extra cases, one per gradient exchange kind
  double bucket_mb = 4;                // DataParallelOptions::bucket_bytes, in MiB, for every case
  bool json = false;
};

// Replicas that communicated must agree to this (identical bits are expected: every rank
// applies the same averaged gradient).
constexpr double kReplicaTolerance = 1e-5;

struct Case {
  Case(std::string l, dist::DataParallelOptions o) : label(std::move(l)), options(std::move(o)) {}
  std::string label;
  dist::DataParallelOptions options;
  std::unique_ptr<dist::DataParallel> ddp;
  std::unique_ptr<optim::SGD> optimizer;
  std::vector<double> seconds;
};

double timed_step(Case& c, const Variable& x, const Tensor& y) {
  const auto start = std::chrono::steady_clock::now();
  c.optimizer->zero_grad();
  Variable loss = cross_entropy(c.ddp->forward(x), y);
  loss.backward();
  c.ddp->finish_gradient_sync();
  c.optimizer->step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every rank's step times, replaced by the slowest rank's for each step.
void slowest_rank(std::vector<Case>& cases, dist::Communicator& comm) {
  const auto steps = static_cast<std::int64_t>(cases[0].seconds.size());
  Tensor all = Tensor::empty({static_cast<std::int64_t>(cases.size()), steps}, {DType::f64});
  for (std::size_t i = 0; i < cases.size(); ++i) {
    std::copy(cases[i].seconds.begin(), cases[i].seconds.end(), all.data<double>() + i * steps);
  }
  comm.all_reduce(all, dist::ReduceOp::Max);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const double* row = all.data<double>() + i * steps;
    cases[i].seconds.assign(row, row + steps);
  }
}

void report(const Config& c, int world, const std::vector<Case>& cases, double replica_diff) {
  const Stats overlap = stats(cases[0].seconds), no_comm = stats(cases[1].seconds),
              no_overlap = stats(cases[2].seconds);
  const double samples_per_s = static_cast<double>(world * c.batch) / (overlap.median_ms / 1e3);
  if (c.json) {
    nlohmann::ordered_json j = {{"bench", "ddp"},
                                {"framework", "dtrain"},
                                {"model", c.model},
                                {"ranks", world},
                                {"batch_per_rank", c.batch},
                                {"threads", num_threads()},
                                {"steps", c.steps},
                                {"bucket_mb", c.bucket_mb},
                                {"step_ms_median", overlap.median_ms},
                                {"step_ms_min", overlap.min_ms},
                                {"step_ms_max", overlap.max_ms},
                                {"step_ms_no_comm_median", no_comm.median_ms},
                                {"step_ms_no_comm_min", no_comm.min_ms},
                                {"step_ms_no_comm_max", no_comm.max_ms},
                                {"step_ms_no_overlap_median", no_overlap.median_ms},
                                {"step_ms_no_overlap_min", no_overlap.min_ms},
                                {"step_ms_no_overlap_max", no_overlap.max_ms},
                                {"efficiency", round4(no_comm.median_ms / overlap.median_ms)},
                                {"efficiency_no_overlap", round4(no_comm.median_ms / no_overlap.median_ms)},
                                {"samples_per_s", round4(samples_per_s)},
                                {"replica_max_diff", replica_diff}};
    for (std::size_t i = 3; i < cases.size(); ++i) {
      const Stats s = stats(cases[i].seconds);
      j["exchanges"].push_back({{"exchange", cases[i].label},
                                {"step_ms_median", s.median_ms},
                                {"step_ms_min", s.min_ms},
                                {"step_ms_max", s.max_ms},
                                {"efficiency", round4(no_comm.median_ms / s.median_ms)},
                                {"samples_per_s", round4(static_cast<double>(world * c.batch) / (s.median_ms / 1e3))},
                                {"speedup", round4(overlap.median_ms / s.median_ms)}});
    }
    // The machine first, in its own object, as every bench binary does.
    fmt::print("{}\n{}\n", nlohmann::ordered_json{{"bench", "ddp"}, {"machine", machine_description()}}.dump(),
               j.dump());
    return;
  }
  fmt::print("bench_ddp: {}, {} rank(s) x {} thread(s), batch {} per rank, {} steps after {} warm-up; {}\n", c.model,
             world, num_threads(), c.batch, c.steps, c.warmup, machine_description());
  fmt::print("{:<34}{:>11}{:>9}{:>9}{:>12}\n", "case", "median ms", "min ms", "max ms", "efficiency");
  for (const Case& k : cases) {
    const Stats s = stats(k.seconds);
    fmt::print("{:<34}{:>11.2f}{:>9.2f}{:>9.2f}{:>12.3f}\n", k.label, s.median_ms, s.min_ms, s.max_ms,
               no_comm.median_ms / s.median_ms);
  }
  fmt::print("efficiency {:.3f} (without overlap {:.3f}), {:.1f} samples/s (all ranks), replica max diff {:.3g}\n",
             no_comm.median_ms / overlap.median_ms, no_comm.median_ms / no_overlap.median_ms, samples_per_s,
             replica_diff);
}

int run(const Config& c, const dist::CommunicatorPtr& comm) {
  if (c.threads > 0) set_num_threads(c.threads);
  // overlap, no_comm, no_overlap (report() relies on these three first), then the exchanges.
  std::vector<Case> cases;
  const auto bucket_bytes = static_cast<std::size_t>(c.bucket_mb * (1 << 20));
  cases.emplace_back("all-reduce overlapped (default)", dist::DataParallelOptions{.bucket_bytes = bucket_bytes});
  cases.emplace_back("no communication", dist::DataParallelOptions{.bucket_bytes = bucket_bytes, .communicate = false});
  cases.emplace_back("all-reduce after backward",
                     dist::DataParallelOptions{.bucket_bytes = bucket_bytes, .overlap = false});
  for (const std::string& kind : c.exchanges) {
    cases.emplace_back("exchange " + kind,
                       dist::DataParallelOptions{.bucket_bytes = bucket_bytes, .gradient_exchange = kind});
  }
  bench::BenchModel m;
  for (Case& k : cases) {
    manual_seed(1);  // the same initial model in every case
    m = bench::bench_model(c.model);
    k.ddp = std::make_unique<dist::DataParallel>(m.model, comm, k.options);
    k.optimizer = std::make_unique<optim::SGD>(m.model->parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  }

  // One fixed batch per rank, different on each rank.
  const auto [x, y] = bench::synthetic_batch(m, c.batch, 100 + static_cast<std::uint64_t>(comm->rank()));
  const Variable input(x);

  for (int i = 0; i < c.warmup; ++i) {
    for (Case& k : cases) timed_step(k, input, y);
  }
  double replica_diff = 0;
  for (Case& k : cases) {
    if (k.options.communicate) replica_diff = std::max(replica_diff, k.ddp->check_replicas());
  }
  DTRAIN_CHECK(replica_diff <= kReplicaTolerance,
               "bench_ddp: replicas differ by {:g} across ranks after {} synchronized steps (tolerance {:g}): the "
               "gradients were not averaged",
               replica_diff, c.warmup, kReplicaTolerance);
  for (int i = 0; i < c.steps; ++i) {
    for (Case& k : cases) k.seconds.push_back(timed_step(k, input, y));
  }
  slowest_rank(cases, *comm);
  if (comm->rank() == 0) report(c, comm->size(), cases, replica_diff);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Data-parallel step time with and without gradient all-reduce, on synthetic data", "bench_ddp"};
  Config config;
  app.add_option("--model", config.model, "mlp, cnn, resnet20_cifar or resnet18_cifar")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet20_cifar", "resnet18_cifar"}))
      ->capture_default_str();
  app.add_option("--batch", config.batch, "samples per rank per step")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--steps", config.steps, "measured steps of each case")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", config.warmup, "unmeasured steps of each case first (the replicas are checked after them)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--threads", config.threads, "intra-op threads per rank (default: cores / local ranks)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--bucket-mb", config.bucket_mb, "gradient bucket size in MiB, for every case")
      ->check(CLI::Range(0.001, 4096.0))
      ->capture_default_str();
  app.add_option("--exchanges", config.exchanges,
                 "extra cases: gradient exchange kinds, comma-separated (fp16, bf16, powersgd:R[:W])")
      ->delimiter(',');
  app.add_flag("--json", config.json, "print JSON lines (the machine, then the result) instead of a table");
  CLI11_PARSE(app, argc, argv);
  return dist::run_program("bench_ddp", [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
