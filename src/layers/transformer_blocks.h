// The pieces of nn::Gpt (layers/gpt.h): the token (and position) embedding, causal
// self-attention, the MLP, the pre-norm residual block and the output head. Private: the
// model's layout, not a public layer set.
#pragma once

#include "dtrain/layers/gpt.h"
#include "dtrain/layers/linear.h"
#include "dtrain/layers/embedding.h"

#include <memory>

namespace dtrain::nn::detail {

// Tokens (B, T) -> (B, T, d): the token embedding, plus (GPT-2) the learned position
// embedding of positions 0 .. T-1, then dropout.
class GptEmbedding : public Module {
 public:
  GptEmbedding(const GptConfig& config, std::shared_ptr<Generator> gen);
  Variable forward(const Variable& tokens) override;
  std::string describe() const override { return "GptEmbedding"; }
  const Variable& token_weight() const { return wte_->weight; }

 private:
  GptConfig config_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<Embedding> wte_, wpe_;
};

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GptConfig& config, std::shared_ptr<Generator> gen);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

 private:
  GptConfig config_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
};

class GptMlp : public Module {
 public:
  GptMlp(const GptConfig& config, std::shared_ptr<Generator> gen);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

 private:
  GptConfig config_;
  std::shared_ptr<Generator> gen_;
  std::shared_ptr<Linear> c_fc_, c_proj_;     // GPT-2
  std::shared_ptr<Linear> gate_, up_, down_;  // Llama (SwiGLU)
};

// x + attn(norm_1(x)), then + mlp(norm_2(x)); in training, recomputed in backward as the
// configuration says (gpt.h's Recompute), from the dropout generator `gen` as it stood.
class TransformerBlock : public Module {
 public:
  TransformerBlock(const GptConfig& config, std::shared_ptr<Generator> gen);
  Variable forward(const Variable& x) override;
  std::string describe() const override { return "TransformerBlock"; }

 private:
  Variable attention_branch(const Variable& x);  // attn(norm_1(x))
  Variable block(const Variable& x);             // the whole block, never recomputed itself

  Recompute recompute_;
  std::shared_ptr<Generator> gen_;
  ModulePtr ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<GptMlp> mlp_;
};

// The final norm and the output projection to the vocabulary ("lm_head.weight"): with tied
// embeddings the token embedding's weight, registered here too (the model lists it once,
// in the embedding; a pipeline stage that holds the head alone lists it here).
class GptHead : public Module {
 public:
  GptHead(const GptConfig& config, Variable tied_weight);
  Variable forward(const Variable& x) override;
  std::string describe() const override { return "GptHead"; }
  // Whether forward stops after the final norm, for a loss that projects to the vocabulary
  // itself (Gpt::set_fused_loss).
  void set_hidden_output(bool on) { hidden_output_ = on; }
  bool hidden_output() const { return hidden_output_; }
  const Variable& output_weight() const { return output_weight_; }  // lm_head.weight, (V, d)

 private:
  ModulePtr ln_f_, lm_head_;
  Variable output_weight_;
  bool hidden_output_ = false;
};

// The normalization the architecture uses over the last dim.
ModulePtr make_norm(const GptConfig& config);

}  // namespace dtrain::nn::detail
