#include "dtrain/autograd/attention.h"

#include "dtrain/autograd/fusion.h"
#include "dtrain/core/error.h"
#include "dtrain/tensor/fused_attention.h"

#include <cmath>
#include <limits>

namespace dtrain {

namespace {

// (B, Hkv, T, D) -> (B*H, T, D), each key/value head repeated for its G query heads.
Tensor repeat_heads(const Tensor& x, std::int64_t groups) {
  const std::int64_t b = x.size(0), hkv = x.size(1), t = x.size(2), d = x.size(3);
  if (groups == 1) return x.reshape({b * hkv, t, d});
  return x.unsqueeze(2).expand({b, hkv, groups, t, d}).reshape({b * hkv * groups, t, d});
}

// The inverse's gradient: (B*H, T, D) summed over each head's G copies -> (B, Hkv, T, D).
Tensor sum_heads(const Tensor& g, const Shape& kv_shape, std::int64_t groups) {
  const std::int64_t b = kv_shape[0], hkv = kv_shape[1], t = kv_shape[2], d = kv_shape[3];
  if (groups == 1) return g.reshape(kv_shape);
  return sum(g.reshape({b, hkv, groups, t, d}), {2});
}

// (T, T): 0 on and below the diagonal, -inf above it.
Tensor causal_mask(std::int64_t t, const TensorOptions& options) {
  std::vector<double> m(static_cast<std::size_t>(t * t), 0.0);
  for (std::int64_t i = 0; i < t; ++i)
    for (std::int64_t j = i + 1; j < t; ++j)
      m[static_cast<std::size_t>(i * t + j)] = -std::numeric_limits<double>::infinity();
  return Tensor::from_vector(m, {t, t}).to(options.dtype).to(options.device);
}

// The fused kernels: keeps q, k, v, the output and one log-sum-exp per row.
Variable fused_attention(const Variable& q, const Variable& k, const Variable& v, const FusedAttentionOptions& o) {
  FusedAttentionResult r = attention_forward(q.data(), k.data(), v.data(), o);
  const Tensor out = r.out, lse = r.lse;
  return Variable(r.out, {q, k, v}, [out, lse, o](std::vector<Variable>& in, const Tensor& g) {
    FusedAttentionGrads grads = attention_backward(g, in[0].data(), in[1].data(), in[2].data(), out, lse, o);
    if (in[0].requires_grad()) in[0].add_grad(std::move(grads.q));
    if (in[1].requires_grad()) in[1].add_grad(std::move(grads.k));
    if (in[2].requires_grad()) in[2].add_grad(std::move(grads.v));
  });
}

}  // namespace

Variable scaled_dot_product_attention(const Variable& q, const Variable& k, const Variable& v,
                                      const AttentionOptions& options) {
  DTRAIN_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
               "scaled_dot_product_attention: expected q, k, v of shape (B, H, T, D), got {}, {}, {}",
               shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  DTRAIN_CHECK(
      k.shape() == v.shape() && k.size(0) == q.size(0) && k.size(2) == q.size(2) && k.size(3) == q.size(3),
      "scaled_dot_product_attention: k {} and v {} do not match q {} (expected (B, Hkv, T, D) with q's B, T, D)",
      shape_str(k.shape()), shape_str(v.shape()), shape_str(q.shape()));
  DTRAIN_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0,
               "scaled_dot_product_attention: {} query heads are not a multiple of {} key/value heads", q.size(1),
               k.size(1));
  DTRAIN_CHECK(options.dropout >= 0 && options.dropout < 1, "scaled_dot_product_attention: dropout {} outside [0, 1)",
               options.dropout);
  DTRAIN_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype() && is_floating(q.dtype()),
               "scaled_dot_product_attention: q, k, v must share one floating dtype, got {}, {}, {}",
               dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  DTRAIN_CHECK(!options.scale || *options.scale > 0, "scaled_dot_product_attention: scale {} must be > 0",
               options.scale.value_or(0));
  const std::int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  const double scale = options.scale.value_or(1.0 / std::sqrt(static_cast<double>(d)));
  // Dropout on the weights needs them in memory: the unfused path below.
  if (options.dropout == 0 && fused_kernels() && has_fused_attention(q.device(), q.dtype(), d))
    return fused_attention(q, k, v, {.causal = options.causal, .scale = scale});
  const std::int64_t groups = h / k.size(1);

  const Tensor qf = q.data().reshape({b * h, t, d});
  const Tensor kf = repeat_heads(k.data(), groups);
  const Tensor vf = repeat_heads(v.data(), groups);
  Tensor scores = matmul(qf, kf, false, true);  // (B*H, T, T)
  mul_(scores, scale);
  if (options.causal) binary_out(BinaryOp::Add, scores, causal_mask(t, scores.options()), scores);
  const Tensor probs = softmax(scores, -1);
  Tensor keep;  // dropout's mask, scaled by 1 / (1 - p)
  Tensor weights = probs;
  if (options.dropout > 0) {
    keep = Tensor::empty(probs.shape(), probs.options());
    bernoulli_(keep, 1 - options.dropout, options.generator);
    mul_(keep, 1.0 / (1 - options.dropout));
    weights = mul(probs, keep);
  }
  Tensor out = matmul(weights, vf).reshape({b, h, t, d});
  return Variable(out, {q, k, v},
                  [qf, kf, vf, probs, keep, weights, scale, groups](std::vector<Variable>& in, const Tensor& g_in) {
                    const Tensor g = g_in.reshape(qf.shape());
                    if (in[2].requires_grad())
                      in[2].add_grad(sum_heads(matmul(weights, g, true, false), in[2].shape(), groups));
                    if (!in[0].requires_grad() && !in[1].requires_grad()) return;
                    Tensor dw = matmul(g, vf, false, true);  // d(weights)
                    if (keep.defined()) mul_(dw, keep);
                    Tensor ds = softmax_backward(dw, probs, -1);
                    mul_(ds, scale);
                    if (in[0].requires_grad()) in[0].add_grad(matmul(ds, kf).reshape(in[0].shape()));
                    if (in[1].requires_grad())
                      in[1].add_grad(sum_heads(matmul(ds, qf, true, false), in[1].shape(), groups));
                  });
}

}  // namespace dtrain
