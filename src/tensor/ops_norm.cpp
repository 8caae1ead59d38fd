// Batch normalization ops: argument checks and output allocation, then the backend's
// fused kernels.
#include "dtrain/tensor/ops.h"

#include "tensor/backend.h"

namespace dtrain {
namespace {

void check_input(const Tensor& x, const char* op) {
  check_defined(x, op);
  DTRAIN_CHECK(is_floating(x.dtype()), "{}: input must be floating (f32, f64), got {}", op, dtype_name(x.dtype()));
  DTRAIN_CHECK(x.dim() >= 2, "{}: expected input (N, C, ...), got {}", op, shape_str(x.shape()));
}

// A per-channel tensor of x's channel count, dtype and device (or undefined).
void check_channels(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  if (!t.defined()) return;
  DTRAIN_CHECK(t.shape() == Shape{x.size(1)} && t.dtype() == x.dtype() && t.device() == x.device(),
               "{}: {} must be ({}) {} on {} for input {}, got {} {} on {}", op, what, x.size(1),
               dtype_name(x.dtype()), x.device().str(), shape_str(x.shape()), shape_str(t.shape()),
               dtype_name(t.dtype()), t.device().str());
}

Tensor per_channel(const Tensor& x) { return Tensor::empty({x.size(1)}, {x.dtype(), x.device()}); }

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? t.contiguous() : t; }

}  // namespace

BatchNormResult batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, bool relu) {
  check_input(x, "batch_norm");
  check_channels(gamma, x, "batch_norm", "weight");
  check_channels(beta, x, "batch_norm", "bias");
  DTRAIN_CHECK(x.numel() / x.size(1) > 1, "batch_norm: training needs more than one value per channel, input {}",
               shape_str(x.shape()));
  DTRAIN_CHECK(eps > 0, "batch_norm: eps must be positive, got {}", eps);
  Tensor xc = x.contiguous();
  BatchNormResult r{Tensor::empty(x.shape(), {x.dtype(), x.device()}), per_channel(x), per_channel(x)};
  detail::backend(x.device())
      .batch_norm(xc, contiguous_or_undefined(gamma), contiguous_or_undefined(beta), eps, relu, r.y, r.mean, r.var);
  return r;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                   const Tensor& gamma, double eps, const Tensor& relu_y) {
  check_input(x, "batch_norm_backward");
  DTRAIN_CHECK(grad_y.defined() && grad_y.shape() == x.shape() && grad_y.dtype() == x.dtype(),
               "batch_norm_backward: gradient must match input {} {}", shape_str(x.shape()), dtype_name(x.dtype()));
  DTRAIN_CHECK(!relu_y.defined() || (relu_y.shape() == x.shape() && relu_y.dtype() == x.dtype() &&
                                     relu_y.device() == x.device()),
               "batch_norm_backward: the ReLU output {} {} does not match input {} {}", shape_str(relu_y.shape()),
               dtype_name(relu_y.dtype()), shape_str(x.shape()), dtype_name(x.dtype()));
  check_defined(mean, "batch_norm_backward");
  check_defined(var, "batch_norm_backward");
  check_channels(mean, x, "batch_norm_backward", "mean");
  check_channels(var, x, "batch_norm_backward", "var");
  check_channels(gamma, x, "batch_norm_backward", "weight");
  BatchNormGrads g{Tensor::empty(x.shape(), {x.dtype(), x.device()}), per_channel(x), per_channel(x)};
  detail::backend(x.device())
      .batch_norm_backward(grad_y.contiguous(), x.contiguous(), contiguous_or_undefined(relu_y), mean.contiguous(),
                           var.contiguous(), contiguous_or_undefined(gamma), eps, g.x, g.gamma, g.beta);
  return g;
}

}  // namespace dtrain
