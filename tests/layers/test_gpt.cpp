// nn::gpt: parameter counts as PyTorch counts them (the tied weight once), causality (a
// token never changes the logits before it), finite-difference gradients through the whole
// model for both architectures, dropout keyed by its generator, recomputation (full and
// attention only) giving the plain model's loss and gradients, sampling, bad configs.
#include "dtrain/layers/gpt.h"
#include "support/test_support.h"

using namespace dtrain;

namespace {
nn::GptConfig tiny(nn::GptArchitecture arch) {
  nn::GptConfig c{.architecture = arch, .vocab_size = 11, .block_size = 6, .layers = 2, .heads = 2, .embd = 8};
  if (arch == nn::GptArchitecture::Llama) c.kv_heads = 1;
  return c;
}

Tensor tokens_of(const std::vector<std::int64_t>& ids, std::int64_t rows) {
  return Tensor::from_vector(ids, {rows, static_cast<std::int64_t>(ids.size()) / rows});
}

bool has_name(const nn::Module& m, const std::string& name) {
  for (const auto& [n, p] : m.named_parameters())
    if (n == name) return true;
  return false;
}
}  // namespace

TEST_CASE("gpt: parameters as PyTorch counts them, the tied weight once", "[layers][gpt]") {
  const std::int64_t v = 61, t = 16, d = 32;
  nn::GptConfig c{.vocab_size = v, .block_size = t, .layers = 2, .heads = 4, .embd = d};
  auto model = nn::gpt(c);
  // GPT-2 with biases: embeddings; per block ln_1, c_attn, c_proj, ln_2, c_fc, c_proj; ln_f.
  const std::int64_t block = 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d);
  REQUIRE(model->parameter_count() == v * d + t * d + 2 * block + 2 * d);
  REQUIRE(model->parameter_count(true) == v * d + 2 * block + 2 * d);  // nanoGPT leaves out positions
  REQUIRE(has_name(*model, "0.wte.weight"));
  REQUIRE_FALSE(has_name(*model, "3.lm_head.weight"));  // the embedding's, listed once
  // The head alone (a pipeline's last stage) lists the tied weight as its own.
  REQUIRE((*model)[3]->parameters().size() == 3);  // ln_f weight and bias, the tied weight
  REQUIRE((*model)[3]->parameters()[2].is((*model)[0]->parameters()[0]));

  c.tie_embeddings = false;
  c.bias = false;
  auto untied = nn::gpt(c);
  REQUIRE(has_name(*untied, "3.lm_head.weight"));
  REQUIRE_FALSE(has_name(*untied, "1.attn.c_attn.bias"));
  REQUIRE_FALSE(has_name(*untied, "1.ln_1.bias"));

  nn::GptConfig l{.architecture = nn::GptArchitecture::Llama,
                  .vocab_size = v,
                  .block_size = t,
                  .layers = 2,
                  .heads = 4,
                  .kv_heads = 2,
                  .embd = d};
  auto llama = nn::gpt(l);
  const std::int64_t hidden = l.mlp_width();
  REQUIRE(hidden == 128);  // ceil(8 * 32 / 3) = 86, rounded up to a multiple of 64
  const std::int64_t lblock = d + d * (4 + 2 * 2) * (d / 4) + d * d + d + 3 * d * hidden;
  REQUIRE(llama->parameter_count() == v * d + 2 * lblock + d);  // no position table, no biases
  REQUIRE_FALSE(has_name(*llama, "0.wpe.weight"));
}

TEST_CASE("gpt: logits (B, T, V), and a token changes no logit before it", "[layers][gpt]") {
  for (auto arch : {nn::GptArchitecture::Gpt2, nn::GptArchitecture::Llama}) {
    manual_seed(3);
    auto model = nn::gpt(tiny(arch));
    model->eval();
    NoGradGuard no_grad;
    Tensor a = (*model)(Variable(tokens_of({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2))).data();
    REQUIRE(a.shape() == Shape{2, 5, 11});
    Tensor b = (*model)(Variable(tokens_of({1, 2, 3, 0, 5, 6, 7, 8, 9, 10}, 2))).data();
    REQUIRE(max_abs_diff(a.narrow(1, 0, 3), b.narrow(1, 0, 3)) == 0);
    REQUIRE(max_abs_diff(a.narrow(1, 3, 2), b.narrow(1, 3, 2)) > 1e-6);
    REQUIRE(max_abs_diff(a.narrow(0, 1, 1), b.narrow(0, 1, 1)) == 0);  // the other sequence
  }
}

TEST_CASE("grad: a whole GPT in f64 (GPT-2 and Llama with grouped-query heads)", "[layers][gpt][autograd]") {
  for (auto arch : {nn::GptArchitecture::Gpt2, nn::GptArchitecture::Llama}) {
    nn::GptConfig c = tiny(arch);
    c.layers = 1;
    c.embd = 4;
    c.vocab_size = 7;
    manual_seed(5);
    auto model = nn::gpt(c);
    for (auto& p : model->parameters()) p.set_data(p.data().to(DType::f64));
    const Tensor tokens = tokens_of({1, 6, 2, 0, 3, 5, 4, 1}, 2);
    const Tensor targets = tokens_of({6, 2, 0, 3, 5, 4, 1, 2}, 2);
    const std::vector<Variable> params = model->parameters();
    test::require_grad_ok(
        [&](const std::vector<Variable>&) { return nn::lm_loss((*model)(Variable(tokens)), targets); }, params);
  }
}

TEST_CASE("gpt: dropout draws from the model's generator", "[layers][gpt]") {
  nn::GptConfig c = tiny(nn::GptArchitecture::Gpt2);
  c.dropout = 0.3;
  manual_seed(1);
  auto model = nn::gpt(c);
  const Tensor tokens = tokens_of({1, 2, 3, 4, 5}, 1);
  NoGradGuard no_grad;
  const auto run = [&](std::uint64_t seed, std::uint64_t offset) {
    model->dropout_generator().set_state(seed, offset);
    return (*model)(Variable(tokens)).data();
  };
  REQUIRE(max_abs_diff(run(4, 1 << 20), run(4, 1 << 20)) == 0);
  REQUIRE(max_abs_diff(run(4, 1 << 20), run(4, 2 << 20)) > 0);
  model->eval();
  REQUIRE(max_abs_diff(run(4, 1 << 20), run(5, 0)) == 0);  // no dropout in eval mode
}

TEST_CASE("gpt: recompute full and attention give the loss and every gradient of none, dropout too", "[layers][gpt]") {
  const Tensor tokens = tokens_of({1, 6, 2, 0, 3, 5, 4, 1, 9, 10, 7, 8}, 2);
  const Tensor targets = tokens_of({6, 2, 0, 3, 5, 4, 1, 2, 10, 7, 8, 9}, 2);
  for (auto arch : {nn::GptArchitecture::Gpt2, nn::GptArchitecture::Llama}) {
    for (double p : {0.0, 0.25}) {
      // One training step's loss and gradients, and where the dropout generator ends.
      const auto step = [&](nn::Recompute r) {
        nn::GptConfig c = tiny(arch);
        c.dropout = p;
        c.recompute = r;
        manual_seed(8);
        auto model = nn::gpt(c);
        model->dropout_generator().set_state(5, 1 << 20);
        Variable loss = nn::lm_loss((*model)(Variable(tokens)), targets);
        loss.backward();
        std::vector<Tensor> out{loss.data().clone()};
        for (const Variable& param : model->parameters()) out.push_back(param.grad().clone());
        out.push_back(Tensor::full({1}, static_cast<double>(model->dropout_generator().offset()), {DType::f64}));
        return out;
      };
      const std::vector<Tensor> plain = step(nn::Recompute::None);
      for (auto r : {nn::Recompute::Full, nn::Recompute::Attention}) {
        INFO((arch == nn::GptArchitecture::Llama ? "llama" : "gpt2")
             << ", dropout " << p << ", recompute " << nn::recompute_name(r));
        const std::vector<Tensor> again = step(r);
        REQUIRE(again.size() == plain.size());
        // The same ops on the same tensors in the same order: equal bit for bit in f32.
        for (std::size_t i = 0; i < plain.size(); ++i) {
          INFO("tensor " << i << " (0: the loss, then the gradients, last the generator's offset)");
          CHECK(max_abs_diff(again[i], plain[i]) == 0);
        }
      }
    }
  }
}

TEST_CASE("gpt: recomputation shows in describe(), evaluation runs the plain forward", "[layers][gpt]") {
  nn::GptConfig c = tiny(nn::GptArchitecture::Gpt2);
  CHECK_THAT(c.describe(), !Catch::Contains("recompute"));
  c.recompute = nn::Recompute::Attention;
  CHECK_THAT(c.describe(), Catch::EndsWith(", recompute attention"));
  CHECK(nn::parse_recompute("full") == nn::Recompute::Full);
  REQUIRE_THROWS_WITH(nn::parse_recompute("some"),
                      Catch::Contains("recompute 'some': expected none, full or attention"));
  c.recompute = static_cast<nn::Recompute>(7);
  REQUIRE_THROWS_WITH(nn::gpt(c), Catch::Contains("recompute 7 is not None, Full or Attention"));
  // Without grad mode (or in eval mode) a recomputing model is the plain one.
  c.recompute = nn::Recompute::Full;
  manual_seed(4);
  auto model = nn::gpt(c);
  c.recompute = nn::Recompute::None;
  manual_seed(4);
  auto plain = nn::gpt(c);
  const Tensor tokens = tokens_of({1, 2, 3, 4, 5, 6}, 1);
  model->eval();
  plain->eval();
  CHECK(max_abs_diff((*model)(Variable(tokens)).data(), (*plain)(Variable(tokens)).data()) == 0);
}

TEST_CASE("gpt: generation is the generator's, greedy at temperature 0", "[layers][gpt]") {
  manual_seed(2);
  auto model = nn::gpt(tiny(nn::GptArchitecture::Gpt2));
  Generator g1(9), g2(9);
  const auto a = model->generate({1, 2}, 12, 1.0, 5, g1);
  const auto b = model->generate({1, 2}, 12, 1.0, 5, g2);
  REQUIRE(a.size() == 14);  // the prompt, then 12 tokens, longer than the block (6)
  REQUIRE(a == b);
  REQUIRE(model->is_training());  // the mode is restored
  // Temperature 0: each token is the argmax of the logits at the last position.
  Generator g3(1);
  const auto greedy = model->generate({3}, 1, 0, 0, g3);
  model->eval();
  NoGradGuard no_grad;
  Tensor logits = (*model)(Variable(tokens_of({3}, 1))).data().reshape({11});
  REQUIRE(greedy[1] == argmax(logits, 0).item());
  REQUIRE_THROWS_WITH(model->generate({11}, 1, 1, 0, g3), Catch::Contains("prompt token 11 outside the vocabulary"));
}

TEST_CASE("gpt: bad configurations and inputs are refused naming the field", "[layers][gpt]") {
  nn::GptConfig c = tiny(nn::GptArchitecture::Gpt2);
  c.heads = 3;
  REQUIRE_THROWS_WITH(nn::gpt(c), Catch::Contains("embd 8 must be a positive multiple of heads 3"));
  c = tiny(nn::GptArchitecture::Llama);
  c.kv_heads = 3;
  c.heads = 2;
  REQUIRE_THROWS_WITH(nn::gpt(c), Catch::Contains("heads 2 must be a multiple of kv_heads 3"));
  c = tiny(nn::GptArchitecture::Llama);
  c.heads = 8;
  c.kv_heads = 0;
  REQUIRE_THROWS_WITH(nn::gpt(c), Catch::Contains("rotary embeddings need an even head dim, got 1"));
  auto model = nn::gpt(tiny(nn::GptArchitecture::Gpt2));
  REQUIRE_THROWS_WITH((*model)(Variable(tokens_of({1, 2, 3, 4, 5, 6, 7}, 1))),
                      Catch::Contains("a sequence of 7 tokens is longer than the block size 6"));
  REQUIRE_THROWS_WITH(nn::lm_loss(Variable(Tensor::zeros({2, 3, 4})), Tensor::zeros({2, 4}, {DType::i64})),
                      Catch::Contains("expected (B, T, V) and (B, T)"));
}
