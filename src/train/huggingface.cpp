#include "dtrain/train/huggingface.h"

#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/core/error.h"

#include <nlohmann/json.hpp>

#include <map>

namespace dtrain::train {

namespace {
// dtrain's parameter names (model order) to GPT-2's, and whether the weight is a Conv1D's.
struct Mapping {
  std::string name;
  bool transpose = false;
};

std::map<std::string, Mapping> gpt2_names(const nn::GptConfig& c) {
  std::map<std::string, Mapping> m{{"0.wte.weight", {"transformer.wte.weight"}},
                                   {"0.wpe.weight", {"transformer.wpe.weight"}}};
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string d = std::to_string(i + 1), h = "transformer.h." + std::to_string(i) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      m[d + "." + ln + ".weight"] = {h + ln + ".weight"};
      m[d + "." + ln + ".bias"] = {h + ln + ".bias"};
    }
    for (const char* lin : {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"}) {
      m[d + "." + lin + ".weight"] = {h + lin + ".weight", true};
      m[d + "." + lin + ".bias"] = {h + lin + ".bias"};
    }
  }
  const std::string head = std::to_string(c.layers + 1);
  m[head + ".ln_f.weight"] = {"transformer.ln_f.weight"};
  m[head + ".ln_f.bias"] = {"transformer.ln_f.bias"};
  m[head + ".lm_head.weight"] = {"lm_head.weight"};
  return m;
}

// The bias GPT-2 has where dtrain's model has none: its name, with zeros of its size.
std::vector<std::pair<std::string, std::int64_t>> gpt2_biases(const nn::GptConfig& c) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    out.emplace_back(h + "ln_1.bias", c.embd);
    out.emplace_back(h + "attn.c_attn.bias", 3 * c.embd);
    out.emplace_back(h + "attn.c_proj.bias", c.embd);
    out.emplace_back(h + "ln_2.bias", c.embd);
    out.emplace_back(h + "mlp.c_fc.bias", c.mlp_width());
    out.emplace_back(h + "mlp.c_proj.bias", c.embd);
  }
  out.emplace_back("transformer.ln_f.bias", c.embd);
  return out;
}
}  // namespace

void export_gpt2(const nn::Gpt& model, const std::filesystem::path& dir) {
  const nn::GptConfig& c = model.config();
  DTRAIN_CHECK(c.architecture == nn::GptArchitecture::Gpt2,
               "export_gpt2: a Llama-style model has no GPT-2 layout (RMSNorm, rotary positions, SwiGLU)");
  DTRAIN_CHECK(c.mlp_width() == 4 * c.embd && c.kv_heads_or_heads() == c.heads,
               "export_gpt2: GPT2LMHeadModel has an MLP of 4 x width and no grouped-query heads (this model: MLP {}, "
               "{} key/value heads of {})",
               c.mlp_width(), c.kv_heads_or_heads(), c.heads);
  const auto names = gpt2_names(c);
  checkpoint::NamedTensors tensors;
  std::map<std::string, bool> present;
  for (const auto& [name, t] : model.state_dict()) {
    const auto it = names.find(name);
    DTRAIN_CHECK(it != names.end(), "export_gpt2: no GPT-2 name for parameter '{}'", name);
    Tensor v = t.to(Device::cpu()).to(DType::f32);
    if (it->second.transpose) v = v.t();
    tensors.emplace_back(it->second.name, v.contiguous());
    present[it->second.name] = true;
  }
  for (const auto& [name, size] : gpt2_biases(c)) {
    if (!present.count(name)) tensors.emplace_back(name, Tensor::zeros({size}));
  }
  std::filesystem::create_directories(dir);
  checkpoint::AtomicFile weights(dir / "model.safetensors");
  checkpoint::write_safetensors(weights, tensors, {{"format", "pt"}});
  weights.commit();
  const nlohmann::json config{{"architectures", {"GPT2LMHeadModel"}},
                              {"model_type", "gpt2"},
                              {"vocab_size", c.vocab_size},
                              {"n_positions", c.block_size},
                              {"n_ctx", c.block_size},
                              {"n_embd", c.embd},
                              {"n_layer", c.layers},
                              {"n_head", c.heads},
                              {"n_inner", nullptr},
                              {"activation_function", "gelu_new"},
                              {"layer_norm_epsilon", c.norm_eps},
                              {"resid_pdrop", c.dropout},
                              {"embd_pdrop", c.dropout},
                              {"attn_pdrop", c.dropout},
                              {"tie_word_embeddings", c.tie_embeddings},
                              {"bos_token_id", c.vocab_size - 1},
                              {"eos_token_id", c.vocab_size - 1}};
  checkpoint::AtomicFile config_file(dir / "config.json");
  config_file.write(config.dump(2) + "\n");
  config_file.commit();
}

}  // namespace dtrain::train
