// The output projection and cross-entropy fused over chunks of tokens (linear_cross_entropy.h).
// Per chunk of c tokens, with x = h_c W^T its logits, m their row maxima, E = exp(x - m), s the
// row sums of E (so the softmax is P = E / s) and Y the one-hot targets:
//   loss     += sum of log s - (x - m)[target]
//   grad_h_c  = (P - Y) W     = diag(1/s) (E - diag(s) Y) W    (the chunk's own rows of grad_h)
//   grad_W   += (P - Y)^T h_c = (E - diag(s) Y)^T diag(1/s) h_c  (the GEMM adds into grad_W)
// The 1/s goes onto the c x d operand or result instead of the c x V values (one pass fewer
// over them), and E - s Y subtracts at the target the sum it belongs to, so P - 1 keeps its
// precision. The softmax and E - diag(s) Y are one op, softmax_cross_entropy_rows_ (ops.h: one
// pass over the logits on the CPU, composed primitives elsewhere). The mean's 1/N and the
// incoming gradient are applied once, in the backward, to the two sums. Only tensor ops, so it
// runs on any device.
#include "dtrain/autograd/linear_cross_entropy.h"

#include "dtrain/autograd/variable.h"
#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"

#include <algorithm>

namespace dtrain {

namespace {

constexpr std::int64_t kChunkBytes = std::int64_t{64} << 20;  // one chunk's logits, by default

void check_arguments(const Variable& hidden, const Variable& weight, const Tensor& targets,
                     const LinearCrossEntropyOptions& options) {
  DTRAIN_CHECK(weight.dim() == 2, "linear_cross_entropy: weight must be (V, d), got {}", shape_str(weight.shape()));
  DTRAIN_CHECK((hidden.dim() == 2 || hidden.dim() == 3) && hidden.size(-1) == weight.size(1),
               "linear_cross_entropy: hidden {} does not match weight {} (expected (N, d) or (B, T, d) and (V, d))",
               shape_str(hidden.shape()), shape_str(weight.shape()));
  const Shape rows(hidden.shape().begin(), hidden.shape().end() - 1);
  DTRAIN_CHECK(targets.defined() && targets.shape() == rows,
               "linear_cross_entropy: targets {} do not match hidden {} (expected {})",
               targets.defined() ? shape_str(targets.shape()) : "undefined", shape_str(hidden.shape()),
               shape_str(rows));
  DTRAIN_CHECK(targets.dtype() == DType::i64 || targets.dtype() == DType::i32,
               "linear_cross_entropy: targets must be i64 or i32, got {}", dtype_name(targets.dtype()));
  DTRAIN_CHECK(hidden.dtype() == weight.dtype() && (hidden.dtype() == DType::f32 || hidden.dtype() == DType::f64),
               "linear_cross_entropy: hidden and weight must share one dtype, f32 or f64, got {} and {}",
               dtype_name(hidden.dtype()), dtype_name(weight.dtype()));
  DTRAIN_CHECK(hidden.device() == weight.device() && targets.device() == hidden.device(),
               "linear_cross_entropy: hidden, weight and targets must be on one device, got {}, {} and {}",
               hidden.device().str(), weight.device().str(), targets.device().str());
  DTRAIN_CHECK(options.chunk_tokens >= 0, "linear_cross_entropy: chunk_tokens {} is negative (0 picks one)",
               options.chunk_tokens);
  // As cross_entropy: checked where the targets can be read without waiting for a device. On a
  // GPU the indexing ops below report a bad index at the next wait for the device.
  if (targets.numel() > 0 && targets.device().is_cpu()) {
    const double low = min(targets).item(), high = max(targets).item();
    DTRAIN_CHECK(low >= 0 && high < static_cast<double>(weight.size(0)),
                 "linear_cross_entropy: targets must lie in [0, {}) (the rows of weight), found {}", weight.size(0),
                 low < 0 ? low : high);
  }
}

// Scales a gradient kept by the forward and hands it to its input: in place, and moved, so
// that a leaf without a gradient adopts it with no copy (Variable::add_grad(Tensor&&)).
void hand_over(Variable& input, Tensor& kept, const Tensor& scale, const char* name) {
  if (!input.requires_grad()) return;
  DTRAIN_CHECK(kept.defined(),
               "linear_cross_entropy: the gradient of {} was handed over by an earlier backward (the op keeps "
               "one copy: a second backward through it, retain_graph, is not supported)",
               name);
  mul_(kept, scale);
  Tensor grad = kept.reshape(input.shape());
  kept = Tensor();
  input.add_grad(std::move(grad));
}

}  // namespace

std::int64_t linear_cross_entropy_chunk(std::int64_t vocab, DType dtype, const LinearCrossEntropyOptions& options) {
  if (options.chunk_tokens > 0) return options.chunk_tokens;
  const auto row_bytes = std::max<std::int64_t>(vocab, 1) * static_cast<std::int64_t>(dtype_size(dtype));
  return std::max<std::int64_t>(kChunkBytes / row_bytes, 1);
}

Variable linear_cross_entropy(const Variable& hidden, const Variable& weight, const Tensor& targets,
                              const LinearCrossEntropyOptions& options) {
  check_arguments(hidden, weight, targets, options);
  const std::int64_t n = targets.numel(), v = weight.size(0), d = weight.size(1);
  const std::int64_t chunk =
      std::min(linear_cross_entropy_chunk(v, weight.dtype(), options), std::max<std::int64_t>(n, 1));
  const TensorOptions opts = hidden.data().options();
  const Tensor h = hidden.data().reshape({n, d}).contiguous();  // chunks of rows are then contiguous
  const Tensor& w = weight.data();
  const Tensor t = targets.reshape({n, 1});

  const bool need_h = grad_enabled() && hidden.requires_grad();
  const bool need_w = grad_enabled() && weight.requires_grad();
  Tensor grad_h = need_h ? Tensor::zeros({n, d}, opts) : Tensor();  // sums of (P - Y) W, by rows
  Tensor grad_w;                                                    // sum of (P - Y)^T h
  Tensor picked = Tensor::empty({n, 1}, opts);                      // each token's log-probability

  // Each chunk's c x V buffers are freed before the next chunk asks for the same sizes, so the
  // block cache hands the same blocks back: at most two of them live at once.
  for (std::int64_t start = 0; start < n; start += chunk) {
    const std::int64_t c = std::min(chunk, n - start);
    const Tensor hc = h.narrow(0, start, c);
    const Tensor tc = t.narrow(0, start, c);
    Tensor e = matmul(hc, w, false, true);
    const SoftmaxCrossEntropyRows rows = softmax_cross_entropy_rows_(e, tc);  // e = E - diag(s) Y
    picked.narrow(0, start, c).copy_(rows.log_prob);
    if (!need_h && !need_w) continue;
    const Tensor inverse = unary(UnaryOp::Reciprocal, rows.sums);
    if (need_h) {
      Tensor rows = grad_h.narrow(0, start, c);
      matmul_add_(rows, e, w);
      mul_(rows, inverse);
    }
    if (need_w) {
      // The first chunk's product starts the sum (no V x d of zeros to write and read back).
      const Tensor scaled = mul(hc, inverse);
      if (grad_w.defined()) matmul_add_(grad_w, e, scaled, true, false);
      else grad_w = matmul(e, scaled, true, false);
    }
  }
  if (need_w && !grad_w.defined()) grad_w = Tensor::zeros({v, d}, opts);  // no tokens

  const double count = static_cast<double>(std::max<std::int64_t>(n, 1));
  // Summed in f64, rounded once to the operands' dtype.
  const Tensor loss = mul(sum(picked.to(DType::f64)), -1.0 / count).to(hidden.dtype());
  if (!need_h && !need_w) return Variable(loss);
  return Variable(loss, {hidden, weight},
                  [grad_h = std::move(grad_h), grad_w = std::move(grad_w), count](std::vector<Variable>& in,
                                                                                  const Tensor& g) mutable {
                    const Tensor scale = div(g, count);  // the mean's 1/N times the incoming gradient
                    hand_over(in[0], grad_h, scale, "hidden");
                    hand_over(in[1], grad_w, scale, "weight");
                  });
}

}  // namespace dtrain
