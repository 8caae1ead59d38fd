#include "layers/transformer_blocks.h"

#include "dtrain/autograd/attention.h"
#include "dtrain/autograd/checkpoint.h"
#include "dtrain/layers/normalization.h"

#include <cmath>

namespace dtrain::nn::detail {

namespace {
// nanoGPT's initialization: N(0, std) weights, zero biases.
void init_linear(Linear& l, double stddev) {
  NoGradGuard no_grad;
  Tensor w = l.weight.data();
  normal_(w, 0, stddev);
  if (l.bias.defined()) {
    Tensor b = l.bias.data();
    b.fill_(0);
  }
}
constexpr double kInitStd = 0.02;
double residual_std(const GptConfig& c) { return kInitStd / std::sqrt(2.0 * static_cast<double>(c.layers)); }
bool is_llama(const GptConfig& c) { return c.architecture == GptArchitecture::Llama; }
bool has_bias(const GptConfig& c) { return c.bias && !is_llama(c); }
Variable maybe_dropout(const Variable& x, double p, bool training, Generator* gen) {
  return training && p > 0 ? dropout(x, p, gen) : x;
}

// The output projection's weight: its own, or the token embedding's (tied).
class OutputProjection : public Module {
 public:
  OutputProjection(const GptConfig& c, const Variable& tied) {
    if (tied.defined()) {
      weight = register_parameter("weight", tied);
    } else {
      Tensor w = Tensor::empty({c.vocab_size, c.embd});
      normal_(w, 0, kInitStd);
      weight = register_parameter("weight", w);
    }
  }
  Variable forward(const Variable& x) override { return linear(x, weight, Variable()); }
  std::string describe() const override { return "OutputProjection"; }
  Variable weight;
};
}  // namespace

ModulePtr make_norm(const GptConfig& c) {
  if (is_llama(c)) return std::make_shared<RMSNorm>(c.embd, c.norm_eps);
  return std::make_shared<LayerNorm>(Shape{c.embd}, c.norm_eps, true, c.bias);
}

// ---- embedding ---------------------------------------------------------------------------------

GptEmbedding::GptEmbedding(const GptConfig& config, std::shared_ptr<Generator> gen)
    : config_(config), gen_(std::move(gen)) {
  NoGradGuard no_grad;
  wte_ = register_module("wte", std::make_shared<Embedding>(config.vocab_size, config.embd));
  Tensor w = wte_->weight.data();
  normal_(w, 0, kInitStd);
  if (!is_llama(config)) {
    wpe_ = register_module("wpe", std::make_shared<Embedding>(config.block_size, config.embd));
    Tensor p = wpe_->weight.data();
    normal_(p, 0, kInitStd);
  }
}

Variable GptEmbedding::forward(const Variable& tokens) {
  DTRAIN_CHECK(tokens.dim() == 2, "GptEmbedding: expected tokens (B, T), got {}", shape_str(tokens.shape()));
  const std::int64_t t = tokens.size(1);
  DTRAIN_CHECK(t <= config_.block_size, "GptEmbedding: a sequence of {} tokens is longer than the block size {}", t,
               config_.block_size);
  Variable x = (*wte_)(tokens);
  // Positions 0 .. T-1 through the position embedding's own forward (not its weight read
  // directly), so that ZeRO-3's hooks gather it for the read.
  if (wpe_) {
    const Tensor positions = Tensor::arange(0, static_cast<double>(t), 1, {DType::i64, tokens.device()});
    x = add(x, (*wpe_)(Variable(positions)));  // (T, d) broadcast over the batch
  }
  return maybe_dropout(x, config_.dropout, is_training(), gen_.get());
}

// ---- attention ---------------------------------------------------------------------------

CausalSelfAttention::CausalSelfAttention(const GptConfig& c, std::shared_ptr<Generator> gen)
    : config_(c), gen_(std::move(gen)) {
  const std::int64_t hd = c.head_dim();
  c_attn_ = register_module("c_attn",
                            std::make_shared<Linear>(c.embd, (c.heads + 2 * c.kv_heads_or_heads()) * hd, has_bias(c)));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(c.embd, c.embd, has_bias(c)));
  init_linear(*c_attn_, kInitStd);
  init_linear(*c_proj_, residual_std(c));
}

Variable CausalSelfAttention::forward(const Variable& x) {
  // The heads and the sequence are those of the projection's output: on a tensor-parallel
  // rank (dist/tensor_parallel) its share of the heads, and under sequence parallelism the
  // whole sequence gathered from the ranks' shards of x.
  const Variable projected = (*c_attn_)(x);
  const std::int64_t hd = config_.head_dim(), groups = config_.heads / config_.kv_heads_or_heads();
  const std::int64_t b = projected.size(0), t = projected.size(1);
  const std::int64_t hkv = projected.size(2) / hd / (groups + 2), h = hkv * groups;
  Variable qkv = reshape(projected, {b, t, h + 2 * hkv, hd});
  Variable q = narrow(qkv, 2, 0, h), k = narrow(qkv, 2, h, hkv), v = narrow(qkv, 2, h + hkv, hkv);
  if (is_llama(config_)) {
    RopeTables tables = rope_tables(t, hd, config_.rope_theta, x.dtype(), x.device());
    q = rotary_embedding(q, tables.cos, tables.sin);
    k = rotary_embedding(k, tables.cos, tables.sin);
  }
  AttentionOptions options{.causal = true, .dropout = is_training() ? config_.dropout : 0.0, .generator = gen_.get()};
  Variable y = scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2), transpose(v, 1, 2), options);
  y = reshape(transpose(y, 1, 2), {b, t, h * hd});
  return maybe_dropout((*c_proj_)(y), config_.dropout, is_training(), gen_.get());
}

std::string CausalSelfAttention::describe() const {
  return fmt::format("CausalSelfAttention(heads={}, kv_heads={}, head_dim={}{})", config_.heads,
                     config_.kv_heads_or_heads(), config_.head_dim(), is_llama(config_) ? ", rope" : "");
}

// ---- MLP ---------------------------------------------------------------------------------------

GptMlp::GptMlp(const GptConfig& c, std::shared_ptr<Generator> gen) : config_(c), gen_(std::move(gen)) {
  const std::int64_t hidden = c.mlp_width();
  if (is_llama(c)) {
    gate_ = register_module("gate_proj", std::make_shared<Linear>(c.embd, hidden, false));
    up_ = register_module("up_proj", std::make_shared<Linear>(c.embd, hidden, false));
    down_ = register_module("down_proj", std::make_shared<Linear>(hidden, c.embd, false));
    init_linear(*gate_, kInitStd);
    init_linear(*up_, kInitStd);
    init_linear(*down_, residual_std(c));
  } else {
    c_fc_ = register_module("c_fc", std::make_shared<Linear>(c.embd, hidden, has_bias(c)));
    c_proj_ = register_module("c_proj", std::make_shared<Linear>(hidden, c.embd, has_bias(c)));
    init_linear(*c_fc_, kInitStd);
    init_linear(*c_proj_, residual_std(c));
  }
}

Variable GptMlp::forward(const Variable& x) {
  Variable y = is_llama(config_) ? (*down_)(mul(silu((*gate_)(x)), (*up_)(x)))
                                 : (*c_proj_)(gelu((*c_fc_)(x), GeluApproximation::Tanh));
  return maybe_dropout(y, config_.dropout, is_training(), gen_.get());
}

std::string GptMlp::describe() const {
  return fmt::format("GptMlp({}, hidden={})", is_llama(config_) ? "swiglu" : "gelu_tanh", config_.mlp_width());
}

// ---- block and head ----------------------------------------------------------------------------

TransformerBlock::TransformerBlock(const GptConfig& c, std::shared_ptr<Generator> gen)
    : recompute_(c.recompute), gen_(std::move(gen)) {
  ln_1_ = register_module("ln_1", make_norm(c));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(c, gen_));
  ln_2_ = register_module("ln_2", make_norm(c));
  mlp_ = register_module("mlp", std::make_shared<GptMlp>(c, gen_));
}

Variable TransformerBlock::forward(const Variable& x) {
  // Evaluation keeps nothing for a backward: nothing to recompute.
  const Recompute r = is_training() && grad_enabled() ? recompute_ : Recompute::None;
  if (r == Recompute::None) return block(x);
  if (r == Recompute::Full)
    return activation_checkpoint([this](const Variable& in) { return block(in); }, x, gen_.get());
  Variable h =
      add(x, activation_checkpoint([this](const Variable& in) { return attention_branch(in); }, x, gen_.get()));
  return add(h, (*mlp_)((*ln_2_)(h)));
}

Variable TransformerBlock::attention_branch(const Variable& x) { return (*attn_)((*ln_1_)(x)); }

Variable TransformerBlock::block(const Variable& x) {
  Variable h = add(x, attention_branch(x));
  return add(h, (*mlp_)((*ln_2_)(h)));
}

GptHead::GptHead(const GptConfig& c, Variable tied_weight) {
  ln_f_ = register_module("ln_f", make_norm(c));
  auto projection = std::make_shared<OutputProjection>(c, tied_weight);
  output_weight_ = projection->weight;
  lm_head_ = register_module("lm_head", projection);
}

Variable GptHead::forward(const Variable& x) {
  const Variable h = (*ln_f_)(x);
  return hidden_output_ ? h : (*lm_head_)(h);
}

}  // namespace dtrain::nn::detail
