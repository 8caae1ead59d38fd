// bench_pipeline: what pipeline model parallelism gains and costs. A model (an MLP or the
// LeNet-style CNN) is cut into K stages, one per rank (K = the world's size), and trains
// on one fixed synthetic batch under each schedule (GPipe, 1F1B, interleaved 1F1B with 2
// chunks per rank, the zero-bubble ZB-H1 and ZB-V) and micro-batch count M. Per case:
//   step time    the slowest rank's, median and spread after the warm-up;
//                samples/s = batch / median
//   bubble       each stage's idle share of its step, 1 - compute / step
//                (PipelineStrategy::last_timing: waiting for messages and the optimizer
//                step count as idle), its median over the steps; reported as the mean and
//                the max over the stages next to the theory: simulated_bubble of the
//                schedule with each virtual stage's (chunk's) measured F, B and W times per
//                pass (medians over the steps; B and W together where the schedule does not
//                split them); the JSON also has the theory with equal pass times, each
//                stage's and each virtual stage's pass times and each stage's share spent
//                waiting for messages
//   activations  each stage's peak allocator use during a step above its use just before
//                the step (parameters, gradients, momentum): the allocator's high-water
//                mark (memory_stats.h), the max over the measured steps
// With one rank it measures the unpipelined step instead, "schedule none" (LocalStrategy:
// zero_grad, forward, cross-entropy, backward, SGD step on the whole batch), the reference
// for the pipeline's throughput.
//
//   mpirun -np 2 bench_pipeline --model mlp --micro-batches 1,2,4,8,16 --schedules gpipe,1f1b [--json]
//   bench_pipeline --model mlp [--json]                       # the one-process reference
//
// Every rank builds the same model (seed 1) and trains on the same batch (each stage of a
// replica reads the replica's data, as under the Trainer). The first step of each case
// must reproduce the unpipelined model's loss on that batch, or the bench fails.
#include "dtrain/autograd/functions.h"
#include "dtrain/core/parallel.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/optim/sgd.h"
#include "dtrain/tensor/memory_stats.h"

#include "bench_models.h"
#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>

namespace {

using namespace dtrain;
using bench::round4;
using bench::stats;
using bench::Stats;

struct Config {
  std::string model = "mlp";
  std::vector<std::int64_t> hidden{512, 512, 512, 512};
  std::int64_t batch = 0;  // 0: 256 for mlp, 64 for cnn
  std::vector<int> micro_batches{1, 2, 4, 8, 16};
  std::vector<std::string> schedules{"gpipe", "1f1b", "interleaved"};
  std::vector<int> cuts;  // empty: balanced by parameter count
  int threads = 1;
  int steps = 20;
  int warmup = 3;
  bool json = false;
};

constexpr int kInterleavedChunks = 2;  // V of the interleaved cases
// The pipelined first step's loss against the unpipelined model's: only the order of the
// micro-batch sums differs.
constexpr double kLossRtol = 1e-4;

bench::BenchModel build_model(const Config& c) {
  if (c.model == "mlp") return {nn::mlp(28 * 28, c.hidden, 10), {1, 28, 28}, 10};
  return {nn::lenet_cnn(1, 10), {1, 28, 28}, 10};
}

std::string model_name(const Config& c) {
  return c.model == "mlp" ? fmt::format("mlp 784-{}-10", fmt::join(c.hidden, "-")) : "cnn (LeNet-style)";
}

struct Result {
  std::string schedule = "none";
  int stages = 1, virtual_stages = 1, micro_batches = 1;
  std::vector<double> seconds = {};          // per measured step, the slowest rank's
  std::vector<double> bubble = {};           // per stage: median idle share (pipelines only)
  std::vector<double> wait = {};             // per stage: median share of the step spent waiting for messages
  std::vector<double> peak_activation = {};  // per stage, bytes
  std::vector<int> cuts = {};
  std::vector<dist::PassTimes> pass_ms = {};           // per stage: median F, B, W time of one pass
  std::vector<dist::PassTimes> virtual_stage_ms = {};  // the same per virtual stage (chunk), for the theory
};

// One step's allocator peak above what was in use just before it, in bytes. The gradients
// of the step before are still held when it starts (train_step drops them first and
// builds new ones in backward), so they are not counted as activations; hence the warm-up
// of at least one step.
template <class StepFn>
double step_with_peak(StepFn&& step, double& seconds) {
  reset_peak_memory(Device::cpu());
  const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
  const auto start = std::chrono::steady_clock::now();
  step();
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(memory_stats(Device::cpu()).peak_bytes - before);
}

// Every rank's `mine`, in rank order.
std::vector<double> gather(dist::Communicator& comm, double mine) {
  Tensor in = Tensor::full({1}, mine, {DType::f64});
  Tensor out = Tensor::empty({comm.size(), 1}, {DType::f64});
  comm.all_gather(in, out);
  return out.to_vector<double>();
}

// `seconds` replaced by the slowest rank's time for each step.
void slowest_rank(dist::Communicator& comm, std::vector<double>& seconds) {
  Tensor all = Tensor::from_vector<double>(seconds, {static_cast<std::int64_t>(seconds.size())});
  comm.all_reduce(all, dist::ReduceOp::Max);
  seconds = all.to_vector<double>();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

const dist::StepConfig kStepConfig{.loss = [](const Variable& out, const Tensor& y) { return cross_entropy(out, y); }};

// The unpipelined model in this process.
Result run_single(const Config& c, const dist::MicroBatch& batch) {
  manual_seed(1);
  dist::LocalStrategy strategy;
  auto model = strategy.prepare(build_model(c).model);
  optim::SGD sgd(model->parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  Result r;
  double peak = 0;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    double s = 0;
    const double p = step_with_peak([&] { strategy.train_step(std::span(&batch, 1), sgd, kStepConfig); }, s);
    if (i < c.warmup) continue;
    r.seconds.push_back(s);
    peak = std::max(peak, p);
  }
  r.peak_activation = {peak};
  return r;
}

// Why `schedule` with M micro-batches cannot run here, or nothing when it can. The same
// on every rank.
std::optional<std::string> skip_reason(const Config& c, int K, dist::PipelineSchedule schedule, int M, int V,
                                       int parameter_layers) {
  if (c.batch % M != 0) return fmt::format("batch {} is not a multiple of {} micro-batches", c.batch, M);
  if (!c.cuts.empty() && static_cast<int>(c.cuts.size()) != K * V - 1) {
    return fmt::format("--cuts gives {} cut(s), {} stages x {} chunks need {}", c.cuts.size(), K, V, K * V - 1);
  }
  if (schedule == dist::PipelineSchedule::Interleaved && M % K != 0) {
    return fmt::format("interleaved needs micro-batches a multiple of the {} stages", K);
  }
  if (parameter_layers < K * V) {
    return fmt::format("{}: {} stages x {} chunks need at least {} layers with parameters, the model has {}",
                       dist::schedule_name(schedule), K, V, K * V, parameter_layers);
  }
  return std::nullopt;
}

Result run_pipeline(const Config& c, const dist::CommunicatorPtr& comm, dist::PipelineSchedule schedule, int M, int V,
                    const dist::MicroBatch& batch, double reference_loss) {
  const int K = comm->size();
  manual_seed(1);  // the same model on every rank and in every case
  auto strategy = std::make_shared<dist::PipelineStrategy>(
      comm, Device::cpu(),
      dist::PipelineOptions{
          .stages = K, .micro_batches = M, .schedule = schedule, .virtual_stages = V, .cuts = c.cuts});
  auto stage = strategy->prepare(build_model(c).model);
  optim::SGD sgd(stage->parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  Result r{.schedule = dist::schedule_name(schedule), .stages = K, .virtual_stages = V, .micro_batches = M};
  r.cuts = strategy->cuts();
  std::vector<double> bubble, wait, forward_ms, backward_ms, weight_ms;
  std::vector<std::vector<double>> chunk_ms(static_cast<std::size_t>(3 * V));  // [3v + kind][step]
  const double passes = static_cast<double>(M) * V;
  double peak = 0;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    comm->barrier();  // every stage starts the step together
    double s = 0;
    dist::StepStats st;
    const double p = step_with_peak([&] { st = strategy->train_step(std::span(&batch, 1), sgd, kStepConfig); }, s);
    if (i == 0 && strategy->reports()) {
      const double loss = st.loss.item();
      DTRAIN_CHECK(std::abs(loss - reference_loss) <= kLossRtol * std::abs(reference_loss),
                   "bench_pipeline: {} with {} micro-batches: the first step's loss {:.7g} differs from the "
                   "unpipelined model's {:.7g} (relative tolerance {:g})",
                   r.schedule, M, loss, reference_loss, kLossRtol);
    }
    if (i < c.warmup) continue;
    r.seconds.push_back(s);
    const dist::PipelineStrategy::Timing t = strategy->last_timing();
    bubble.push_back(1 - t.compute_s / t.step_s);
    wait.push_back(t.wait_s / t.step_s);
    forward_ms.push_back(t.forward_s * 1e3 / passes);
    backward_ms.push_back(t.backward_s * 1e3 / passes);
    weight_ms.push_back(t.weight_s * 1e3 / passes);
    for (std::size_t v = 0; v < t.chunk_s.size(); ++v) {
      chunk_ms[3 * v].push_back(t.chunk_s[v].forward * 1e3 / M);
      chunk_ms[3 * v + 1].push_back(t.chunk_s[v].backward * 1e3 / M);
      chunk_ms[3 * v + 2].push_back(t.chunk_s[v].weight * 1e3 / M);
    }
    peak = std::max(peak, p);
  }
  slowest_rank(*comm, r.seconds);
  r.bubble = gather(*comm, median(bubble));
  r.wait = gather(*comm, median(wait));
  r.peak_activation = gather(*comm, peak);
  const std::vector<double> f = gather(*comm, median(forward_ms)), b = gather(*comm, median(backward_ms)),
                            w = gather(*comm, median(weight_ms));
  for (std::size_t s = 0; s < f.size(); ++s) r.pass_ms.push_back({f[s], b[s], w[s]});
  // Every rank's chunk medians, placed at their virtual stages.
  std::vector<double> medians;
  for (const std::vector<double>& m : chunk_ms) medians.push_back(median(m));
  Tensor mine = Tensor::from_vector<double>(medians, {3 * V});
  Tensor all = Tensor::empty({K, 3 * V}, {DType::f64});
  comm->all_gather(mine, all);
  const std::vector<double> flat = all.to_vector<double>();
  r.virtual_stage_ms.resize(static_cast<std::size_t>(K * V));
  for (int s = 0; s < K; ++s) {
    for (int v = 0; v < V; ++v) {
      const std::size_t at = static_cast<std::size_t>(3 * (s * V + v));
      r.virtual_stage_ms[static_cast<std::size_t>(dist::virtual_stage_of(schedule, {K, V, M}, s, v))] = {
          flat[at], flat[at + 1], flat[at + 2]};
    }
  }
  return r;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void print_header(const Config& c, int world) {
  if (c.json) {
    fmt::print("{}\n", nlohmann::ordered_json{{"bench", "pipeline"}, {"machine", bench::machine_description()}}.dump());
    return;
  }
  fmt::print("bench_pipeline: {}, batch {}, {} rank(s) x {} thread(s), {} steps after {} warm-up, cuts {}; {}\n",
             model_name(c), c.batch, world, num_threads(), c.steps, c.warmup,
             c.cuts.empty() ? "balanced by parameters" : fmt::format("[{}]", fmt::join(c.cuts, ",")),
             bench::machine_description());
  if (world == 1) fmt::print("one rank: the unpipelined step (run under mpirun -np K for the pipeline)\n");
  fmt::print(
      "bubble: idle share of each stage's step, mean and max over stages, theory: the schedule simulated\n"
      "with the measured pass times (F/B/W ms: stage 0's per pass);\n"
      "act MiB: peak allocator use during a step above its start, max over stages (each stage)\n");
  fmt::print("{:<12}{:>3}{:>3}{:>4}{:>10}{:>20}{:>11}{:>7}{:>7}{:>8}{:>9}  {}\n", "schedule", "K", "V", "M", "step ms",
             "[min - max]", "samples/s", "bubble", "max", "theory", "act MiB", "per stage; cuts; F/B/W ms");
}

void report(const Config& c, const Result& r) {
  const Stats s = stats(r.seconds);
  const double samples_per_s = static_cast<double>(c.batch) / (s.median_ms / 1e3);
  const bool pipelined = !r.bubble.empty();
  const dist::PipelineSchedule schedule = pipelined ? dist::parse_schedule(r.schedule) : dist::PipelineSchedule::GPipe;
  const dist::PipelineShape shape{r.stages, r.virtual_stages, r.micro_batches};
  const double theory = pipelined ? dist::simulated_bubble(schedule, shape, r.virtual_stage_ms) : 0.0;
  if (c.json) {
    nlohmann::ordered_json j = {{"bench", "pipeline"},
                                {"impl", "dtrain"},
                                {"model", c.model},
                                {"stages", r.stages},
                                {"virtual_stages", r.virtual_stages},
                                {"micro_batches", r.micro_batches},
                                {"schedule", r.schedule},
                                {"batch", c.batch},
                                {"threads", num_threads()},
                                {"steps", c.steps},
                                {"step_ms_median", s.median_ms},
                                {"step_ms_min", s.min_ms},
                                {"step_ms_max", s.max_ms},
                                {"samples_per_s", round4(samples_per_s)}};
    if (pipelined) {
      auto rounded = [](std::vector<double> v) {
        for (double& x : v) x = round4(x);
        return v;
      };
      j["bubble_measured"] = round4(mean(r.bubble));
      j["bubble_max"] = round4(max_of(r.bubble));
      j["bubble_theory"] = round4(theory);
      j["bubble_theory_equal_passes"] = round4(dist::simulated_bubble(schedule, shape, {{1, 1, 1}}));
      auto times_json = [](const std::vector<dist::PassTimes>& all) {
        nlohmann::ordered_json times = nlohmann::ordered_json::array();
        for (const dist::PassTimes& t : all) {
          times.push_back({{"forward_ms", round4(t.forward)},
                           {"backward_ms", round4(t.backward)},
                           {"weight_ms", round4(t.weight)}});
        }
        return times;
      };
      j["pass_times_per_stage"] = times_json(r.pass_ms);
      j["pass_times_per_virtual_stage"] = times_json(r.virtual_stage_ms);
      j["bubble_per_stage"] = rounded(r.bubble);
      // The part of each stage's bubble spent waiting for messages; the rest is the
      // optimizer step and the step's bookkeeping.
      j["wait_per_stage"] = rounded(r.wait);
    }
    std::vector<std::int64_t> bytes;
    for (const double b : r.peak_activation) bytes.push_back(static_cast<std::int64_t>(b));
    j["peak_activation_bytes"] = bytes;
    j["cuts"] = r.cuts;
    fmt::print("{}\n", j.dump());
    std::fflush(stdout);
    return;
  }
  std::vector<std::string> mib;
  for (const double b : r.peak_activation) mib.push_back(fmt::format("{:.2f}", b / (1 << 20)));
  const std::string bubbles = pipelined
                                  ? fmt::format("{:>7.3f}{:>7.3f}{:>8.3f}", mean(r.bubble), max_of(r.bubble), theory)
                                  : fmt::format("{:>7}{:>7}{:>8}", "-", "-", "-");
  const std::string passes = pipelined ? fmt::format("; {:.2f}/{:.2f}/{:.2f}", r.pass_ms[0].forward,
                                                     r.pass_ms[0].backward, r.pass_ms[0].weight)
                                       : "";
  fmt::print("{:<12}{:>3}{:>3}{:>4}{:>10.2f}{:>20}{:>11.1f}{}{:>9.2f}  {}; [{}]{}\n", r.schedule, r.stages,
             r.virtual_stages, r.micro_batches, s.median_ms, fmt::format("[{:.2f} - {:.2f}]", s.min_ms, s.max_ms),
             samples_per_s, bubbles, max_of(r.peak_activation) / (1 << 20), fmt::join(mib, " "), fmt::join(r.cuts, ","),
             passes);
  std::fflush(stdout);
}

int run(Config c, const dist::CommunicatorPtr& comm) {
  set_num_threads(c.threads);
  if (c.batch == 0) c.batch = c.model == "mlp" ? 256 : 64;
  const int K = comm->size();
  const bool root = comm->rank() == 0;
  if (root) print_header(c, K);

  bench::BenchModel m = build_model(c);
  const auto [x, y] = bench::synthetic_batch(m, c.batch, 100);  // the same on every rank
  const dist::MicroBatch batch{x, y};
  if (K == 1) {
    report(c, run_single(c, batch));
    return 0;
  }

  // The loss every pipelined case's first step must reproduce: the seeded model's, whole.
  manual_seed(1);
  m = build_model(c);
  double reference_loss = 0;
  {
    NoGradGuard no_grad;
    reference_loss = cross_entropy(m.model->forward(Variable(x)), y).data().item();
  }
  int parameter_layers = 0;
  for (const auto& [name, layer] : m.model->children()) parameter_layers += layer->num_parameters() > 0 ? 1 : 0;
  m.model.reset();

  for (const std::string& name : c.schedules) {
    const dist::PipelineSchedule schedule = dist::parse_schedule(name);
    const int V =
        schedule == dist::PipelineSchedule::Interleaved ? kInterleavedChunks : dist::fixed_virtual_stages(schedule);
    for (const int M : c.micro_batches) {
      if (auto why = skip_reason(c, K, schedule, M, V, parameter_layers)) {
        if (root) fmt::print(c.json ? stderr : stdout, "{:<12}{:>3}{:>3}{:>4}  skipped: {}\n", name, K, V, M, *why);
        continue;
      }
      const Result r = run_pipeline(c, comm, schedule, M, V, batch, reference_loss);
      if (root) report(c, r);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pipeline-parallel step time, bubble and peak activation memory per schedule, on synthetic data",
               "bench_pipeline"};
  Config config;
  app.add_option("--model", config.model, "mlp (784, --hidden, 10) or cnn (LeNet-style)")
      ->check(CLI::IsMember({"mlp", "cnn"}))
      ->capture_default_str();
  app.add_option("--hidden", config.hidden, "the mlp's hidden widths, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--batch", config.batch, "samples per step, all micro-batches together (default 256 mlp, 64 cnn)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--micro-batches", config.micro_batches, "micro-batches per step; a comma-separated list runs each")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--schedules", config.schedules,
                 "gpipe, 1f1b, interleaved (2 chunks per rank), zb-h1, zb-v (2 chunks per rank), comma-separated; "
                 "each runs every --micro-batches")
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"}))
      ->capture_default_str();
  app.add_option("--cuts", config.cuts,
                 "layer indices where stages (chunks) begin, stages x chunks - 1 of them; cases with another count are "
                 "skipped (default: balanced by parameter count)")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--threads", config.threads, "intra-op threads per rank")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--steps", config.steps, "measured steps of each case")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", config.warmup,
                 "unmeasured steps of each case first (at least 1: a measured step starts with gradients held)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_flag("--json", config.json, "print JSON lines (the machine, then one per case) instead of a table");
  CLI11_PARSE(app, argc, argv);
  return dist::run_program("bench_pipeline", [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
