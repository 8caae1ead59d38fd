// Attention and whole GPT models on CUDA against the CPU: scaled_dot_product_attention
// (causal, grouped-query heads) forward and backward, then a GPT-2-style and a Llama-style
// model's logits, loss and every parameter's gradient from the same weights and tokens.
// Tolerances: f32 products and softmax rows summed in other orders (cuBLAS, the device's
// reductions): 1e-4 relative in norm over the whole model, 1e-5 for one attention.
#include "cuda_test.h"
#include "dtrain/autograd/attention.h"
#include "dtrain/layers/gpt.h"

#include <cmath>

namespace dtrain::test {
namespace {

double relative(const Tensor& got, const Tensor& want) {
  const Tensor a = got.to(Device::cpu()).to(DType::f64), b = want.to(DType::f64);
  return std::sqrt(sum(square(sub(a, b))).item()) / std::max(std::sqrt(sum(square(b)).item()), 1e-30);
}

}  // namespace

TEST_CASE("CUDA attention equals the CPU's, forward and backward, grouped-query heads", "[cuda]") {
  if (!cuda_ready()) return;
  for (std::int64_t kv : {4, 2}) {
    Tensor q = random_tensor({2, 4, 9, 8}, 1), k = random_tensor({2, kv, 9, 8}, 2), v = random_tensor({2, kv, 9, 8}, 3);
    Tensor g = random_tensor({2, 4, 9, 8}, 4);
    std::vector<Tensor> results[2];
    for (int on_gpu = 0; on_gpu < 2; ++on_gpu) {
      const Device d = on_gpu ? kGpu : Device::cpu();
      Variable vq(q.to(d), true), vk(k.to(d), true), vv(v.to(d), true);
      Variable out = scaled_dot_product_attention(vq, vk, vv);
      out.backward(g.to(d));
      results[on_gpu] = {out.data(), vq.grad(), vk.grad(), vv.grad()};
    }
    for (int i = 0; i < 4; ++i) {
      INFO("kv heads " << kv << ", output " << i);
      REQUIRE(relative(results[1][static_cast<std::size_t>(i)], results[0][static_cast<std::size_t>(i)]) < 1e-5);
    }
  }
}

TEST_CASE("CUDA GPTs (GPT-2 and Llama style) equal the CPU's logits, loss and gradients", "[cuda]") {
  if (!cuda_ready()) return;
  for (auto arch : {nn::GptArchitecture::Gpt2, nn::GptArchitecture::Llama}) {
    nn::GptConfig c{.architecture = arch, .vocab_size = 50, .block_size = 16, .layers = 2, .heads = 4, .embd = 32};
    if (arch == nn::GptArchitecture::Llama) c.kv_heads = 2;
    manual_seed(3);
    auto cpu = nn::gpt(c);
    manual_seed(3);
    auto gpu = nn::gpt(c);
    gpu->to(kGpu);
    Tensor stream = random_tensor({3, 17}, 5, DType::f64, 0, 50).to(DType::i64);
    const Tensor tokens = stream.narrow(1, 0, 16).contiguous(), targets = stream.narrow(1, 1, 16).contiguous();
    Variable lc = nn::lm_loss((*cpu)(Variable(tokens)), targets);
    lc.backward();
    Variable lg = nn::lm_loss((*gpu)(Variable(tokens.to(kGpu))), targets.to(kGpu));
    lg.backward();
    INFO("architecture " << (arch == nn::GptArchitecture::Llama ? "llama" : "gpt2"));
    REQUIRE(std::abs(lg.item() - lc.item()) < 1e-5 * std::abs(lc.item()));
    const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
    REQUIRE(pc.size() == pg.size());
    for (std::size_t i = 0; i < pc.size(); ++i) {
      INFO("gradient of " << pc[i].first);
      REQUIRE(relative(pg[i].second.grad(), pc[i].second.grad()) < 1e-4);
    }
  }
}

}  // namespace dtrain::test
