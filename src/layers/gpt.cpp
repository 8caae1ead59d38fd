#include "dtrain/layers/gpt.h"

#include "dtrain/autograd/linear_cross_entropy.h"
#include "layers/transformer_blocks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace dtrain::nn {

std::int64_t GptConfig::mlp_width() const {
  if (mlp_hidden > 0) return mlp_hidden;
  if (architecture == GptArchitecture::Gpt2) return 4 * embd;
  const std::int64_t two_thirds = (2 * 4 * embd + 2) / 3;  // ceil(8 d / 3)
  return (two_thirds + 63) / 64 * 64;
}

void GptConfig::validate() const {
  DTRAIN_CHECK(vocab_size > 0, "GptConfig: vocab_size {} must be positive", vocab_size);
  DTRAIN_CHECK(block_size > 0, "GptConfig: block_size {} must be positive", block_size);
  DTRAIN_CHECK(layers > 0, "GptConfig: layers {} must be positive", layers);
  DTRAIN_CHECK(heads > 0 && embd > 0 && embd % heads == 0, "GptConfig: embd {} must be a positive multiple of heads {}",
               embd, heads);
  DTRAIN_CHECK(kv_heads >= 0 && heads % kv_heads_or_heads() == 0,
               "GptConfig: heads {} must be a multiple of kv_heads {}", heads, kv_heads_or_heads());
  DTRAIN_CHECK(architecture != GptArchitecture::Llama || head_dim() % 2 == 0,
               "GptConfig: rotary embeddings need an even head dim, got {} "
               "(embd {} / heads {})",
               head_dim(), embd, heads);
  DTRAIN_CHECK(mlp_hidden >= 0, "GptConfig: mlp_hidden {} must be >= 0 (0: the architecture's default)", mlp_hidden);
  DTRAIN_CHECK(dropout >= 0 && dropout < 1, "GptConfig: dropout {} outside [0, 1)", dropout);
  DTRAIN_CHECK(norm_eps > 0, "GptConfig: norm_eps {} must be positive", norm_eps);
  DTRAIN_CHECK(rope_theta > 0, "GptConfig: rope_theta {} must be positive", rope_theta);
  DTRAIN_CHECK(recompute == Recompute::None || recompute == Recompute::Full || recompute == Recompute::Attention,
               "GptConfig: recompute {} is not None, Full or Attention", static_cast<int>(recompute));
}

std::string GptConfig::describe() const {
  const bool llama = architecture == GptArchitecture::Llama;
  return fmt::format(
      "{} {} layers, {} heads (kv {}), width {}, mlp {}, vocab "
      "{}, block {}, dropout {}, bias {}{}{}",
      llama ? "llama" : "gpt2", layers, heads, kv_heads_or_heads(), embd, mlp_width(), vocab_size, block_size, dropout,
      bias && !llama, tie_embeddings ? ", tied" : "",
      recompute == Recompute::None ? std::string() : std::string(", recompute ") + recompute_name(recompute));
}

std::shared_ptr<Gpt> gpt(const GptConfig& config) { return std::make_shared<Gpt>(config); }

Gpt::Gpt(const GptConfig& config) : config_(config), dropout_gen_(std::make_shared<Generator>(0)) {
  config_.validate();
  auto embedding = std::make_shared<detail::GptEmbedding>(config_, dropout_gen_);
  push_back(embedding);
  for (std::int64_t i = 0; i < config_.layers; ++i)
    push_back(std::make_shared<detail::TransformerBlock>(config_, dropout_gen_));
  push_back(
      std::make_shared<detail::GptHead>(config_, config_.tie_embeddings ? embedding->token_weight() : Variable()));
}

std::string Gpt::describe() const { return "Gpt(" + config_.describe() + ")"; }

std::int64_t Gpt::parameter_count(bool non_embedding) const {
  std::int64_t n = num_parameters();
  if (non_embedding && config_.architecture == GptArchitecture::Gpt2) n -= config_.block_size * config_.embd;
  return n;
}

double Gpt::flops_per_token(std::int64_t sequence_length) const {
  return 6.0 * static_cast<double>(parameter_count(true)) +
         12.0 * static_cast<double>(config_.layers * sequence_length * config_.embd);
}

std::vector<std::int32_t> Gpt::generate(std::vector<std::int32_t> prompt, std::int64_t count, double temperature,
                                        std::int64_t top_k, Generator& gen) {
  DTRAIN_CHECK(!prompt.empty(), "Gpt::generate: the prompt must hold at least one token");
  DTRAIN_CHECK(temperature >= 0 && top_k >= 0, "Gpt::generate: temperature {} and top_k {} must be >= 0", temperature,
               top_k);
  for (std::int32_t id : prompt)
    DTRAIN_CHECK(id >= 0 && id < config_.vocab_size, "Gpt::generate: prompt token {} outside the vocabulary [0, {})",
                 id, config_.vocab_size);
  // The mode and the head's output as they were, also when a forward throws.
  struct RestoreMode {
    Gpt& model;
    bool training, fused;
    ~RestoreMode() {
      model.train(training);
      model.set_fused_loss(fused);
    }
  } restore{*this, is_training(), fused_loss()};
  eval();
  set_fused_loss(false);  // logits to sample from
  NoGradGuard no_grad;
  const Device device = parameters().front().device();
  std::vector<std::int32_t> out = prompt;
  for (std::int64_t i = 0; i < count; ++i) {
    const std::size_t context = std::min<std::size_t>(out.size(), static_cast<std::size_t>(config_.block_size));
    std::vector<std::int64_t> window(out.end() - static_cast<std::ptrdiff_t>(context), out.end());
    Tensor tokens = Tensor::from_vector(window, {1, static_cast<std::int64_t>(context)}).to(device);
    Tensor logits = forward(Variable(tokens)).data();
    Tensor last =
        logits.narrow(1, static_cast<std::int64_t>(context) - 1, 1).reshape({-1}).to(Device::cpu()).to(DType::f64);
    const auto* l = last.data<double>();
    const std::int64_t v = config_.vocab_size;
    std::vector<std::int64_t> order(static_cast<std::size_t>(v));
    std::iota(order.begin(), order.end(), 0);
    // NaN logits rank last (a strict weak order for the sort).
    const auto key = [&](std::int64_t i) { return std::isnan(l[i]) ? -std::numeric_limits<double>::infinity() : l[i]; };
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return key(a) > key(b); });
    if (temperature == 0) {
      out.push_back(static_cast<std::int32_t>(order[0]));
      continue;
    }
    const std::size_t keep =
        top_k > 0 ? std::min<std::size_t>(static_cast<std::size_t>(top_k), order.size()) : order.size();
    std::vector<double> p(keep);
    for (std::size_t j = 0; j < keep; ++j) p[j] = std::exp((key(order[j]) - key(order[0])) / temperature);
    const double total = std::accumulate(p.begin(), p.end(), 0.0);
    Tensor u = Tensor::empty({1}, {DType::f64});
    uniform_(u, 0, total, &gen);
    double r = u.item();
    std::size_t pick = keep - 1;
    for (std::size_t j = 0; j < keep; ++j) {
      if (r < p[j]) {
        pick = j;
        break;
      }
      r -= p[j];
    }
    out.push_back(static_cast<std::int32_t>(order[pick]));
  }
  return out;
}

detail::GptHead& Gpt::head() const {
  auto* head = dynamic_cast<detail::GptHead*>((*this)[size() - 1].get());
  DTRAIN_CHECK(head != nullptr, "Gpt: its last module is not the head");
  return *head;
}

void Gpt::set_fused_loss(bool on) { head().set_hidden_output(on); }
bool Gpt::fused_loss() const { return head().hidden_output(); }

Variable Gpt::loss(const Variable& output, const Tensor& targets) const {
  if (!fused_loss()) return lm_loss(output, targets);
  return linear_cross_entropy(output, head().output_weight(), targets);
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Full: return "full";
    case Recompute::Attention: return "attention";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::None, Recompute::Full, Recompute::Attention}) {
    if (name == recompute_name(r)) return r;
  }
  DTRAIN_FAIL("recompute '{}': expected none, full or attention", name);
}

Variable lm_loss(const Variable& logits, const Tensor& targets) {
  DTRAIN_CHECK(
      logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) && logits.size(1) == targets.size(1),
      "lm_loss: logits {} do not match targets {} (expected (B, T, V) "
      "and (B, T))",
      shape_str(logits.shape()), shape_str(targets.shape()));
  return cross_entropy(reshape(logits, {-1, logits.size(2)}), targets.reshape({-1}).to(DType::i64));
}

}  // namespace dtrain::nn
