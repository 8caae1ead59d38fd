// GPT-style decoder-only transformer language models: the GPT-2 family (learned positions,
// LayerNorm, GELU in its tanh form, biases optional) and a Llama-style variant (RMSNorm,
// rotary position embeddings, SwiGLU MLPs, no biases, grouped-query heads optional), built
// from one configuration. The model is a Sequential of [embedding, block 0 .. block L-1,
// head], so a pipeline can cut it between blocks; the head's output projection is the token
// embedding's weight (tied) unless the configuration unties it.
//
//   nn::GptConfig config{.vocab_size = 256, .block_size = 64, .layers = 4, .heads = 4, .embd = 128};
//   auto model = nn::gpt(config);             // tokens (B, T) i64 -> logits (B, T, vocab)
//   Variable loss = nn::lm_loss(model->forward(Variable(tokens)), targets);
#pragma once

#include "dtrain/layers/sequential.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::nn {

enum class GptArchitecture {
  Gpt2,   // learned positions, LayerNorm, GELU (tanh), MLP 4 x width
  Llama,  // rotary positions, RMSNorm, SwiGLU MLP, never biases
};

// Activation recomputation per block in training (autograd/checkpoint.h): memory for one
// more forward of what is recomputed. Full keeps only each block's input; Attention keeps
// the MLP's activations and recomputes the attention branch, norm_1(x) to its projection,
// whose T^2 probabilities per head are most of a block's activations at long sequences.
enum class Recompute { None, Full, Attention };

struct GptConfig {
  GptArchitecture architecture = GptArchitecture::Gpt2;
  std::int64_t vocab_size = 50257;
  std::int64_t block_size = 1024;  // the longest sequence (GPT-2: the position table's size)
  std::int64_t layers = 12;
  std::int64_t heads = 12;
  std::int64_t kv_heads = 0;  // key/value heads (grouped-query attention); 0: as many as heads
  std::int64_t embd = 768;
  // The MLP's hidden width; 0: 4 x embd for GPT-2, and for Llama 2/3 of that rounded up to
  // a multiple of 64 (Llama's rule, which keeps SwiGLU's three matrices near GPT-2's two).
  std::int64_t mlp_hidden = 0;
  double dropout = 0;          // embeddings, attention weights, residual branches
  bool bias = true;            // GPT-2's Linear and LayerNorm biases (Llama: always false)
  bool tie_embeddings = true;  // the output projection is the token embedding
  double norm_eps = 1e-5;
  double rope_theta = 10000;  // Llama only
  Recompute recompute = Recompute::None;

  std::int64_t kv_heads_or_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t head_dim() const { return embd / heads; }
  std::int64_t mlp_width() const;
  // Throws, naming the field, unless the sizes fit together (heads divide embd, ...).
  void validate() const;
  // "gpt2 4 layers, 4 heads (kv 4), width 128, vocab 256, block 64, dropout 0, bias false"
  // (and ", recompute full" or ", recompute attention" when it recomputes)
  std::string describe() const;
};

class Gpt;
namespace detail {
class GptHead;
}

// A GPT model with fresh weights: every Linear weight and embedding ~ N(0, 0.02), the
// residual projections' N(0, 0.02 / sqrt(2 L)) (GPT-2's scaling), biases 0, norm weights 1
// (nanoGPT's initialization), drawn from the default generator in parameter order.
std::shared_ptr<Gpt> gpt(const GptConfig& config);

class Gpt : public Sequential {
 public:
  explicit Gpt(const GptConfig& config);
  const GptConfig& config() const { return config_; }
  std::string describe() const override;

  // The generator every dropout of the model draws from: a program seeds it per rank and
  // step (Generator::set_state) so that a rerun, or a resumed run, drops the same units.
  Generator& dropout_generator() { return *dropout_gen_; }

  // Parameters as PyTorch's model.parameters() counts them (the tied weight once); the
  // "non-embedding" count leaves out the position table, as nanoGPT reports it.
  std::int64_t parameter_count(bool non_embedding = false) const;
  // The training FLOPs of one token at sequence length T (PaLM's estimate, nanoGPT's MFU):
  // 6 N + 12 L T d with N the non-embedding parameters.
  double flops_per_token(std::int64_t sequence_length) const;

  // Continues `prompt` (token ids) by `count` tokens, one forward per token over the last
  // block_size tokens: each from softmax(logits / temperature) over the top_k most likely
  // tokens (top_k 0: all; temperature 0: the most likely). In eval mode, without gradients;
  // the model's mode is restored.
  std::vector<std::int32_t> generate(std::vector<std::int32_t> prompt, std::int64_t count, double temperature,
                                     std::int64_t top_k, Generator& gen);

  // The fused loss: the head stops at its final norm, so forward returns the normalized
  // hidden states (B, T, d), and loss() projects them to the vocabulary and takes the
  // cross-entropy chunk by chunk (linear_cross_entropy), never keeping the (B, T, V) logits
  // for backward. Off by default (forward returns logits). For a model whose head's weight
  // the loss may read outside the head's forward: a whole model, its parameters not sharded
  // (train_gpt turns it on without pipelines, tensor parallelism and ZeRO-3). generate()
  // projects either way.
  void set_fused_loss(bool on);
  bool fused_loss() const;
  // The mean cross-entropy of forward's output against targets (B, T): lm_loss on logits,
  // or the fused projection and loss on hidden states.
  Variable loss(const Variable& output, const Tensor& targets) const;

 private:
  detail::GptHead& head() const;

  GptConfig config_;
  std::shared_ptr<Generator> dropout_gen_;
};

// Mean cross-entropy of logits (B, T, V) against targets (B, T) (i64 or i32): the language
// model's loss, every token weighted alike.
Variable lm_loss(const Variable& logits, const Tensor& targets);

// "none", "full", "attention"; parse_recompute reads them back (throws naming the others).
const char* recompute_name(Recompute r);
Recompute parse_recompute(const std::string& name);

}  // namespace dtrain::nn
