// linear_cross_entropy: its gradients against finite differences in f64, its loss and both
// gradients against the unfused projection and cross-entropy (nn::lm_loss is that
// cross_entropy of the flattened logits; it lives in layers, above this module) at chunk sizes
// that divide the tokens, that do not, 1 and more than all of them, with i32 and i64 targets;
// the paths without gradients, gradient accumulation, the split backward, the memory it
// holds (never the whole logits), and bad input.
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/linear_cross_entropy.h"
#include "dtrain/autograd/split_backward.h"
#include "dtrain/tensor/memory_stats.h"
#include "support/test_support.h"

#include <cmath>

using namespace dtrain;
using test::random_tensor;
using test::require_grad_ok;

namespace {
using Inputs = const std::vector<Variable>&;

// Targets spread over [0, vocab), fixed by the seed.
Tensor targets(const Shape& shape, std::int64_t vocab, std::uint64_t seed, DType dtype = DType::i64) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(shape_numel(shape)));
  std::uint64_t x = seed;
  for (auto& id : ids) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    id = static_cast<std::int64_t>((x >> 33) % static_cast<std::uint64_t>(vocab));
  }
  return Tensor::from_vector(ids, shape).to(dtype);
}

// nn::lm_loss(linear(hidden, weight), targets), written with this module's ops.
Variable unfused(const Variable& hidden, const Variable& weight, const Tensor& y) {
  const Variable logits = linear(hidden, weight, Variable());
  return cross_entropy(reshape(logits, {-1, weight.size(0)}), y.reshape({-1}).to(DType::i64));
}

// max |a - b| over max |b|: the bound the f32 comparisons state.
double relative_error(const Tensor& a, const Tensor& b) {
  const double scale = max(abs(b)).item();
  return max_abs_diff(a, b) / (scale > 0 ? scale : 1);
}

struct Result {
  double loss;
  Tensor grad_h, grad_w;
};

Result run(const std::function<Variable(const Variable&, const Variable&)>& f, const Tensor& h, const Tensor& w) {
  Variable hidden(h, true), weight(w, true);
  Variable loss = f(hidden, weight);
  loss.backward();
  return {loss.item(), hidden.grad(), weight.grad()};
}
}  // namespace

TEST_CASE("grad: linear_cross_entropy (hidden and weight, f64, chunked)", "[autograd][cpu]") {
  // grad_check differentiates sum(loss * r) for a random r: the incoming gradient is not 1.
  for (std::int64_t chunk : {0, 1, 2, 4, 6, 9}) {
    INFO("chunk " << chunk);
    Variable h(random_tensor({2, 3, 4}, 1, DType::f64, -2, 2), true);
    Variable w(random_tensor({7, 4}, 2, DType::f64, -2, 2), true);
    const Tensor y = targets({2, 3}, 7, 3);
    require_grad_ok([&](Inputs in) { return linear_cross_entropy(in[0], in[1], y, {.chunk_tokens = chunk}); }, {h, w});
    // 2-D hidden and i32 targets.
    Variable h2(random_tensor({5, 4}, 4, DType::f64, -2, 2), true);
    const Tensor y2 = targets({5}, 7, 5, DType::i32);
    require_grad_ok([&](Inputs in) { return linear_cross_entropy(in[0], in[1], y2, {.chunk_tokens = chunk}); },
                    {h2, w});
  }
}

TEST_CASE("linear_cross_entropy equals linear + lm_loss in f32 at every chunk size", "[autograd][cpu]") {
  // 2 x 37 = 74 tokens, a vocabulary of 53, width 16; logits of a few units, as a language
  // model's. Bound: 1e-5 relative (loss; gradients: max error over the largest element).
  const Tensor h = random_tensor({2, 37, 16}, 11, DType::f32, -1, 1);
  const Tensor w = random_tensor({53, 16}, 12, DType::f32, -1, 1);
  for (DType dtype : {DType::i64, DType::i32}) {
    const Tensor y = targets({2, 37}, 53, 13, dtype);
    const Result expected = run([&](const Variable& a, const Variable& b) { return unfused(a, b, y); }, h, w);
    for (std::int64_t chunk : {1, 5, 16, 37, 73, 74, 75, 1000, 0}) {
      INFO("targets " << dtype_name(dtype) << ", chunk " << chunk);
      const Result got = run(
          [&](const Variable& a, const Variable& b) { return linear_cross_entropy(a, b, y, {.chunk_tokens = chunk}); },
          h, w);
      CHECK(std::abs(got.loss - expected.loss) <= 1e-5 * std::abs(expected.loss));
      CHECK(got.grad_h.shape() == h.shape());
      CHECK(relative_error(got.grad_h, expected.grad_h) <= 1e-5);
      CHECK(relative_error(got.grad_w, expected.grad_w) <= 1e-5);
    }
  }
  // (N, d) hidden with (N) targets, as cross_entropy takes them.
  const Tensor h2 = h.reshape({74, 16});
  const Tensor y2 = targets({74}, 53, 14);
  const Result expected = run([&](const Variable& a, const Variable& b) { return unfused(a, b, y2); }, h2, w);
  const Result got = run([&](const Variable& a, const Variable& b) { return linear_cross_entropy(a, b, y2); }, h2, w);
  CHECK(std::abs(got.loss - expected.loss) <= 1e-5 * std::abs(expected.loss));
  CHECK(relative_error(got.grad_h, expected.grad_h) <= 1e-5);
  CHECK(relative_error(got.grad_w, expected.grad_w) <= 1e-5);
}

TEST_CASE("linear_cross_entropy: the default chunk holds 64 MiB of logits", "[autograd][cpu]") {
  CHECK(linear_cross_entropy_chunk(50257, DType::f32) == 333);  // 333 x 50257 x 4 bytes <= 64 MiB
  CHECK(linear_cross_entropy_chunk(50257, DType::f64) == 166);
  CHECK(linear_cross_entropy_chunk(std::int64_t{1} << 30, DType::f32) == 1);  // at least one row
  CHECK(linear_cross_entropy_chunk(50257, DType::f32, {.chunk_tokens = 7}) == 7);
}

TEST_CASE("linear_cross_entropy: loss only without grad mode or inputs that require grad", "[autograd][cpu]") {
  const Tensor h = random_tensor({6, 5}, 21, DType::f64), w = random_tensor({9, 5}, 22, DType::f64);
  const Tensor y = targets({6}, 9, 23);
  const double expected = unfused(Variable(h), Variable(w), y).item();
  Variable hidden(h, true), weight(w, true);
  {
    NoGradGuard no_grad;
    const Variable loss = linear_cross_entropy(hidden, weight, y, {.chunk_tokens = 4});
    CHECK_FALSE(loss.requires_grad());
    CHECK(std::abs(loss.item() - expected) < 1e-14);
  }
  const Variable constant = linear_cross_entropy(Variable(h), Variable(w), y, {.chunk_tokens = 4});
  CHECK_FALSE(constant.requires_grad());
  CHECK(std::abs(constant.item() - expected) < 1e-14);
  // Only hidden requires grad: the weight's gradient is neither computed nor added.
  Variable loss = linear_cross_entropy(hidden, Variable(w), y, {.chunk_tokens = 4});
  loss.backward();
  Variable ref_h(h, true);
  unfused(ref_h, Variable(w), y).backward();
  CHECK(max_abs_diff(hidden.grad(), ref_h.grad()) < 1e-15);
  CHECK_FALSE(weight.has_grad());
}

TEST_CASE("linear_cross_entropy: gradients accumulate, and the split backward adds the same", "[autograd][cpu]") {
  const Tensor h = random_tensor({2, 5, 3}, 31, DType::f64), w = random_tensor({8, 3}, 32, DType::f64);
  const Tensor y1 = targets({2, 5}, 8, 33), y2 = targets({2, 5}, 8, 34);
  Variable ref_h(h, true), ref_w(w, true);
  add(unfused(ref_h, ref_w, y1), mul(unfused(ref_h, ref_w, y2), 0.5)).backward();
  // Two backwards into the same leaves (the second scaled by 0.5 on the way in).
  Variable hidden(h, true), weight(w, true);
  linear_cross_entropy(hidden, weight, y1, {.chunk_tokens = 3}).backward();
  mul(linear_cross_entropy(hidden, weight, y2, {.chunk_tokens = 3}), 0.5).backward();
  CHECK(max_abs_diff(hidden.grad(), ref_h.grad()) < 1e-15);
  CHECK(max_abs_diff(weight.grad(), ref_w.grad()) < 1e-15);
  // A zero-bubble pipeline's split: the input pass hands over hidden's gradient, the weight
  // pass the weight's, each once.
  Variable sh(h, true), sw(w, true);
  Variable loss = linear_cross_entropy(sh, sw, y1, {.chunk_tokens = 3});
  DeferredWeightGradients weights = backward_inputs(loss, Tensor::ones({}, loss.data().options()), {sw});
  CHECK(sh.has_grad());
  CHECK_FALSE(sw.has_grad());
  weights.run();
  Variable one_h(h, true), one_w(w, true);
  linear_cross_entropy(one_h, one_w, y1).backward();
  CHECK(max_abs_diff(sh.grad(), one_h.grad()) < 1e-15);
  CHECK(max_abs_diff(sw.grad(), one_w.grad()) < 1e-15);
}

TEST_CASE("linear_cross_entropy: forward and backward never hold the whole logits", "[autograd][cpu]") {
  // 1024 tokens x 2000 classes: 8 MB of f32 logits, against 64 KB of weight gradient and
  // 128 KB per chunk of 16 rows. The block cache's counts, above what the inputs hold.
  const Tensor h = random_tensor({1024, 8}, 51), w = random_tensor({2000, 8}, 52);
  const Tensor y = targets({1024}, 2000, 53);
  const double logits_bytes = 1024.0 * 2000 * 4;
  const auto peak_above_inputs = [&](const std::function<Variable(const Variable&, const Variable&)>& f) {
    Variable hidden(h, true), weight(w, true);
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    reset_peak_memory(Device::cpu());
    f(hidden, weight).backward();
    return static_cast<double>(memory_stats(Device::cpu()).peak_bytes - before);
  };
  const double fused = peak_above_inputs(
      [&](const Variable& a, const Variable& b) { return linear_cross_entropy(a, b, y, {.chunk_tokens = 16}); });
  const double plain = peak_above_inputs([&](const Variable& a, const Variable& b) { return unfused(a, b, y); });
  INFO("fused " << fused << " bytes, unfused " << plain << " bytes, logits " << logits_bytes << " bytes");
  CHECK(plain > logits_bytes);  // the measure sees the logits where they exist
  CHECK(fused < logits_bytes / 8);
}

TEST_CASE("linear_cross_entropy: bad input is refused naming it", "[autograd][cpu]") {
  using Catch::Contains;
  Variable h(Tensor::zeros({2, 3, 4})), w(Tensor::zeros({7, 4}));
  const Tensor y = targets({2, 3}, 7, 41);
  CHECK_THROWS_WITH(
      linear_cross_entropy(h, Variable(Tensor::zeros({7, 5})), y),
      Contains("hidden [2, 3, 4] does not match weight [7, 5] (expected (N, d) or (B, T, d) and (V, d))"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, Variable(Tensor::zeros({7, 4, 1})), y),
                    Contains("weight must be (V, d), got [7, 4, 1]"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, targets({3, 2}, 7, 42)),
                    Contains("targets [3, 2] do not match hidden [2, 3, 4] (expected [2, 3])"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, y.to(DType::f32)), Contains("targets must be i64 or i32, got f32"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, Variable(Tensor::zeros({7, 4}, {DType::f64})), y),
                    Contains("hidden and weight must share one dtype, f32 or f64, got f32 and f64"));
  std::vector<std::int64_t> ids{0, 1, 2, 3, 4, 7};
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, Tensor::from_vector(ids, {2, 3})),
                    Contains("targets must lie in [0, 7) (the rows of weight), found 7"));
  ids[0] = -1;
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, Tensor::from_vector(ids, {2, 3}).to(DType::i32)),
                    Contains("targets must lie in [0, 7) (the rows of weight), found -1"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, y, {.chunk_tokens = -1}), Contains("chunk_tokens -1 is negative"));
  // Its gradients are kept once: a second backward through it is refused, not silently wrong.
  Variable hidden(random_tensor({2, 3, 4}, 43), true);
  Variable loss = linear_cross_entropy(hidden, w, y);
  loss.backward(/*retain_graph=*/true);
  CHECK_THROWS_WITH(loss.backward(), Contains("the gradient of hidden was handed over by an earlier backward"));
}
