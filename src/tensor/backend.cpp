#include "tensor/backend.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/stream.h"

namespace dtrain {
namespace detail {

void Backend::sgd_momentum_step(Tensor& param, Tensor& buf, const Tensor& grad, const SgdMomentumStep& step) {
  Tensor d = grad;
  if (step.weight_decay != 0) {
    d = grad.clone();
    update(UpdateOp::AddScaled, d, param, Tensor(), step.weight_decay);
  }
  update(UpdateOp::MulScalar, buf, Tensor(), Tensor(), step.momentum);
  update(UpdateOp::AddScaled, buf, d, Tensor(), 1 - step.dampening);
  if (step.nesterov) {
    if (d.same_storage(grad)) d = grad.clone();
    update(UpdateOp::AddScaled, d, buf, Tensor(), step.momentum);
    update(UpdateOp::AddScaled, param, d, Tensor(), -step.lr);
  } else {
    update(UpdateOp::AddScaled, param, buf, Tensor(), -step.lr);
  }
}

void Backend::adam_step(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad, const AdamStep& step) {
  if (step.decay_factor != 1) update(UpdateOp::MulScalar, param, Tensor(), Tensor(), step.decay_factor);
  Tensor d = grad;
  if (step.l2 != 0) {
    d = grad.clone();
    update(UpdateOp::AddScaled, d, param, Tensor(), step.l2);
  }
  update(UpdateOp::MulScalar, exp_avg, Tensor(), Tensor(), step.beta1);
  update(UpdateOp::AddScaled, exp_avg, d, Tensor(), 1 - step.beta1);
  update(UpdateOp::MulScalar, exp_avg_sq, Tensor(), Tensor(), step.beta2);
  update(UpdateOp::AddCMul, exp_avg_sq, d, d, 1 - step.beta2);
  Tensor denom = Tensor::empty(param.shape(), param.options());
  unary(UnaryOp::Sqrt, exp_avg_sq, denom);
  update(UpdateOp::AddScaled, denom, Tensor::scalar(step.eps, denom.options()).expand(denom.shape()), Tensor(), 1);
  update(UpdateOp::AddCDiv, param, exp_avg, denom, -step.step_size);
}

Tensor Backend::squared_norm(const Tensor& x) { return sum(square(x.to(DType::f64))); }

void Backend::softmax_cross_entropy_rows(Tensor& logits, const Tensor& targets, Tensor& sums, Tensor& log_prob) {
  // Qualified: the free ops, not this class's primitives of the same names.
  const Tensor t = targets.reshape({targets.numel(), 1});
  dtrain::binary_out(BinaryOp::Sub, logits, dtrain::max(logits, {1}, true), logits);  // x - m: exp cannot overflow
  const Tensor target = dtrain::gather(logits, 1, t);
  unary(UnaryOp::Exp, logits, logits);
  sums.copy_(dtrain::sum(logits, {1}, true));
  log_prob.copy_(dtrain::sub(target, dtrain::log(sums)));
  // E - diag(s) Y
  dtrain::binary_out(BinaryOp::Sub, logits, dtrain::scatter_add(logits.shape(), 1, t, sums), logits);
}

void Backend::attention_forward(const Tensor& q, const Tensor&, const Tensor&, const FusedAttentionOptions&, Tensor&,
                                Tensor&) {
  DTRAIN_FAIL("attention_forward: no fused attention kernel on {} for {}", q.device().str(), dtype_name(q.dtype()));
}

void Backend::attention_backward(const Tensor&, const Tensor& q, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const FusedAttentionOptions&, Tensor&, Tensor&, Tensor&) {
  DTRAIN_FAIL("attention_backward: no fused attention kernel on {} for {}", q.device().str(), dtype_name(q.dtype()));
}

void Backend::matmul_add(const Tensor& a, const Tensor& b, Tensor& out) {
  Tensor product = Tensor::empty(out.shape(), out.options());
  matmul(a, b, product);
  update(UpdateOp::AddScaled, out, product, Tensor(), 1);
}

Backend& backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  return cuda_backend(device.index);
}

}  // namespace detail

void* device_stream(Device device) { return detail::backend(device).stream(); }

void synchronize(Device device) { detail::backend(device).synchronize(); }

}  // namespace dtrain
