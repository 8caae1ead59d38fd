#include "tensor/backend.h"

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
