// bench_scaling: weak and strong scaling of training over 1..N ranks, per strategy
// (data parallel, sharded data parallel stages 1 and 2, pipeline, parameter server sync and
// async), as the Trainer runs it on
// synthetic data held in memory. One job measures every rank count: for a count n the
// first n ranks of the world train (the others wait in a barrier, asleep) and then the next
// count starts.
//
//   weak     each worker keeps --batch samples per update, so the global batch grows
//            with the workers (a pipeline's batch with its stages)
//   strong   the global batch stays --global-batch, split over the workers
//
// Per case, after --warmup updates, --steps updates are timed on every training rank
// (wall time between successive updates' ends) and split by the Trainer's phase totals
// (core/trace.h) into compute (forward, backward, optimizer), exposed communication (the
// training thread waiting for messages) and data wait; each figure is the median over the
// steps, taken from the rank with the most compute (the step: the longest of any rank).
// samples/s = global samples per update / median
// step; efficiency = samples/s over (ranks x the 1-rank samples/s of the same mode), with
// the one rank training the whole model locally. For data parallelism one traced update
// also gives the gradient buckets (bytes, and when each was ready after backward began),
// which the cost model (bench/model/) replays; every rank's compute is listed too (a
// pipeline's stages in order, for its fill and drain).
//
//   mpirun -np 4 --oversubscribe bench_scaling --strategies data_parallel,pipeline,ps_sync,ps_async
//       --modes weak,strong --model cnn --ranks 1,2,4 [--json]
//
// Rows with more ranks than hardware threads are marked oversubscribed: there the ranks
// share cores, so compute itself slows, which the compute column shows.
#include "dtrain/core/environment.h"
#include "dtrain/core/parallel.h"
#include "dtrain/core/trace.h"
#include "dtrain/data/tensor_dataset.h"
#include "dtrain/dist/strategy/strategy_factory.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/train/trainer.h"

#include "bench_models.h"
#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

namespace {

using namespace dtrain;
using Clock = std::chrono::steady_clock;

struct Config {
  std::vector<std::string> strategies{"data_parallel", "pipeline", "ps_sync", "ps_async"};
  std::vector<std::string> modes{"weak", "strong"};
  std::string model = "cnn";
  std::int64_t batch = 64;          // weak: per worker
  std::int64_t global_batch = 240;  // strong: over all workers
  std::vector<int> ranks;           // default: 1, 2, 4, ... up to the world, and the world
  int steps = 20;
  int warmup = 3;
  int micro_batches = 4;  // pipeline
  int threads = 0;
  bool json = false;
};

struct Bucket {
  std::int64_t bytes = 0;
  double ready_ms = 0;  // after backward began
};

// One case's figures on this rank (medians over the timed steps, milliseconds).
struct Figures {
  double step = 0, step_min = 0, step_max = 0, compute = 0, comm = 0, data = 0, forward = 0, backward = 0,
         optimizer = 0;
  std::vector<double> rank_compute;  // every rank's compute (ms), in rank order: a pipeline's stages
};

struct Case {
  std::string strategy, mode;
  int ranks = 1;
  int workers() const { return strategy.starts_with("ps_") && ranks > 1 ? ranks - 1 : ranks; }
};

// Samples in one update of the whole job, and what each worker takes.
std::int64_t global_batch(const Config& c, const Case& k) {
  if (k.mode == "strong") return c.global_batch;
  return c.batch * (k.strategy == "pipeline" ? k.ranks : k.workers());
}
std::int64_t worker_batch(const Config& c, const Case& k) {
  return k.strategy == "pipeline" ? global_batch(c, k) : global_batch(c, k) / k.workers();
}

// The case's strategy through the factory the trainers use (dtrain/dist/strategy/strategy_factory.h).
std::shared_ptr<dist::Strategy> make_strategy(const Config& c, const Case& k, const dist::CommunicatorPtr& comm) {
  std::string spec = "local";
  if (k.ranks > 1 && k.strategy == "data_parallel") spec = "dp";
  if (k.ranks > 1 && k.strategy.starts_with("zero")) spec = "zero=" + k.strategy.substr(4);
  if (k.ranks > 1 && k.strategy == "pipeline") spec = fmt::format("pp={},micro={}", k.ranks, c.micro_batches);
  if (k.ranks > 1 && k.strategy.starts_with("ps_"))
    spec = k.strategy == "ps_sync" ? "ps=1,mode=sync" : "ps=1,mode=async";
  return dist::make_strategy(spec, comm, Device::cpu());
}

// Buckets from the events of one traced update: the "bucket k ready" instants after the
// "backward" span's start, and the all-reduces' sizes in launch order.
std::vector<Bucket> buckets_from_trace(const std::string& events) {
  const auto all = nlohmann::json::parse("[" + events + "]");
  double backward_us = -1;
  std::vector<double> ready;
  std::vector<std::pair<double, std::int64_t>> reduces;
  for (const auto& e : all) {
    const std::string name = e.value("name", "");
    if (name == "backward" && backward_us < 0) backward_us = e.at("ts").get<double>();
    if (name.starts_with("bucket ")) ready.push_back(e.at("ts").get<double>());
    if (name == "all_reduce" && e.contains("args")) {
      reduces.emplace_back(e.at("ts").get<double>(), e.at("args").value("bytes", std::int64_t{0}));
    }
  }
  std::sort(reduces.begin(), reduces.end());
  std::vector<Bucket> out;
  for (std::size_t i = 0; i < ready.size() && i < reduces.size(); ++i) {
    out.push_back({reduces[i].second, backward_us >= 0 ? (ready[i] - backward_us) / 1e3 : 0});
  }
  return out;
}

double median_of(std::vector<double> v) { return v.empty() ? 0 : bench::stats(v).median_ms / 1e3; }

// Trains one case on `comm` (its ranks); returns this rank's figures (zeros on a server)
// and, for data parallelism, the buckets of one traced update.
Figures run_case(const Config& c, const Case& k, const dist::CommunicatorPtr& comm, std::vector<Bucket>& buckets,
                 std::int64_t& param_bytes) {
  manual_seed(1);  // the same initial model on every rank
  bench::BenchModel m = bench::bench_model(c.model);
  param_bytes = 0;
  for (const Variable& p : m.model->parameters()) param_bytes += static_cast<std::int64_t>(p.data().nbytes());
  auto strategy = make_strategy(c, k, comm);
  auto model = strategy->prepare(m.model);
  optim::SGD sgd(model->parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9});

  // Enough samples for warmup + steps updates of every worker, never read from disk.
  const std::int64_t per_update = global_batch(c, k);
  const auto [x, y] = bench::synthetic_batch(m, per_update * (c.warmup + c.steps), 7);
  auto data = std::make_shared<data::TensorDataset>(x, y);
  const std::int64_t trainer_batch = strategy->capabilities().dispenser ? worker_batch(c, k) : per_update;
  train::Trainer trainer(strategy, {.train = data, .batch_size = trainer_batch, .seed = 1}, {.verbose = false});

  std::vector<double> step, compute, comm_s, data_s, forward, backward, optimizer;
  int seen = 0;
  auto last = Clock::now();
  trace::PhaseTotals last_totals = trace::thread_totals();
  const bool trace_buckets = k.strategy == "data_parallel" && k.ranks > 1;
  Clock::time_point traced_from;  // every event of the traced update comes after it
  trainer.on_step_end([&](const train::StepEvent&) {
    const auto now = Clock::now();
    const trace::PhaseTotals totals = trace::thread_totals();
    const trace::PhaseTotals d = totals - last_totals;
    if (seen >= c.warmup) {
      step.push_back(std::chrono::duration<double>(now - last).count());
      compute.push_back(d.compute());
      comm_s.push_back(d[trace::Phase::Communication]);
      data_s.push_back(d[trace::Phase::Data]);
      forward.push_back(d[trace::Phase::Forward]);
      backward.push_back(d[trace::Phase::Backward]);
      optimizer.push_back(d[trace::Phase::Optimizer]);
    }
    if (trace_buckets && seen == c.warmup) {  // the next update
      trace::start_recording();
      traced_from = Clock::now();
    }
    if (trace_buckets && seen == c.warmup + 1) trace::stop_recording();
    ++seen;
    last = Clock::now();
    last_totals = trace::thread_totals();
  });
  trainer.fit(sgd);
  if (trace_buckets) buckets = buckets_from_trace(trace::chrome_events(comm->rank(), traced_from));

  Figures f;
  if (!step.empty()) {
    const bench::Stats s = bench::stats(step);
    f = {s.median_ms,
         s.min_ms,
         s.max_ms,
         1e3 * median_of(compute),
         1e3 * median_of(comm_s),
         1e3 * median_of(data_s),
         1e3 * median_of(forward),
         1e3 * median_of(backward),
         1e3 * median_of(optimizer),
         {}};
  }
  // One rank's figures, so that they add up: the rank with the most compute (the slowest
  // stage of a pipeline, the busiest replica), with the longest median step of all ranks.
  constexpr std::int64_t kFields = 9;
  Tensor all = Tensor::zeros({comm->size(), kFields}, {DType::f64});
  const double mine[kFields] = {f.step, f.step_min, f.step_max, f.compute,  f.comm,
                                f.data, f.forward,  f.backward, f.optimizer};
  std::copy(mine, mine + kFields, all.data<double>() + comm->rank() * kFields);
  comm->all_reduce(all, dist::ReduceOp::Sum);
  const std::vector<double> v = all.to_vector<double>();
  std::int64_t busiest = 0;
  double longest = 0;
  for (std::int64_t r = 0; r < comm->size(); ++r) {
    if (v[r * kFields + 3] > v[busiest * kFields + 3]) busiest = r;
    longest = std::max(longest, v[r * kFields]);
  }
  const double* b = v.data() + busiest * kFields;
  Figures out{longest, b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], {}};
  for (std::int64_t r = 0; r < comm->size(); ++r) out.rank_compute.push_back(bench::round4(v[r * kFields + 3]));
  return out;
}

void print_header(const Config& c, int world) {
  if (c.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "scaling"}, {"machine", bench::machine_description()}}.dump());
    return;
  }
  fmt::print(
      "bench_scaling: {}, {} steps after {} warm-up, weak batch {} per worker, strong global batch {}, up to {} "
      "rank(s) x {} thread(s); {}\n",
      c.model, c.steps, c.warmup, c.batch, c.global_batch, world, num_threads(), bench::machine_description());
  fmt::print("{:<14}{:<7}{:>6}{:>8}{:>10}{:>11}{:>10}{:>12}{:>11}{:>9}{:>8}\n", "strategy", "mode", "ranks", "batch",
             "step ms", "samples/s", "effic.", "compute ms", "exp. comm", "share", "note");
}

void report(const Config& c, const Case& k, const Figures& f, double baseline, const std::vector<Bucket>& buckets,
            std::int64_t param_bytes) {
  const std::int64_t g = global_batch(c, k);
  const double samples_per_s = f.step > 0 ? static_cast<double>(g) / (f.step / 1e3) : 0;
  const double efficiency = baseline > 0 ? samples_per_s / (k.ranks * baseline) : 0;
  const bool oversubscribed = k.ranks > static_cast<int>(std::thread::hardware_concurrency());
  const double share = f.step > 0 ? f.comm / f.step : 0;
  if (!c.json) {
    fmt::print("{:<14}{:<7}{:>6}{:>8}{:>10.2f}{:>11.1f}{:>10.3f}{:>12.2f}{:>11.2f}{:>9.3f}{:>8}\n", k.strategy, k.mode,
               k.ranks, g, f.step, samples_per_s, efficiency, f.compute, f.comm, share,
               oversubscribed ? "oversub" : "");
    std::fflush(stdout);
    return;
  }
  nlohmann::ordered_json j = {{"bench", "scaling"},
                              {"strategy", k.strategy},
                              {"mode", k.mode},
                              {"model", c.model},
                              {"ranks", k.ranks},
                              {"workers", k.workers()},
                              {"batch_per_worker", worker_batch(c, k)},
                              {"global_batch", g},
                              {"threads", num_threads()},
                              {"steps", c.steps},
                              {"cores", std::thread::hardware_concurrency()},
                              {"oversubscribed", oversubscribed},
                              {"step_ms_median", bench::round4(f.step)},
                              {"step_ms_min", bench::round4(f.step_min)},
                              {"step_ms_max", bench::round4(f.step_max)},
                              {"samples_per_s", bench::round4(samples_per_s)},
                              {"efficiency", bench::round4(efficiency)},
                              {"compute_ms_median", bench::round4(f.compute)},
                              {"exposed_comm_ms_median", bench::round4(f.comm)},
                              {"exposed_comm_share", bench::round4(share)},
                              {"data_wait_ms_median", bench::round4(f.data)},
                              {"forward_ms_median", bench::round4(f.forward)},
                              {"backward_ms_median", bench::round4(f.backward)},
                              {"optimizer_ms_median", bench::round4(f.optimizer)},
                              {"param_bytes", param_bytes},
                              {"rank_compute_ms", f.rank_compute}};
  if (k.strategy.starts_with("ps_") && k.ranks > 1) j["servers"] = 1;
  if (k.strategy == "pipeline") {
    j["stages"] = k.ranks;
    j["micro_batches"] = k.ranks > 1 ? c.micro_batches : 1;
  }
  if (!buckets.empty()) {
    auto list = nlohmann::ordered_json::array();
    for (const Bucket& b : buckets) list.push_back({{"bytes", b.bytes}, {"ready_ms", bench::round4(b.ready_ms)}});
    j["buckets"] = list;
  }
  fmt::print("{}\n", j.dump());
  std::fflush(stdout);
}

int run(Config c, const dist::CommunicatorPtr& world) {
  if (c.threads > 0) set_num_threads(c.threads);
  if (c.ranks.empty()) {
    for (int n = 1; n < world->size(); n *= 2) c.ranks.push_back(n);
    c.ranks.push_back(world->size());
  }
  for (int n : c.ranks) {
    DTRAIN_CHECK(n >= 1 && n <= world->size(), "bench_scaling: --ranks {}: the job has {} rank(s) (mpirun -np)", n,
                 world->size());
  }
  if (world->rank() == 0) print_header(c, world->size());
  for (const std::string& strategy : c.strategies) {
    for (const std::string& mode : c.modes) {
      double baseline = 0;  // the 1-rank samples/s of this mode
      for (int n : c.ranks) {
        const Case k{strategy, mode, n};
        const bool active = world->rank() < n;
        auto comm = world->split(active ? 0 : 1, world->rank());
        Figures f;
        std::vector<Bucket> buckets;
        std::int64_t param_bytes = 0;
        if (active) f = run_case(c, k, comm, buckets, param_bytes);
        world->barrier();
        if (world->rank() != 0) continue;
        const double samples_per_s = f.step > 0 ? static_cast<double>(global_batch(c, k)) / (f.step / 1e3) : 0;
        if (n == 1) baseline = samples_per_s;
        report(c, k, f, baseline, buckets, param_bytes);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Weak and strong scaling of training over 1..N ranks per strategy, on synthetic data", "bench_scaling"};
  Config c;
  app.add_option("--strategies", c.strategies, "data_parallel, zero1, zero2 (sharded), pipeline, ps_sync, ps_async")
      ->delimiter(',')
      ->check(CLI::IsMember({"data_parallel", "zero1", "zero2", "pipeline", "ps_sync", "ps_async"}))
      ->capture_default_str();
  app.add_option("--modes", c.modes, "weak, strong")
      ->delimiter(',')
      ->check(CLI::IsMember({"weak", "strong"}))
      ->capture_default_str();
  app.add_option("--model", c.model, "mlp, cnn or resnet18_cifar")
      ->check(CLI::IsMember({"mlp", "cnn", "resnet18_cifar"}))
      ->capture_default_str();
  app.add_option("--batch", c.batch, "weak scaling: samples per worker per update")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--global-batch", c.global_batch, "strong scaling: samples per update over all workers")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--ranks", c.ranks, "rank counts to measure (default 1, 2, 4, ... and the job's size)")
      ->delimiter(',');
  app.add_option("--steps", c.steps, "timed updates per case")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed updates first")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--micro-batches", c.micro_batches, "pipeline micro-batches per update")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--threads", c.threads, "intra-op threads per rank (default: cores / local ranks)")
      ->check(CLI::Range(1, 1024));
  app.add_flag("--json", c.json, "print JSON lines (the machine, then one per case) instead of a table");
  CLI11_PARSE(app, argc, argv);
  return dist::run_program("bench_scaling", [&](const dist::CommunicatorPtr& comm) { return run(c, comm); });
}
