// train_gpt: trains a GPT-style transformer language model (GPT-2 family or Llama-style) on
// text, the third example trainer. Text (a file, a folder of files such as Debian's
// fortunes in /usr/share/games/fortunes, or a dictzip/gzip file) is tokenized at start-up
// with --tokenizer (bytes, a BPE vocabulary trained by dtrain-tokenize, or GPT-2's own merges
// from a tiktoken rank file); token files that dtrain-tokenize wrote (.tok) or llm.c's .bin
// files are read as they are. The last 10% of the token stream is the validation split.
// Launched like the other trainers (one process, mpirun or srun); --parallel takes any
// strategy's spec (dp, zero=1|2|3, pp=K, and their compositions).
//
//   build/examples/train_gpt --data /usr/share/games/fortunes --steps 2000
//   mpirun -np 2 build/examples/train_gpt --data /usr/share/games/fortunes --parallel zero=2
//
// It prints "step N: train loss X, ..." lines with tokens/s and model FLOPs utilisation
// (against an FMA-loop peak measured at start-up at the same thread count), "step N: val
// loss X" lines, the time breakdown, and at the end --sample tokens decoded as text.
#include "common/example_support.h"
#include "common/parallel_flags.h"
#include "common/peak_flops.h"
#include "dtrain/autograd/fusion.h"
#include "dtrain/core/log.h"
#include "dtrain/core/parallel.h"
#include "dtrain/dist/tensor_parallel/gpt_plan.h"
#include "dtrain/data/token_file.h"
#include "dtrain/data/token_windows.h"
#include "dtrain/dist/pipeline/pipeline_strategy.h"
#include "dtrain/dist/strategy/strategy.h"
#include "dtrain/layers/gpt.h"
#include "dtrain/optim/adam.h"
#include "dtrain/text/corpus.h"
#include "dtrain/text/tokenizer.h"
#include "dtrain/train/huggingface.h"
#include "dtrain/train/trainer.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>

namespace {

using namespace dtrain;

struct Config {
  std::string data;
  std::string tokenizer = "bytes";
  std::string arch = "gpt2";
  std::int64_t layers = 4, heads = 4, kv_heads = 0, embd = 128, block_size = 64;
  double dropout = 0;
  bool bias = false;
  std::string recompute = "none";
  bool fused = true;
  std::int64_t global_batch = 12;
  std::int64_t micro_batch = 0;  // 0: global / replicas
  std::int64_t steps = 2000;
  std::vector<double> betas = {0.9, 0.99};
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, clip = 1.0;
  std::int64_t warmup_steps = 100;
  std::int64_t eval_every = 250, eval_windows = 0;
  std::int64_t log_every = 10;
  std::int64_t sample = 200;
  double temperature = 0.8;
  std::int64_t top_k = 40;
  std::string prompt = "\n";
  std::string export_hf;
  examples::RunFlags run{.timeout_s = 300};
  examples::ParallelFlags parallel;
};

void add_flags(CLI::App& app, Config& c) {
  app.add_option("--data", c.data,
                 "text: a file, a folder of files (fortune's .dat indexes and .u8 copies skipped) or a .dz/.gz file; "
                 "or tokens: a .tok file (dtrain-tokenize encode) or an llm.c .bin file")
      ->required();
  app.add_option("--tokenizer", c.tokenizer, "bytes, bpe:FILE (dtrain-tokenize train) or gpt2:FILE (gpt2.tiktoken)")
      ->capture_default_str();
  app.add_option("--arch", c.arch, "gpt2 (LayerNorm, GELU, learned positions) or llama (RMSNorm, SwiGLU, RoPE)")
      ->check(CLI::IsMember({"gpt2", "llama"}))
      ->capture_default_str();
  app.add_option("--layers", c.layers, "transformer blocks")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--heads", c.heads, "attention heads")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--kv-heads", c.kv_heads, "key/value heads (grouped-query attention; 0: --heads)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--embd", c.embd, "width (embedding size)")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--block-size", c.block_size, "context length in tokens")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--dropout", c.dropout, "dropout probability")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  app.add_option("--bias", c.bias, "biases in Linear and LayerNorm (gpt2)")->capture_default_str();
  app.add_option("--global-batch-size", c.global_batch, "sequences per optimizer step, over all replicas")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--micro-batch-size", c.micro_batch,
                 "sequences per replica per forward pass (default: global / replicas; accumulation derived)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--steps", c.steps, "optimizer steps")->check(CLI::Range(1, 1 << 30))->capture_default_str();
  app.add_option("--betas", c.betas, "AdamW's B1,B2")->delimiter(',')->expected(2)->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup-steps", c.warmup_steps, "linear warm-up steps")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--min-lr", c.min_lr, "the learning rate cosine decay ends at (at --steps)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "AdamW's decoupled decay, on tensors of 2 or more dims")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--clip", c.clip, "clip the gradients' global L2 norm (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "steps between validation losses")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--eval-windows", c.eval_windows,
                 "validate on the first N non-overlapping windows of the split (0: all of them)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-every", c.log_every, "steps between train loss lines")
      ->check(CLI::Range(1, 1 << 30))
      ->capture_default_str();
  app.add_option("--sample", c.sample, "tokens to generate at the end (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--temperature", c.temperature, "sampling temperature (0: the most likely token)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-k", c.top_k, "sample among the K most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--prompt", c.prompt, "text the sample continues")->capture_default_str();
  app.add_option("--export-hf", c.export_hf,
                 "at the end, write the model for Hugging Face transformers' GPT2LMHeadModel.from_pretrained into "
                 "this folder (gpt2 only)");
  examples::add_job_flags(app, c.run, "initialization, the training windows, dropout and sampling");
  examples::add_parallel_flags(app, c.parallel);
  // Here --recompute is the model's, per block; a pipeline's own (each stage's whole forward)
  // stays the spec's key: --parallel pp=2,recompute, or --recompute-stages.
  app.remove_option(app.get_option("--recompute"));
  app.add_option("--recompute", c.recompute,
                 "recompute activations in backward, per transformer block: none, full (keep only each block's "
                 "input) or attention (recompute the attention branch, keep the MLP's)")
      ->check(CLI::IsMember({"none", "full", "attention"}))
      ->capture_default_str();
  app.add_option("--fused", c.fused,
                 "fused kernels where the device has them (attention), and the output projection fused with the loss "
                 "(without pipelines, tensor parallelism and ZeRO-3); false: the unfused ops, for comparison")
      ->capture_default_str();
}

bool is_token_file(const std::filesystem::path& p) {
  return std::filesystem::is_regular_file(p) && (p.extension() == ".tok" || p.extension() == ".bin");
}

// The whole token stream: read, or tokenized from the corpus's files in order.
data::TokenStream load_tokens(const Config& c, const text::Tokenizer& tokenizer, std::string& source) {
  auto tokens = std::make_shared<std::vector<std::int32_t>>();
  if (is_token_file(c.data)) {
    data::TokenData d = data::read_token_file(c.data);
    DTRAIN_CHECK(d.vocab_size == 0 || d.vocab_size <= tokenizer.vocab_size(),
                 "--data '{}': its vocabulary of {} is larger than the tokenizer's ({}): pass the --tokenizer that "
                 "encoded it",
                 c.data, d.vocab_size, tokenizer.vocab_size());
    for (std::int32_t id : d.tokens)
      DTRAIN_CHECK(id < tokenizer.vocab_size(), "--data '{}': token id {} is beyond the tokenizer's vocabulary of {}",
                   c.data, id, tokenizer.vocab_size());
    *tokens = std::move(d.tokens);
    source = fmt::format("{} ({} tokens)", c.data, tokens->size());
    return tokens;
  }
  const auto files = text::corpus_files(c.data);
  std::int64_t bytes = 0;
  for (const auto& f : files) {
    const std::string text = text::read_corpus_file(f);
    bytes += static_cast<std::int64_t>(text.size());
    const std::vector<std::int32_t> ids = tokenizer.encode(text);
    tokens->insert(tokens->end(), ids.begin(), ids.end());
  }
  source = fmt::format("{} ({} file(s), {} bytes, {} tokens)", c.data, files.size(), bytes, tokens->size());
  return tokens;
}

// nanoGPT's schedule: linear warm-up to lr over warmup steps, then cosine to min_lr at the last step.
class WarmupCosine final : public optim::LrSchedule {
 public:
  WarmupCosine(double lr, double min_lr, std::int64_t warmup, std::int64_t steps)
      : lr_(lr), min_lr_(min_lr), warmup_(warmup), steps_(steps) {}
  double lr_at(std::int64_t step) const override {
    if (step < warmup_) return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
    if (step >= steps_ - 1 || steps_ - 1 <= warmup_) return step >= steps_ - 1 ? min_lr_ : lr_;
    const double ratio = static_cast<double>(step - warmup_) / static_cast<double>(steps_ - 1 - warmup_);
    return min_lr_ + 0.5 * (1 + std::cos(M_PI * ratio)) * (lr_ - min_lr_);
  }

 private:
  double lr_, min_lr_;
  std::int64_t warmup_, steps_;
};

// The step lines, the validation lines, the time breakdown; and the dropout generator
// keyed by (seed, data shard, step), so that a resumed run drops what the uninterrupted one did.
class GptReport final : public train::TrainObserver {
 public:
  GptReport(const Config& c, nn::Gpt& model, bool prints, int shard, std::int64_t tokens_per_step, double peak)
      : c_(c), model_(model), prints_(prints), shard_(shard), tokens_per_step_(tokens_per_step), peak_(peak) {}

  void on_fit_start(const train::FitStart& s) override {
    seed_dropout(s.global_step);
    if (prints_ && s.global_step > 0) fmt::print("train_gpt: resumed at step {}\n", s.global_step);
    last_ = std::chrono::steady_clock::now();
    last_step_ = s.global_step;
  }
  bool wants_loss(const train::StepPosition& at) override {
    return at.global_step % c_.log_every == 0 || at.global_step == 1;
  }
  void on_step_end(const train::StepEvent& e) override {
    seed_dropout(e.global_step);
    if (!e.loss || !prints_ || !wants_loss({.global_step = e.global_step})) return;
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last_).count();
    const double per_step = dt / static_cast<double>(std::max<std::int64_t>(e.global_step - last_step_, 1));
    const double tokens_s = static_cast<double>(tokens_per_step_) / per_step;
    std::string mfu;
    if (peak_ > 0) mfu = fmt::format(", MFU {:.1f}%", 100 * tokens_s * model_.flops_per_token(c_.block_size) / peak_);
    fmt::print("step {}: train loss {:.4f}, lr {:.3e}, {:.0f} ms/step, {:.0f} tokens/s{}\n", e.global_step, *e.loss,
               e.lr, 1000 * per_step, tokens_s, mfu);
    std::fflush(stdout);
    last_ = now;
    last_step_ = e.global_step;
  }
  void on_evaluation(const train::EvalEvent& e) override {
    if (prints_) {
      fmt::print("step {}: val loss {:.4f} ({} windows)\n", e.global_step, e.result.loss(), e.result.samples);
      std::fflush(stdout);
    }
    last_ = std::chrono::steady_clock::now();  // evaluation time is not training time
  }
  void on_epoch_end(const train::EpochSummary& s) override {
    if (!prints_) return;
    const auto& t = s.time;
    fmt::print(
        "time: {:.1f} s training: forward {:.1f} s, backward {:.1f} s, optimizer {:.1f} s, exposed communication "
        "{:.1f} s, data wait {:.1f} s\n",
        s.seconds, t[trace::Phase::Forward], t[trace::Phase::Backward], t[trace::Phase::Optimizer],
        t[trace::Phase::Communication], t[trace::Phase::Data]);
  }

 private:
  void seed_dropout(std::int64_t done) {
    model_.dropout_generator().set_state(c_.run.seed * 1000003 + static_cast<std::uint64_t>(shard_),
                                         static_cast<std::uint64_t>(done) << 32);
  }
  const Config& c_;
  nn::Gpt& model_;
  bool prints_;
  int shard_;
  std::int64_t tokens_per_step_;
  double peak_;
  std::chrono::steady_clock::time_point last_;
  std::int64_t last_step_ = 0;
};

int run(const Config& c, const dist::CommunicatorPtr& comm) {
  const examples::RunFlags& r = c.run;
  logging::init(comm->rank(), comm->size());
  if (r.threads > 0) set_num_threads(r.threads);
  set_fused_kernels(c.fused);
  DTRAIN_CHECK(c.betas.size() == 2 && c.betas[0] >= 0 && c.betas[0] < 1 && c.betas[1] >= 0 && c.betas[1] < 1,
               "--betas: expected B1,B2 in [0, 1)");
  DTRAIN_CHECK(c.warmup_steps < c.steps, "--warmup-steps {} must be fewer than --steps {}", c.warmup_steps, c.steps);
  DTRAIN_CHECK(c.min_lr <= c.lr, "--min-lr {} must not exceed --lr {}", c.min_lr, c.lr);
  const auto tokenizer = text::make_tokenizer(c.tokenizer);
  std::string source;
  const data::TokenStream tokens = load_tokens(c, *tokenizer, source);
  const auto n = static_cast<std::int64_t>(tokens->size());
  const std::int64_t split = data::validation_split(n);

  nn::GptConfig config{.architecture = c.arch == "llama" ? nn::GptArchitecture::Llama : nn::GptArchitecture::Gpt2,
                       .vocab_size = tokenizer->vocab_size(),
                       .block_size = c.block_size,
                       .layers = c.layers,
                       .heads = c.heads,
                       .kv_heads = c.kv_heads,
                       .embd = c.embd,
                       .dropout = c.dropout,
                       .bias = c.bias,
                       .recompute = nn::parse_recompute(c.recompute)};
  const Device device = examples::run_device(r);
  auto strategy =
      examples::make_strategy(c.parallel, comm, device,
                              {.batch_size = c.global_batch,
                               .timeout = std::chrono::milliseconds(static_cast<std::int64_t>(r.timeout_s * 1000)),
                               .tensor_parallel_plan = dist::gpt_tensor_parallel_plan(config)});
  const dist::Strategy::Shard shard = strategy->data_shard();
  DTRAIN_CHECK(c.global_batch % shard.count == 0,
               "--global-batch-size {} does not split over {} data-parallel replicas", c.global_batch, shard.count);
  const std::int64_t per_replica = c.global_batch / shard.count;
  const std::int64_t micro = c.micro_batch > 0 ? c.micro_batch : per_replica;
  DTRAIN_CHECK(per_replica % micro == 0,
               "--micro-batch-size {} does not divide the {} sequences each of {} replicas takes per step "
               "(--global-batch-size {})",
               micro, per_replica, shard.count, c.global_batch);

  manual_seed(r.seed);  // the same initial model on every rank
  auto gpt = nn::gpt(config);
  const std::int64_t parameters = gpt->parameter_count();
  auto model = strategy->prepare(gpt);
  optim::AdamW optimizer(model->parameters(), {.lr = c.lr,
                                               .beta1 = c.betas[0],
                                               .beta2 = c.betas[1],
                                               .weight_decay = c.weight_decay,
                                               .exclude_1d_from_weight_decay = true});

  auto train_set = data::TokenWindows::random(tokens, 0, split, c.block_size, c.steps * c.global_batch, r.seed);
  auto val_set = data::TokenWindows::sequential(tokens, split, n, c.block_size, c.eval_windows);
  examples::RunFlags rr = r;
  rr.epochs = 1;
  rr.accumulate = static_cast<int>(per_replica / micro);
  rr.clip_grad_norm = c.clip;
  rr.evaluations_per_epoch = static_cast<int>(std::max<std::int64_t>(c.steps / c.eval_every, 1));
  train::TrainerOptions options = examples::trainer_options(rr);
  // Under tensor parallelism the model's output is this rank's vocabulary columns, never gathered.
  dist::TensorParallel* const tensor_parallel = strategy->tensor_parallel();
  // The fused projection and loss reads the head's weight outside its forward: a whole model,
  // not sharded (no pipeline stage, tensor-parallel slice or ZeRO-3 share).
  const dist::CheckpointPlan plan = strategy->checkpoint_plan();
  const bool fused_loss = c.fused && !tensor_parallel && plan.whole_model && !plan.model_share;
  gpt->set_fused_loss(fused_loss);
  if (tensor_parallel) options.loss = dist::LossFn(tensor_parallel->loss());
  else if (fused_loss)
    options.loss = [gpt](const Variable& out, const Tensor& targets) { return gpt->loss(out, targets); };
  else options.loss = dist::LossFn(nn::lm_loss);
  options.eval_metrics = std::vector<train::Metric>{};
  options.verbose = false;
  train::Trainer trainer(
      strategy,
      {.train = train_set, .test = val_set, .batch_size = c.global_batch, .eval_batch_size = micro, .seed = r.seed},
      options);
  const WarmupCosine schedule(c.lr, c.min_lr, c.warmup_steps, c.steps);

  const bool on_cpu = !device.is_cuda();
  const double peak = on_cpu ? examples::measure_peak_flops() : 0;
  if (strategy->reports()) {
    fmt::print("train_gpt: {} ({} parameters), tokenizer {}, data {}: {} train / {} val tokens\n", config.describe(),
               parameters, tokenizer->describe(), source, split, n - split);
    fmt::print(
        "train_gpt: {} rank(s) x {} thread(s), {} step(s) of {} sequences ({} tokens; {} replica(s) x {} "
        "micro-batch(es) of {}), AdamW lr {:g} (warm-up {}, cosine to {:g}), betas {:g},{:g}, weight decay "
        "{:g}, clip {:g}, on {}{}\n",
        comm->size(), num_threads(), c.steps, c.global_batch, c.global_batch * c.block_size, shard.count,
        per_replica / micro, micro, c.lr, c.warmup_steps, c.min_lr, c.betas[0], c.betas[1], c.weight_decay, c.clip,
        on_cpu ? "cpu" : "cuda", examples::autocast_description(r.precision, device));
    if (on_cpu)
      fmt::print("train_gpt: peak {:.1f} GFLOP/s per rank ({} FMA loop, {} thread(s)); {:.3g} FLOPs per token\n",
                 peak / 1e9, examples::peak_flops_isa(), num_threads(), gpt->flops_per_token(c.block_size));
    if (const std::string layout = examples::describe_layout(*strategy, comm->size()); !layout.empty())
      fmt::print("{}\n", layout);
    std::fflush(stdout);
  }
  // MFU is the job's: its tokens/s against every rank's peak (each measured at start-up, all
  // at once, so that ranks sharing a host share its cores as they do in training).
  trainer.add_observer(std::make_shared<GptReport>(c, *gpt, strategy->reports(), shard.index,
                                                   c.global_batch * c.block_size, peak * comm->size()));
  const bool pipelined = dynamic_cast<const dist::PipelineStrategy*>(strategy.get()) != nullptr;
  const std::string spec = examples::parallel_spec(c.parallel, *comm);
  const bool sharded_parameters = spec.find("zero=3") != std::string::npos;
  // A pipeline's recomputed forward replays the default generator's numbers, not the model's
  // own dropout generator: its masks would differ from the first forward's.
  DTRAIN_CHECK(
      !(pipelined && c.dropout > 0 &&
        (spec.find("recompute") != std::string::npos || c.parallel.recompute || !c.parallel.recompute_stages.empty())),
      "--dropout {} with a recomputing pipeline: the recomputed forward would drop other units; use "
      "--dropout 0 or no recompute",
      c.dropout);
  DTRAIN_CHECK(
      c.export_hf.empty() ||
          (config.architecture == nn::GptArchitecture::Gpt2 && !pipelined && !sharded_parameters && !tensor_parallel),
      "--export-hf: needs a gpt2 model held whole by a rank (not --arch llama, a pipeline, tp or zero=3: save a "
      "checkpoint and resume it in one process with --export-hf)");
  if (trainer.fit(optimizer, &schedule).stopped_for_relaunch) return train::kRelaunchExitCode;

  if (!c.export_hf.empty() && strategy->reports()) {
    train::export_gpt2(*gpt, c.export_hf);
    fmt::print("train_gpt: exported for GPT2LMHeadModel.from_pretrained('{}')\n", c.export_hf);
  }
  if (c.sample > 0) {
    // Every rank generates the same tokens (the same seed), so that a sharded model gathers
    // its layers together; a pipeline holds one stage per rank and cannot.
    if (pipelined) {
      if (strategy->reports()) fmt::print("sample: skipped (a pipeline has no rank with the whole model)\n");
      return 0;
    }
    std::vector<std::int32_t> prompt = tokenizer->encode(c.prompt);
    if (prompt.empty()) prompt.push_back(0);
    Generator gen(r.seed);
    if (tensor_parallel) tensor_parallel->gather_output(true);  // the whole vocabulary's logits to sample from
    const auto out = gpt->generate(prompt, c.sample, c.temperature, c.top_k, gen);
    if (strategy->reports()) {
      const std::span<const std::int32_t> ids(out);
      fmt::print("sample ({} tokens, temperature {:g}, top-k {}):\n{}\n", c.sample, c.temperature, c.top_k,
                 tokenizer->decode(ids));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a GPT-style transformer language model on text; data-parallel under mpirun", "train_gpt"};
  Config config;
  add_flags(app, config);
  CLI11_PARSE(app, argc, argv);
  return examples::run_example("train_gpt", config.run.timeout_s,
                               [&](const dist::CommunicatorPtr& comm) { return run(config, comm); });
}
