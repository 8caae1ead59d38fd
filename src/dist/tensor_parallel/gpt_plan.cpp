#include "dtrain/dist/tensor_parallel/gpt_plan.h"

namespace dtrain::dist {

TensorParallelPlan gpt_tensor_parallel_plan(const nn::GptConfig& c) {
  // Paths: 0 the embedding (wte, wpe), 1 .. L the blocks, L + 1 the head (ln_f, lm_head).
  const std::int64_t hd = c.head_dim(), q = c.heads * hd, kv = c.kv_heads_or_heads() * hd;
  TensorParallelPlan plan = {
      {"0", ParallelStyle::ShardSequence},
      {"0.wte", ParallelStyle::VocabEmbedding},
      {"*.ln_1", ParallelStyle::SequenceNorm},
      {"*.attn", ParallelStyle::PrepareInput},
      {"*.attn.c_attn", ParallelStyle::Colwise, {q, kv, kv}, hd},
      {"*.attn.c_proj", ParallelStyle::Rowwise},
      {"*.ln_2", ParallelStyle::SequenceNorm},
      {"*.mlp", ParallelStyle::PrepareInput},
  };
  if (c.architecture == nn::GptArchitecture::Llama) {
    plan.push_back({"*.mlp.gate_proj", ParallelStyle::Colwise});
    plan.push_back({"*.mlp.up_proj", ParallelStyle::Colwise});
    plan.push_back({"*.mlp.down_proj", ParallelStyle::Rowwise});
  } else {
    plan.push_back({"*.mlp.c_fc", ParallelStyle::Colwise});
    plan.push_back({"*.mlp.c_proj", ParallelStyle::Rowwise});
  }
  plan.push_back({"*.ln_f", ParallelStyle::SequenceNorm});
  plan.push_back({"*.lm_head", ParallelStyle::PrepareInput});
  plan.push_back({"*.lm_head", ParallelStyle::VocabOutput});
  return plan;
}

}  // namespace dtrain::dist
