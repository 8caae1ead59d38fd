// Tensor and sequence parallelism against one process (run under mpirun at np 2, 3 and 4,
// the tensor-parallel group being the whole world): the vocabulary-parallel cross-entropy,
// and GPT-2 and Llama-style models split by gpt_tensor_parallel_plan, with and without
// sequence parallelism: logits (this rank's vocabulary columns), loss and every gradient
// (this rank's slices of the whole ones) within 1e-5 relative in f32. The collectives per
// layer are counted (CommDebugMode) and must be the design's.
#include "dtrain/comm/communicator.h"
#include "dtrain/dist/tensor_parallel/comm_debug.h"
#include "dtrain/dist/tensor_parallel/gpt_plan.h"
#include "dtrain/dist/tensor_parallel/tensor_parallel_ops.h"
#include "dtrain/layers/gpt.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

using namespace dtrain;

namespace {

// Largest |a - b| over the largest |b| (0 for two zero tensors).
double relative_error(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(DType::f64).contiguous(), y = b.to(DType::f64).contiguous();
  REQUIRE(x.shape() == y.shape());
  double diff = 0, scale = 0;
  const double* p = x.data<double>();
  const double* q = y.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    diff = std::max(diff, std::abs(p[i] - q[i]));
    scale = std::max(scale, std::abs(q[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

// The whole tensor's part that a slice describes, pieces side by side.
Tensor slice_of(const Tensor& whole, const dist::ParameterSlice& s) {
  std::vector<Tensor> parts;
  for (const auto& [begin, size] : s.pieces) parts.push_back(whole.narrow(s.dim, begin, size));
  return parts.size() == 1 ? parts.front().contiguous() : cat(parts, s.dim);
}

Tensor tokens(std::int64_t b, std::int64_t t, std::int64_t vocab, int salt) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < b * t; ++i) v.push_back(static_cast<double>((i * 37 + salt * 11 + i / 5) % vocab));
  return Tensor::from_vector(v, {b, t}).to(DType::i64);
}

struct Pass {
  Tensor logits;
  double loss = 0;
  std::map<std::string, Tensor> grads;
};

Pass run(nn::Module& model, const Tensor& input, const Tensor& target,
         const std::function<Variable(const Variable&, const Tensor&)>& loss_fn) {
  Variable logits = model(Variable(input));
  Variable loss = loss_fn(logits, target);
  loss.backward();
  Pass p{logits.data().clone(), loss.item(), {}};
  for (const auto& [name, param] : model.named_parameters()) {
    if (param.has_grad()) p.grads.emplace(name, param.grad().clone());
  }
  return p;
}

// The bytes tokenizer's 256 ids: uneven vocabulary shards at 3 ranks.
nn::GptConfig config_for(bool llama, int ranks) {
  nn::GptConfig c{.vocab_size = 256, .block_size = 24, .layers = 2, .heads = ranks, .embd = 8 * ranks, .bias = true};
  if (llama) {
    c.architecture = nn::GptArchitecture::Llama;
    c.kv_heads = ranks;  // grouped-query heads: two query heads per key/value head
    c.heads = 2 * ranks;
    c.embd = 16 * ranks;
  }
  return c;
}

}  // namespace

TEST_CASE("vocabulary-parallel cross-entropy equals the whole one, value and gradient", "[dist][mpi][tp]") {
  auto world = dist::world();
  const int W = world->size(), r = world->rank();
  // 23 columns do not divide by 2, 3 or 4: the shards differ in width.
  const std::int64_t B = 3, T = 5, V = 23;
  manual_seed(3);
  Tensor whole = mul(Tensor::empty({B, T, V}), 0.0);
  normal_(whole, 0, 2);
  const Tensor target = tokens(B, T, V, 1);
  Variable reference(whole.clone(), true);
  Variable ref_loss = cross_entropy(reshape(reference, {-1, V}), target.reshape({-1}));
  ref_loss.backward();
  const dist::SplitRange mine = dist::split_range(V, W, r);
  Variable local(whole.narrow(2, mine.begin, mine.size).contiguous(), true);
  Variable loss = dist::vocab_parallel_cross_entropy(local, target, mine.begin, world);
  loss.backward();
  CHECK(std::abs(loss.item() - ref_loss.item()) <= 1e-6 * std::abs(ref_loss.item()));
  CHECK(relative_error(local.grad(), reference.grad().narrow(2, mine.begin, mine.size)) < 1e-5);
}

TEST_CASE("split_range: as even as whole granules allow", "[dist][cpu][tp]") {
  CHECK(dist::split_range(256, 3, 0).size == 86);
  CHECK(dist::split_range(256, 3, 1).begin == 86);
  CHECK(dist::split_range(256, 3, 2).size == 85);
  CHECK(dist::split_range(64, 2, 1, 16).begin == 32);
  CHECK_THROWS_WITH(dist::split_range(10, 2, 0, 4), Catch::Contains("split_range: 10 in granules of 4"));
}

TEST_CASE("a GPT split by gpt_tensor_parallel_plan equals one process: logits, loss, gradients", "[dist][mpi][tp]") {
  auto world = dist::world();
  const int W = world->size();
  if (W < 2 || W > 4) {
    SUCCEED("the GPT's tensor-parallel comparisons run at np 2, 3 and 4");
    return;
  }
  for (const bool llama : {false, true}) {
    for (const bool sp : {false, true}) {
      DYNAMIC_SECTION((llama ? "llama" : "gpt2") << (sp ? " sequence parallel" : "") << " tp=" << W) {
        const nn::GptConfig config = config_for(llama, W);
        const Tensor input = tokens(2, 24, config.vocab_size, 2), target = tokens(2, 24, config.vocab_size, 3);
        manual_seed(21);
        auto whole = nn::gpt(config);
        const Pass ref = run(*whole, input, target, nn::lm_loss);
        manual_seed(21);  // the same whole weights, then this rank's slices of them
        auto model = nn::gpt(config);
        auto tp = dist::parallelize(*model, world, dist::gpt_tensor_parallel_plan(config), {.sequence_parallel = sp});
        dist::CommDebugMode counting;
        const Pass got = run(*model, input, target, tp->loss());
        tp->finish_gradients();
        CHECK(std::abs(got.loss - ref.loss) <= 1e-5 * ref.loss);
        const dist::SplitRange vocab = dist::split_range(config.vocab_size, W, world->rank());
        CHECK(relative_error(got.logits, ref.logits.narrow(2, vocab.begin, vocab.size)) < 1e-5);
        std::map<std::string, dist::ParameterSlice> slices(tp->slices().begin(), tp->slices().end());
        for (const auto& [name, param] : model->named_parameters()) {
          INFO(name);
          REQUIRE(param.has_grad());
          const Tensor expected =
              slices.contains(name) ? slice_of(ref.grads.at(name), slices.at(name)) : ref.grads.at(name);
          CHECK(relative_error(param.grad(), expected) < 1e-5);
        }
        // The design's collectives (gpt_plan.h), block 1 of 2: plain tensor parallelism
        // all-reduces after attention and after the MLP, and the entries' gradients in
        // backward; sequence parallelism gathers before and reduce-scatters after both.
        INFO(counting.table());
        const std::int64_t activation = 2 * 24 * config.embd * 4;  // B * T * d f32 bytes
        const std::string mlp_out = llama ? "1.mlp.down_proj" : "1.mlp.c_proj";
        if (!sp) {
          CHECK(counting.count("1.attn.c_proj", "all_reduce", "forward") == 1);
          CHECK(counting.count(mlp_out, "all_reduce", "forward") == 1);
          CHECK(counting.count("1.attn", "all_reduce", "backward") == 1);
          CHECK(counting.count("1.mlp", "all_reduce", "backward") == 1);
          CHECK(counting.bytes(mlp_out, "all_reduce", "forward") == activation);
          CHECK(counting.count("", "all_gather") == 0);
        } else {
          CHECK(counting.count("1.attn", "all_gather", "forward") == 1);
          CHECK(counting.count("1.attn.c_proj", "reduce_scatter", "forward") == 1);
          CHECK(counting.count("1.mlp", "all_gather", "forward") == 1);
          CHECK(counting.count(mlp_out, "reduce_scatter", "forward") == 1);
          CHECK(counting.count("1.attn", "reduce_scatter", "backward") == 1);
          CHECK(counting.count(mlp_out, "all_gather", "backward") == 1);
          CHECK(counting.bytes("1.mlp", "all_gather", "forward") == activation / W);
          CHECK(counting.count("1", "all_reduce") == 0);
        }
        // Per step: the embedding's all-reduce, the loss's three (max, target, sum).
        CHECK(counting.count("0.wte", "all_reduce", "forward") == 1);
        CHECK(counting.count("loss", "all_reduce", "forward") == 3);
      }
    }
  }
}

TEST_CASE("tensor parallelism refuses heads that do not split over the ranks", "[dist][mpi][tp]") {
  auto world = dist::world();
  if (world->size() != 2) {
    SUCCEED("checked at np 2");
    return;
  }
  nn::GptConfig config{.vocab_size = 64, .block_size = 8, .layers = 1, .heads = 3, .embd = 24};
  auto model = nn::gpt(config);
  CHECK_THROWS_WITH(dist::parallelize(*model, world, dist::gpt_tensor_parallel_plan(config)),
                    Catch::Contains("1.attn.c_attn (*.attn.c_attn) has a segment of 24 features, which is "
                                    "3 groups of 8 (heads) that do not split over 2 ranks"));
}
