// Causal self-attention's core, forward and backward, as train_gpt runs it: q, k, v (B, T, H, D)
// memory seen as (B, H, T, D), through scaled_dot_product_attention, fused (the CPU's blocked
// kernels, fused_attention.h) or unfused (the products, mask and softmax as tensor ops, the
// (T, T) weights kept). Per case: the median time of --reps forward+backward passes after
// --warmup, the block cache's peak above the inputs (memory_stats.h) and the growth of the
// process's peak resident set (ru_maxrss, how bench/peers/pytorch_attention.py measures
// PyTorch's F.scaled_dot_product_attention; one case per process for that figure: a peak
// never falls). GPT-2's heads by default: 12 heads of 64, batch 1.
//   bench_attention [--case fused|unfused] [--seq T] [--heads H] [--head-dim D] [--batch B]
//                   [--threads N] [--reps R] [--warmup W]
#include "dtrain/autograd/attention.h"
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/fusion.h"
#include "dtrain/core/parallel.h"
#include "dtrain/tensor/memory_stats.h"

#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <chrono>

using namespace dtrain;

namespace {

struct Options {
  std::string which = "fused";
  std::int64_t seq = 1024, heads = 12, head_dim = 64, batch = 1;
  int threads = 1, reps = 3, warmup = 1;
};

double max_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // kilobytes on Linux
}

int run(const Options& o) {
  set_num_threads(o.threads);
  set_fused_kernels(o.which == "fused");
  Generator gen(1);
  const Shape shape{o.batch, o.seq, o.heads, o.head_dim};
  Tensor qd = Tensor::empty(shape), kd = Tensor::empty(shape), vd = Tensor::empty(shape), gd = Tensor::empty(shape);
  for (Tensor* t : {&qd, &kd, &vd, &gd}) normal_(*t, 0, 1, &gen);
  Variable q(qd, true), k(kd, true), v(vd, true);
  const Variable weights(gd.transpose(1, 2));
  const double rss_before = max_rss_mb();
  std::vector<double> seconds;
  std::size_t peak = 0;
  for (int rep = 0; rep < o.warmup + o.reps; ++rep) {
    for (Variable* x : {&q, &k, &v}) x->zero_grad();
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    reset_peak_memory(Device::cpu());
    const auto start = std::chrono::steady_clock::now();
    Variable out = scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2), transpose(v, 1, 2));
    sum(mul(out, weights)).backward();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    peak = std::max(peak, memory_stats(Device::cpu()).peak_bytes - before);
    if (rep >= o.warmup) seconds.push_back(took.count());
  }
  const bench::Stats s = bench::stats(seconds);
  fmt::print("{}\n", nlohmann::ordered_json{{"bench", "attention"},
                                            {"case", o.which},
                                            {"batch", o.batch},
                                            {"seq", o.seq},
                                            {"heads", o.heads},
                                            {"head_dim", o.head_dim},
                                            {"threads", o.threads},
                                            {"median_ms", s.median_ms},
                                            {"min_ms", s.min_ms},
                                            {"max_ms", s.max_ms},
                                            {"cache_peak_mb", bench::round4(static_cast<double>(peak) / (1 << 20))},
                                            {"rss_growth_mb", bench::round4(max_rss_mb() - rss_before)},
                                            {"machine", bench::machine_description()}}
                         .dump());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Causal attention forward and backward, fused and unfused: time and peak memory", "bench_attention"};
  Options o;
  app.add_option("--case", o.which, "which path")->check(CLI::IsMember({"fused", "unfused"}))->capture_default_str();
  app.add_option("--seq", o.seq, "sequence length T")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--heads", o.heads, "heads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--head-dim", o.head_dim, "head dim")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", o.batch, "sequences")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--reps", o.reps, "timed passes")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed passes first")->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "bench_attention: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_attention: error: {}\n", e.what());
  }
  return 1;
}
