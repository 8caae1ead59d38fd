// Writes what check_gpt_reference.py compares with its PyTorch twin of the model: a small
// GPT (GPT-2 or Llama style, dropout off) with its initial weights, a batch of tokens and
// targets, dtrain's logits, loss and every parameter's gradient on that batch, and the
// losses of 10 AdamW steps on it (nanoGPT's groups: decay on tensors of 2 or more dims).
// GPT-2 models are also exported for Hugging Face (train/huggingface.h) into OUT_hf/, before
// the steps, for check_gpt2_transformers.py.
//   write_gpt_reference gpt2|gpt2-nobias|llama f64|f32 OUT.safetensors
#include "dtrain/checkpoint/atomic_file.h"
#include "dtrain/checkpoint/safetensors.h"
#include "dtrain/core/error.h"
#include "dtrain/layers/gpt.h"
#include "dtrain/optim/adam.h"
#include "dtrain/train/huggingface.h"

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  using namespace dtrain;
  try {
    DTRAIN_CHECK(argc == 4, "usage: write_gpt_reference gpt2|gpt2-nobias|llama f64|f32 OUT.safetensors");
    const std::string arch = argv[1], dtype_name = argv[2];
    DTRAIN_CHECK(arch == "gpt2" || arch == "gpt2-nobias" || arch == "llama",
                 "architecture '{}': expected gpt2, gpt2-nobias or llama", arch);
    DTRAIN_CHECK(dtype_name == "f64" || dtype_name == "f32", "dtype '{}': expected f64 or f32", dtype_name);
    const DType dtype = dtype_name == "f64" ? DType::f64 : DType::f32;
    nn::GptConfig config{.vocab_size = 61, .block_size = 16, .layers = 2, .heads = 4, .embd = 32};
    if (arch == "llama") {
      config.architecture = nn::GptArchitecture::Llama;
      config.kv_heads = 2;  // grouped-query attention
      config.bias = false;
    }
    if (arch == "gpt2-nobias") config.bias = false;
    manual_seed(7);
    auto model = nn::gpt(config);
    for (auto& p : model->parameters()) p.set_data(p.data().to(dtype));
    const std::int64_t batch = 3, t = config.block_size;
    Tensor stream = Tensor::empty({batch, t + 1}, {DType::f64});
    uniform_(stream, 0, static_cast<double>(config.vocab_size));
    stream = stream.to(DType::i64);
    const Tensor tokens = stream.narrow(1, 0, t).contiguous(), targets = stream.narrow(1, 1, t).contiguous();

    checkpoint::NamedTensors out;
    for (const auto& [name, p] : model->named_parameters()) out.emplace_back("param." + name, p.data().clone());
    out.emplace_back("tokens", tokens);
    out.emplace_back("targets", targets);
    Variable logits = (*model)(Variable(tokens));
    Variable loss = nn::lm_loss(logits, targets);
    loss.backward();
    out.emplace_back("logits", logits.data());
    out.emplace_back("loss", loss.data().reshape({1}));
    for (const auto& [name, p] : model->named_parameters()) out.emplace_back("grad." + name, p.grad().clone());
    if (arch != "llama") train::export_gpt2(*model, std::string(argv[3]) + "_hf");

    // 10 AdamW steps on the same batch, from the first step's gradients on.
    optim::AdamW adamw(
        model->parameters(),
        {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1, .exclude_1d_from_weight_decay = true});
    Tensor losses = Tensor::empty({10}, {DType::f64});
    for (int step = 0; step < 10; ++step) {
      if (step > 0) {
        model->zero_grad();
        loss = nn::lm_loss((*model)(Variable(tokens)), targets);
        loss.backward();
      }
      losses.data<double>()[step] = loss.item();
      adamw.step();
    }
    out.emplace_back("adamw_losses", losses);
    checkpoint::AtomicFile file(argv[3]);
    checkpoint::write_safetensors(file, out,
                                  {{"architecture", arch == "llama" ? arch : "gpt2"},
                                   {"dtype", dtype_name},
                                   {"vocab_size", "61"},
                                   {"block_size", "16"},
                                   {"layers", "2"},
                                   {"heads", "4"},
                                   {"kv_heads", std::to_string(config.kv_heads_or_heads())},
                                   {"embd", "32"},
                                   {"mlp_hidden", std::to_string(config.mlp_width())},
                                   {"bias", config.bias ? "true" : "false"},
                                   {"norm_eps", "1e-5"},
                                   {"rope_theta", "10000"},
                                   {"lr", "1e-2"},
                                   {"betas", "0.9,0.95"},
                                   {"weight_decay", "0.1"}});
    file.commit();
    std::printf("write_gpt_reference: %s %s: loss %.10f, 10 AdamW steps to %.10f\n", arch.c_str(), dtype_name.c_str(),
                losses.data<double>()[0], losses.data<double>()[9]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "write_gpt_reference: %s\n", e.what());
    return 1;
  }
}
