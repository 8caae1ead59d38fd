// A language model's output projection and loss, forward and backward: (a) unfused, the linear
// layer's N x V logits then nn::lm_loss on them, (b) linear_cross_entropy, fused over chunks of
// tokens. GPT-2 small's head by default: vocabulary 50257, width 768, 4 x 1024 tokens.
// Per case: the median time of --reps forward+backward passes after --warmup, and the memory
// above the inputs two ways: the block cache's peak (memory_stats.h: what dtrain's tensors
// held) and the growth of the process's peak resident set over its value once the inputs
// exist (getrusage's ru_maxrss: how bench/peers/pytorch_cross_entropy.py measures PyTorch,
// which has no CPU peak counter). The resident set counts the cached blocks and a peak never
// falls, so run one case per process for that figure (--case fused|unfused; the script
// bench/cross_entropy.sh does). After timing, the two cases are checked against each other on
// the first --check-tokens tokens (loss and both gradients within 1e-4); a mismatch exits 1.
//   bench_cross_entropy [--case fused|unfused|both] [--vocab V] [--embd D] [--batch B]
//                       [--seq T] [--chunk C] [--threads N] [--reps R] [--warmup W] [--json]
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/linear_cross_entropy.h"
#include "dtrain/core/parallel.h"
#include "dtrain/layers/gpt.h"
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
  std::string which = "both";
  std::int64_t vocab = 50257, embd = 768, batch = 4, seq = 1024, chunk = 0, check_tokens = 256;
  int threads = 1, reps = 3, warmup = 1;
  bool json = false;
};

using LossFn = Variable (*)(const Variable& hidden, const Variable& weight, const Tensor& targets, std::int64_t chunk);

Variable unfused(const Variable& hidden, const Variable& weight, const Tensor& targets, std::int64_t) {
  return nn::lm_loss(linear(hidden, weight, Variable()), targets);
}

Variable fused(const Variable& hidden, const Variable& weight, const Tensor& targets, std::int64_t chunk) {
  return linear_cross_entropy(hidden, weight, targets, {.chunk_tokens = chunk});
}

double max_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // kilobytes on Linux
}

struct Inputs {
  Variable hidden, weight;
  Tensor targets;
};

// hidden ~ N(0, 1) (a final norm's output), weight ~ N(0, 0.02) (GPT-2's initialization),
// targets uniform over the vocabulary: what the PyTorch peer draws.
Inputs make_inputs(const Options& o) {
  Generator gen(1);
  Tensor h = Tensor::empty({o.batch, o.seq, o.embd});
  normal_(h, 0, 1, &gen);
  Tensor w = Tensor::empty({o.vocab, o.embd});
  normal_(w, 0, 0.02, &gen);
  Tensor u = Tensor::empty({o.batch, o.seq}, {DType::f64});
  uniform_(u, 0, static_cast<double>(o.vocab), &gen);
  std::vector<std::int64_t> ids;
  for (double x : u.to_vector<double>()) ids.push_back(std::min(static_cast<std::int64_t>(x), o.vocab - 1));
  return {Variable(h, true), Variable(w, true), Tensor::from_vector(ids, {o.batch, o.seq})};
}

struct Measured {
  bench::Stats time;
  double cache_peak_mb = 0, rss_growth_mb = 0, loss = 0;
};

Measured measure(LossFn f, Inputs& in, const Options& o) {
  const double rss_before = max_rss_mb();
  std::vector<double> seconds;
  std::size_t peak = 0;
  double loss = 0;
  for (int rep = 0; rep < o.warmup + o.reps; ++rep) {
    in.hidden.zero_grad();
    in.weight.zero_grad();
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    reset_peak_memory(Device::cpu());
    const auto start = std::chrono::steady_clock::now();
    Variable l = f(in.hidden, in.weight, in.targets, o.chunk);
    l.backward();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    peak = std::max(peak, memory_stats(Device::cpu()).peak_bytes - before);
    loss = l.item();
    if (rep >= o.warmup) seconds.push_back(took.count());
  }
  return {bench::stats(seconds), static_cast<double>(peak) / (1 << 20), max_rss_mb() - rss_before, loss};
}

// Both cases on the first `tokens` tokens of the same inputs: loss and gradients within 1e-4
// (relative to the largest element).
void check(const Inputs& in, const Options& o) {
  const std::int64_t rows = std::min(o.check_tokens, o.batch * o.seq);
  const Tensor h = in.hidden.data().reshape({-1, o.embd}).narrow(0, 0, rows).reshape({1, rows, o.embd});
  const Tensor y = in.targets.reshape({-1}).narrow(0, 0, rows).reshape({1, rows});
  Tensor grads[2][2];
  double losses[2];
  for (int k = 0; k < 2; ++k) {
    Variable hv(h.clone(), true), wv(in.weight.data(), true);
    Variable l = (k == 0 ? unfused : fused)(hv, wv, y, o.chunk);
    l.backward();
    losses[k] = l.item();
    grads[k][0] = hv.grad();
    grads[k][1] = wv.grad();
  }
  const auto rel = [](const Tensor& a, const Tensor& b) { return max_abs_diff(a, b) / max(abs(b)).item(); };
  const double e_loss = std::abs(losses[1] - losses[0]) / std::abs(losses[0]);
  const double e_h = rel(grads[1][0], grads[0][0]), e_w = rel(grads[1][1], grads[0][1]);
  DTRAIN_CHECK(e_loss < 1e-4 && e_h < 1e-4 && e_w < 1e-4,
               "fused and unfused differ on {} tokens: loss {} vs {}, grad_h {:.2e}, grad_w {:.2e} (relative)", rows,
               losses[1], losses[0], e_h, e_w);
}

int run(const Options& o) {
  set_num_threads(o.threads);
  Inputs in = make_inputs(o);
  const std::int64_t n = o.batch * o.seq;
  if (!o.json)
    fmt::print(
        "bench_cross_entropy: {} x {} tokens, vocabulary {}, width {}, {} thread(s), median of {} after {} warm-up; "
        "logits {:.0f} MB in f32; {}\n",
        o.batch, o.seq, o.vocab, o.embd, o.threads, o.reps, o.warmup, static_cast<double>(n * o.vocab) * 4 / (1 << 20),
        bench::machine_description());
  std::vector<std::pair<std::string, LossFn>> cases;
  if (o.which != "fused") cases.emplace_back("unfused", unfused);
  if (o.which != "unfused") cases.emplace_back("fused", fused);
  for (const auto& [name, f] : cases) {
    const Measured m = measure(f, in, o);
    const std::int64_t chunk = name == "fused" ? linear_cross_entropy_chunk(o.vocab, DType::f32, {o.chunk}) : 0;
    if (o.json) {
      fmt::print("{}\n", nlohmann::ordered_json{{"bench", "cross_entropy"},
                                                {"case", name},
                                                {"tokens", n},
                                                {"vocab", o.vocab},
                                                {"embd", o.embd},
                                                {"chunk", chunk},
                                                {"threads", o.threads},
                                                {"median_ms", m.time.median_ms},
                                                {"min_ms", m.time.min_ms},
                                                {"max_ms", m.time.max_ms},
                                                {"cache_peak_mb", bench::round4(m.cache_peak_mb)},
                                                {"rss_growth_mb", bench::round4(m.rss_growth_mb)},
                                                {"loss", m.loss},
                                                {"machine", bench::machine_description()}}
                             .dump());
    } else {
      fmt::print(
          "{:8} {}: {:.1f} ms median ({:.1f}-{:.1f}); peak above the inputs {:.1f} MB (block cache), {:.1f} MB "
          "(resident set growth); loss {:.6f}\n",
          name, chunk > 0 ? fmt::format("(chunk {})", chunk) : std::string("          "), m.time.median_ms,
          m.time.min_ms, m.time.max_ms, m.cache_peak_mb, m.rss_growth_mb, m.loss);
    }
  }
  if (o.check_tokens > 0) check(in, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Output projection + cross-entropy, unfused and fused: time and peak memory", "bench_cross_entropy"};
  Options o;
  app.add_option("--case", o.which, "which to run")
      ->check(CLI::IsMember({"fused", "unfused", "both"}))
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary (rows of the weight)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--embd", o.embd, "width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", o.batch, "sequences")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seq", o.seq, "tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--chunk", o.chunk, "tokens per chunk of the fused op (0: its default)")->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--reps", o.reps, "timed passes")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed passes first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--check-tokens", o.check_tokens, "tokens of the fused-against-unfused check after timing (0: none)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "one JSON line per case instead of text");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const dtrain::Error& e) {
    fmt::print(stderr, "bench_cross_entropy: error: {}\n", e.message());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_cross_entropy: error: {}\n", e.what());
  }
  return 1;
}
