// Activation recomputation per transformer block (GptConfig::recompute): what it saves and
// what it costs. For none, attention and full, on one process: the activations the forward
// keeps for backward (in use after the loss, minus what was held before: parameters and
// gradients), the peak of forward + backward over parameters and gradients (the block
// cache's counts, memory_stats.h: deterministic), and the step time (forward + backward,
// median of --reps, after a warm-up pass). Checks first: every mode's loss and gradients
// must equal none's bit for bit, or it stops with the difference.
//   build/release/bench/bench_recompute                     # GPT-2 124M, batch 4 x 64 tokens, 1 thread
//   build/release/bench/bench_recompute --layers 4 --heads 4 --embd 128 --vocab 256 --batch 12
#include "dtrain/core/parallel.h"
#include "dtrain/layers/gpt.h"
#include "dtrain/tensor/memory_stats.h"

#include "bench_stats.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>

using namespace dtrain;

namespace {

struct Measured {
  double kept_mb = 0, peak_mb = 0;  // over parameters and gradients
  bench::Stats time;
  std::vector<Tensor> check;  // the first pass's loss and gradients
};

double mb(std::size_t bytes) { return static_cast<double>(bytes) / 1e6; }

Measured measure(nn::GptConfig config, nn::Recompute mode, std::int64_t batch, int reps) {
  config.recompute = mode;
  manual_seed(1);
  auto model = nn::gpt(config);
  std::vector<double> ids;
  for (std::int64_t i = 0; i < batch * (config.block_size + 1); ++i)
    ids.push_back(static_cast<double>((i * 31 + i / 7) % config.vocab_size));
  const Tensor all = Tensor::from_vector(ids, {batch, config.block_size + 1}).to(DType::i64);
  const Tensor tokens = all.narrow(1, 0, config.block_size).contiguous();
  const Tensor targets = all.narrow(1, 1, config.block_size).contiguous();
  Measured m;
  std::vector<double> seconds;
  // Pass 0 makes the gradients (and is the check); the timed passes add into them, so that
  // what was held before a pass is parameters and gradients, as in a step that accumulates.
  for (int pass = 0; pass <= reps; ++pass) {
    model->dropout_generator().set_state(9, 0);
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    reset_peak_memory(Device::cpu());
    const auto start = std::chrono::steady_clock::now();
    Variable loss = nn::lm_loss((*model)(Variable(tokens)), targets);
    const std::size_t after_forward = memory_stats(Device::cpu()).in_use_bytes;
    loss.backward();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    m.kept_mb = mb(after_forward - before);
    m.peak_mb = mb(memory_stats(Device::cpu()).peak_bytes - before);
    if (pass == 0) {
      m.check.push_back(loss.data().clone());
      for (const Variable& p : model->parameters()) m.check.push_back(p.grad().clone());
    }
  }
  seconds.erase(seconds.begin());  // the warm-up
  m.time = bench::stats(seconds);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Activation memory and step time of recomputation per transformer block", "bench_recompute"};
  nn::GptConfig config{.vocab_size = 50257, .block_size = 64, .layers = 12, .heads = 12, .embd = 768};
  std::string arch = "gpt2";
  std::int64_t batch = 4;
  int reps = 5, threads = 1;
  app.add_option("--arch", arch, "gpt2 or llama")->check(CLI::IsMember({"gpt2", "llama"}))->capture_default_str();
  app.add_option("--layers", config.layers)->capture_default_str();
  app.add_option("--heads", config.heads)->capture_default_str();
  app.add_option("--embd", config.embd)->capture_default_str();
  app.add_option("--vocab", config.vocab_size)->capture_default_str();
  app.add_option("--block", config.block_size, "tokens per sequence")->capture_default_str();
  app.add_option("--batch", batch, "sequences per pass")->capture_default_str();
  app.add_option("--dropout", config.dropout)->capture_default_str();
  app.add_option("--reps", reps, "timed passes per mode (after one warm-up)")->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads)->check(CLI::Range(1, 1024))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    config.architecture = arch == "llama" ? nn::GptArchitecture::Llama : nn::GptArchitecture::Gpt2;
    config.validate();
    set_num_threads(threads);
    fmt::print("bench_recompute: {}, batch {} x {} tokens, {} thread(s), {} timed passes; {}\n", config.describe(),
               batch, config.block_size, threads, reps, bench::machine_description());
    fmt::print("{:<10}{:>14}{:>14}{:>14}{:>12}{:>12}\n", "recompute", "kept MB", "peak MB", "median ms", "min ms",
               "max ms");
    std::vector<Tensor> reference;
    for (nn::Recompute mode : {nn::Recompute::None, nn::Recompute::Attention, nn::Recompute::Full}) {
      Measured m = measure(config, mode, batch, reps);
      if (reference.empty()) reference = std::move(m.check);
      for (std::size_t i = 0; i < m.check.size(); ++i) {
        const double d = max_abs_diff(m.check[i], reference[i]);
        DTRAIN_CHECK(d == 0, "recompute {}: tensor {} (0: the loss, then the gradients) differs from none's by {}",
                     nn::recompute_name(mode), i, d);
      }
      fmt::print("{:<10}{:>14.2f}{:>14.2f}{:>14.1f}{:>12.1f}{:>12.1f}\n", nn::recompute_name(mode), m.kept_mb,
                 m.peak_mb, m.time.median_ms, m.time.min_ms, m.time.max_ms);
      std::fflush(stdout);
    }
    fmt::print("check: every mode's loss and gradients equal none's bit for bit\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_recompute: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
