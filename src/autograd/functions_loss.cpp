// Softmax, losses and dropout.
#include "dtrain/autograd/functions.h"

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
  // Labels on the CPU are checked here, for this op's message; labels on a GPU are checked
  // by gather's range check, so that the loss never makes the host wait for the device.
  if (n > 0 && labels.device().is_cpu()) {
    auto low = min(labels).item();
    auto high = max(labels).item();
    DTRAIN_CHECK(low >= 0 && high < static_cast<double>(c), "cross_entropy: labels must lie in [0, {}), found {}",
                 c, low < 0 ? low : high);
  }
  Tensor logp = log_softmax(logits.data(), 1);
  Tensor index = labels.reshape({n, 1});
  Tensor picked = gather(logp, 1, index);
  const double eps = label_smoothing;
  // The loss stays on the logits' device, summed in f64 and rounded once.
  Tensor total = sum(picked).to(DType::f64);
  if (eps > 0) total = add(mul(total, 1 - eps), mul(sum(logp).to(DType::f64), eps / static_cast<double>(c)));
  const double count = static_cast<double>(std::max<std::int64_t>(n, 1));
  Tensor loss = div(neg(total), Tensor::scalar(count, total.options())).to(logits.dtype());
  // d loss / d logits = (softmax - target) / N with target = (1 - eps) onehot + eps / C.
  return Variable(loss, {logits}, [logp, index, eps, n, c](std::vector<Variable>& in, const Tensor& g) {
    Tensor grad = exp(logp);
    if (eps > 0) grad = add(grad, -eps / static_cast<double>(c));
    Tensor onehot = Tensor::full({n, 1}, -(1 - eps), grad.options());
    grad = add(grad, scatter_add(grad.shape(), 1, index, onehot));
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
