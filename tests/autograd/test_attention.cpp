// scaled_dot_product_attention: its values against the attention written out with the
// ordinary ops (matmul, mask, softmax), its gradients against finite differences in f64,
// grouped-query heads, dropout's mask shared by forward and backward, and bad shapes.
#include "dtrain/autograd/attention.h"
#include "dtrain/autograd/functions.h"
#include "dtrain/autograd/fusion.h"
#include "dtrain/tensor/fused_attention.h"
#include "dtrain/tensor/memory_stats.h"
#include "support/test_support.h"

#include <cmath>
#include <limits>

using namespace dtrain;
using test::random_tensor;
using test::require_grad_ok;

namespace {
using Inputs = const std::vector<Variable>&;

Variable param(const Shape& shape, std::uint64_t seed) {
  return Variable(random_tensor(shape, seed, DType::f64, -1, 1), true);
}

// The textbook form on plain tensors: per (b, h), softmax(q k^T / sqrt(D) + mask) v, key/value
// head h / G for query head h.
Tensor naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const std::int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), g = h / k.size(1);
  std::vector<Tensor> heads;
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < h; ++j) {
      Tensor qh = q.narrow(0, i, 1).narrow(1, j, 1).reshape({t, d});
      Tensor kh = k.narrow(0, i, 1).narrow(1, j / g, 1).reshape({t, d});
      Tensor vh = v.narrow(0, i, 1).narrow(1, j / g, 1).reshape({t, d});
      Tensor s = mul(matmul(qh, kh, false, true), 1.0 / std::sqrt(static_cast<double>(d)));
      if (causal) {
        std::vector<double> m(static_cast<std::size_t>(t * t), 0.0);
        for (std::int64_t r = 0; r < t; ++r)
          for (std::int64_t c = r + 1; c < t; ++c)
            m[static_cast<std::size_t>(r * t + c)] = -std::numeric_limits<double>::infinity();
        s = add(s, Tensor::from_vector(m, {t, t}).to(q.dtype()));
      }
      heads.push_back(matmul(softmax(s, -1), vh));
    }
  }
  return stack(heads, 0).reshape({b, h, t, d});
}
}  // namespace

TEST_CASE("attention: values equal the attention written out, causal and not, grouped heads", "[autograd][cpu]") {
  for (std::int64_t kv_heads : {4, 2, 1}) {
    Tensor q = random_tensor({2, 4, 5, 3}, 1, DType::f64, -1, 1);
    Tensor k = random_tensor({2, kv_heads, 5, 3}, 2, DType::f64, -1, 1);
    Tensor v = random_tensor({2, kv_heads, 5, 3}, 3, DType::f64, -1, 1);
    for (bool causal : {true, false}) {
      Tensor got = scaled_dot_product_attention(Variable(q), Variable(k), Variable(v), {.causal = causal}).data();
      INFO("kv heads " << kv_heads << ", causal " << causal);
      REQUIRE(max_abs_diff(got, naive_attention(q, k, v, causal)) < 1e-14);
    }
  }
  // The first position attends to itself alone: its output is its own value row.
  Tensor q = random_tensor({1, 1, 4, 2}, 4, DType::f64, -1, 1);
  Tensor kv = random_tensor({1, 1, 4, 2}, 5, DType::f64, -1, 1);
  Tensor out = scaled_dot_product_attention(Variable(q), Variable(kv), Variable(kv)).data();
  REQUIRE(max_abs_diff(out.narrow(2, 0, 1), kv.narrow(2, 0, 1)) < 1e-15);
}

TEST_CASE("grad: attention (q, k, v; grouped-query heads; a given scale)", "[autograd][cpu]") {
  for (std::int64_t kv_heads : {4, 2}) {
    auto q = param({2, 4, 5, 3}, 11), k = param({2, kv_heads, 5, 3}, 12), v = param({2, kv_heads, 5, 3}, 13);
    require_grad_ok([](Inputs in) { return scaled_dot_product_attention(in[0], in[1], in[2]); }, {q, k, v});
    require_grad_ok(
        [](Inputs in) { return scaled_dot_product_attention(in[0], in[1], in[2], {.causal = false, .scale = 0.7}); },
        {q, k, v});
  }
}

TEST_CASE("grad: attention with dropout (the same mask forward and backward)", "[autograd][cpu]") {
  auto q = param({1, 2, 6, 4}, 21), k = param({1, 2, 6, 4}, 22), v = param({1, 2, 6, 4}, 23);
  // Each evaluation draws its mask from the same generator state, so finite differences see
  // one fixed function.
  require_grad_ok(
      [](Inputs in) {
        Generator gen(5);
        return scaled_dot_product_attention(in[0], in[1], in[2], {.dropout = 0.3, .generator = &gen});
      },
      {q, k, v});
  Generator a(9), b(9), c(10);
  const auto run = [&](Generator& g) {
    return scaled_dot_product_attention(q, k, v, {.dropout = 0.5, .generator = &g}).data();
  };
  REQUIRE(max_abs_diff(run(a), run(b)) == 0);  // deterministic per generator state
  REQUIRE(max_abs_diff(run(a), run(c)) > 0);
}

TEST_CASE("attention: bad shapes are refused naming them", "[autograd][cpu]") {
  Variable q(Tensor::zeros({1, 4, 5, 3})), k3(Tensor::zeros({1, 3, 5, 3})), k(Tensor::zeros({1, 4, 5, 3}));
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, k3, k3),
                      Catch::Contains("4 query heads are not a multiple of 3 key/value heads"));
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(Variable(Tensor::zeros({4, 5, 3})), k, k),
                      Catch::Contains("expected q, k, v of shape (B, H, T, D)"));
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, Variable(Tensor::zeros({1, 4, 6, 3})), k),
                      Catch::Contains("do not match q"));
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, k, k, {.dropout = 1.0}), Catch::Contains("dropout 1 outside"));
}

namespace {

struct AttentionRun {
  Tensor out, dq, dk, dv;
};

// Output and input gradients for the loss sum(out * weights), q, k, v given as (B, T, heads, D)
// memory seen through transposes, as the GPT's attention passes them.
AttentionRun run_attention(const Tensor& q_btd, const Tensor& k_btd, const Tensor& v_btd, const Tensor& weights,
                           bool causal, bool fused) {
  test::FusedKernelsSwitch setting(fused);
  Variable q(q_btd, true), k(k_btd, true), v(v_btd, true);
  Variable out =
      scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2), transpose(v, 1, 2), {.causal = causal});
  sum(mul(out, Variable(weights))).backward();
  return {out.data(), q.grad(), k.grad(), v.grad()};
}

}  // namespace

TEST_CASE("attention: the fused kernels equal the unfused ops across query and key blocks", "[autograd][cpu]") {
  // T past one 64-query and one 256-key block, and not a multiple of either; one token; heads
  // shared by groups; f64 to rounding and f32 to its precision.
  for (const DType dtype : {DType::f64, DType::f32}) {
    for (const std::int64_t t : {1, 70, 300}) {
      for (const std::int64_t kv_heads : {4, 2, 1}) {
        for (const bool causal : {true, false}) {
          INFO(dtype_name(dtype) << ", T " << t << ", kv heads " << kv_heads << ", causal " << causal);
          const Tensor q = random_tensor({2, t, 4, 8}, 31, dtype, -2, 2);
          const Tensor k = random_tensor({2, t, kv_heads, 8}, 32, dtype, -2, 2);
          const Tensor v = random_tensor({2, t, kv_heads, 8}, 33, dtype, -1, 1);
          const Tensor w = random_tensor({2, 4, t, 8}, 34, dtype, -1, 1);
          const AttentionRun fused = run_attention(q, k, v, w, causal, true);
          const AttentionRun plain = run_attention(q, k, v, w, causal, false);
          const double rtol = dtype == DType::f64 ? 1e-12 : 2e-5, atol = dtype == DType::f64 ? 1e-13 : 2e-6;
          test::require_close(fused.out, plain.out, rtol, atol);
          test::require_close(fused.dq, plain.dq, rtol, atol);
          test::require_close(fused.dk, plain.dk, rtol, atol);
          test::require_close(fused.dv, plain.dv, rtol, atol);
        }
      }
    }
  }
}

TEST_CASE("grad: fused attention across blocks, and the unfused ops, by finite differences", "[autograd][cpu]") {
  // 70 positions: two query blocks, the causal diagonal inside the second.
  auto q = param({1, 2, 70, 3}, 41), k = param({1, 1, 70, 3}, 42), v = param({1, 1, 70, 3}, 43);
  for (const bool fused : {true, false}) {
    test::FusedKernelsSwitch setting(fused);
    INFO("fused " << fused);
    require_grad_ok([](Inputs in) { return scaled_dot_product_attention(in[0], in[1], in[2]); }, {q, k, v});
  }
}

TEST_CASE("attention: the fused kernels keep memory linear in the sequence", "[autograd][cpu]") {
  // One head of 2048 positions: its weights alone are 16 MB in f32; the fused kernels keep the
  // inputs, output and gradients (T * D each) and per-thread blocks.
  const std::int64_t t = 2048, d = 16;
  const Tensor q = random_tensor({1, t, 1, d}, 51), k = random_tensor({1, t, 1, d}, 52),
               v = random_tensor({1, t, 1, d}, 53), w = random_tensor({1, 1, t, d}, 54);
  const auto peak_above_inputs = [&](bool fused) {
    const std::size_t before = memory_stats(Device::cpu()).in_use_bytes;
    reset_peak_memory(Device::cpu());
    run_attention(q, k, v, w, true, fused);
    return memory_stats(Device::cpu()).peak_bytes - before;
  };
  const std::size_t weights = static_cast<std::size_t>(t * t) * sizeof(float);
  const std::size_t fused = peak_above_inputs(true), plain = peak_above_inputs(false);
  INFO("peak above the inputs: fused " << fused << " B, unfused " << plain << " B, weights " << weights << " B");
  CHECK(fused < weights / 8);
  CHECK(plain > weights);  // the measure sees the (T, T) matrices where they exist
}

TEST_CASE("attention: a scale that is not positive is refused", "[autograd][cpu]") {
  Variable q(Tensor::zeros({1, 1, 2, 2}));
  REQUIRE_THROWS_WITH(scaled_dot_product_attention(q, q, q, {.scale = 0.0}), Catch::Contains("scale 0 must be > 0"));
}

TEST_CASE("attention: the fused kernels refuse a dtype they do not have, naming it", "[autograd][cpu]") {
  REQUIRE(has_fused_attention(Device::cpu(), DType::f32, 64));
  REQUIRE_FALSE(has_fused_attention(Device::cpu(), DType::bf16, 64));
  const Tensor q = Tensor::zeros({1, 2, 3, 8}, {.dtype = DType::bf16});
  REQUIRE_THROWS_WITH(attention_forward(q, q, q, {}),
                      Catch::Contains("attention_forward: no fused attention kernel on cpu for bf16 heads of 8"));
}
