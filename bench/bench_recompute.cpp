// Activation recomputation per transformer block (GptConfig::recompute): what it saves and
// what it costs. For none, attention and full, on one process: the activations the forward
// keeps for backward (in use after the loss, minus what was held before: parameters and
// gradients), the peak of forward + backward over parameters and gradients (the block
// cache's counts, memory_stats.h: deterministic), and the step time (forward + backward,
// median of --reps alternating repetitions, after a warm-up pass). Checks first: every mode's
// loss and gradients must equal none's bit for bit, or it stops with the difference.
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

double mb(std::size_t bytes) { return static_cast<double>(bytes) / 1e6; }

// One mode's model and what its passes measured.
struct Case {
  nn::Recompute mode;
  std::shared_ptr<nn::Gpt> model;
  double kept_mb = 0, peak_mb = 0;  // over parameters and gradients
  std::vector<double> seconds;
};

// One forward + backward. The gradients exist after the first pass, and later ones add into
// them: what was held before a pass is parameters and gradients, as in a step that accumulates.
Variable pass(Case& c, const Tensor& tokens, const Tensor& targets) {
  c.model->dropout_generator().set_state(9, 0);
  const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
  reset_peak_memory(Device::cpu());
  const auto start = std::chrono::steady_clock::now();
  Variable loss = nn::lm_loss((*c.model)(Variable(tokens)), targets);
  const std::size_t after_forward = memory_stats(Device::cpu()).in_use_bytes;
  loss.backward();
  c.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  c.kept_mb = mb(after_forward - before);
  c.peak_mb = mb(memory_stats(Device::cpu()).peak_bytes - before);
  return loss;
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
  app.add_option("--reps", reps, "alternating repetitions (after a warm-up pass per mode)")->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads)->check(CLI::Range(1, 1024))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    config.architecture = arch == "llama" ? nn::GptArchitecture::Llama : nn::GptArchitecture::Gpt2;
    config.validate();
    set_num_threads(threads);
    fmt::print("bench_recompute: {}, batch {} x {} tokens, {} thread(s), {} alternating repetitions; {}\n",
               config.describe(), batch, config.block_size, threads, reps, bench::machine_description());
    std::vector<double> ids;
    for (std::int64_t i = 0; i < batch * (config.block_size + 1); ++i)
      ids.push_back(static_cast<double>((i * 31 + i / 7) % config.vocab_size));
    const Tensor all = Tensor::from_vector(ids, {batch, config.block_size + 1}).to(DType::i64);
    const Tensor tokens = all.narrow(1, 0, config.block_size).contiguous();
    const Tensor targets = all.narrow(1, 1, config.block_size).contiguous();
    // The same weights in every mode. The warm-up pass is the check: each mode's loss and
    // gradients against none's.
    std::vector<Case> cases;
    std::vector<Tensor> reference;
    for (nn::Recompute mode : {nn::Recompute::None, nn::Recompute::Attention, nn::Recompute::Full}) {
      config.recompute = mode;
      manual_seed(1);
      Case& c = cases.emplace_back(Case{mode, nn::gpt(config)});
      std::vector<Tensor> check{pass(c, tokens, targets).data()};
      for (const Variable& p : c.model->parameters()) check.push_back(p.grad());
      c.seconds.clear();
      if (reference.empty()) {
        for (const Tensor& t : check) reference.push_back(t.clone());
        continue;
      }
      for (std::size_t i = 0; i < check.size(); ++i) {
        const double d = max_abs_diff(check[i], reference[i]);
        DTRAIN_CHECK(d == 0, "recompute {}: tensor {} (0: the loss, then the gradients) differs from none's by {}",
                     nn::recompute_name(mode), i, d);
      }
    }
    reference.clear();
    fmt::print("check: every mode's loss and gradients equal none's bit for bit\n");
    // Alternating repetitions: a load that comes and goes falls on every mode alike.
    for (int rep = 0; rep < reps; ++rep) {
      for (Case& c : cases) pass(c, tokens, targets);
    }
    fmt::print("{:<10}{:>14}{:>14}{:>14}{:>12}{:>12}\n", "recompute", "kept MB", "peak MB", "median ms", "min ms",
               "max ms");
    for (const Case& c : cases) {
      const bench::Stats t = bench::stats(c.seconds);
      fmt::print("{:<10}{:>14.2f}{:>14.2f}{:>14.1f}{:>12.1f}{:>12.1f}\n", nn::recompute_name(c.mode), c.kept_mb,
                 c.peak_mb, t.median_ms, t.min_ms, t.max_ms);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_recompute: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
