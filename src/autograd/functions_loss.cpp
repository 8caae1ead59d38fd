// Softmax, losses and dropout.
#include "dtrain/autograd/functions.h"

#include <cmath>

namespace dtrain {

Variable softmax(const Variable& x, std::int64_t dim) {
  Tensor y = softmax(x.data(), dim);
  return Variable(y, {x}, [y, dim](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(softmax_backward(g, y, dim));
  });
}

Variable log_softmax(const Variable& x, std::int64_t dim) {
  Tensor y = log_softmax(x.data(), dim);
  return Variable(y, {x}, [y, dim](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(log_softmax_backward(g, y, dim));
  });
}

Variable cross_entropy(const Variable& logits, const Tensor& labels, double label_smoothing) {
  DTRAIN_CHECK(logits.dim() == 2, "cross_entropy: expected logits (N, C), got {}", shape_str(logits.shape()));
  DTRAIN_CHECK(labels.dim() == 1 && labels.size(0) == logits.size(0),
               "cross_entropy: labels {} do not match logits {} (expected (N))", shape_str(labels.shape()),
               shape_str(logits.shape()));
  DTRAIN_CHECK(labels.dtype() == DType::i64 || labels.dtype() == DType::i32,
               "cross_entropy: labels must be i64 or i32, got {}", dtype_name(labels.dtype()));
  DTRAIN_CHECK(label_smoothing >= 0 && label_smoothing < 1,
               "cross_entropy: label_smoothing {} outside [0, 1)", label_smoothing);
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  // Labels on the CPU are checked here. Labels on a GPU are not read back (that would make
  // every step wait for the device): an out-of-range label there matches no class, and the
  // loss becomes NaN.
  if (n > 0 && labels.device().is_cpu()) {
    auto low = min(labels).item();
    auto high = max(labels).item();
    DTRAIN_CHECK(low >= 0 && high < static_cast<double>(c), "cross_entropy: labels must lie in [0, {}), found {}",
                 c, low < 0 ? low : high);
  }
  Tensor logp = log_softmax(logits.data(), 1);
  // The label's column as a mask (N, C): element-wise ops only, with no index range check
  // (which would wait for the device). Each row's sum of the masked log-probabilities is
  // its picked one exactly (the other terms are zeros).
  const Tensor classes = Tensor::arange(0, static_cast<double>(c), 1, {DType::i64, logp.device()}).reshape({1, c});
  const Tensor hit = eq(labels.to(DType::i64).reshape({n, 1}), classes);
  const Tensor zero = Tensor::zeros({}, logp.options());
  const double eps = label_smoothing;
  // The loss stays on the logits' device, summed in f64 and rounded once.
  Tensor total = sum(sum(where(hit, logp, zero), {1})).to(DType::f64);
  if (eps > 0) total = add(mul(total, 1 - eps), mul(sum(logp).to(DType::f64), eps / static_cast<double>(c)));
  const double count = static_cast<double>(std::max<std::int64_t>(n, 1));
  Tensor loss = div(neg(total), Tensor::scalar(count, total.options()));
  if (!labels.device().is_cpu()) {
    // A row without a hit had a label outside [0, C).
    const Tensor all_matched = eq(sum(hit.to(DType::i64)), Tensor::scalar(static_cast<double>(n), {DType::i64, logp.device()}));
    loss = where(all_matched, loss, Tensor::scalar(std::nan(""), loss.options()));
  }
  loss = loss.to(logits.dtype());
  // d loss / d logits = (softmax - target) / N with target = (1 - eps) onehot + eps / C.
  return Variable(loss, {logits}, [logp, hit, eps, n, c](std::vector<Variable>& in, const Tensor& g) {
    Tensor grad = exp(logp);
    if (eps > 0) grad = add(grad, -eps / static_cast<double>(c));
    grad = add(grad, mul(hit.to(grad.dtype()), -(1 - eps)));
    in[0].add_grad(mul(grad, div(g, static_cast<double>(std::max<std::int64_t>(n, 1)))));
  });
}

Variable mse_loss(const Variable& prediction, const Variable& target) {
  DTRAIN_CHECK(prediction.shape() == target.shape(), "mse_loss: prediction {} and target {} differ in shape",
               shape_str(prediction.shape()), shape_str(target.shape()));
  Variable diff = sub(prediction, target);
  return mean(mul(diff, diff));
}

Variable dropout(const Variable& x, double p, Generator* gen) {
  DTRAIN_CHECK(p >= 0 && p < 1, "dropout: probability {} outside [0, 1)", p);
  if (p == 0) return x;
  Tensor mask = Tensor::empty(x.shape(), x.data().options());
  bernoulli_(mask, 1 - p, gen);
  mul_(mask, 1.0 / (1 - p));
  return Variable(mul(x.data(), mask), {x},
                  [mask](std::vector<Variable>& in, const Tensor& g) { in[0].add_grad(mul(g, mask)); });
}

}  // namespace dtrain
