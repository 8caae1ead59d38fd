// Batch and RMS normalization ops: argument checks and output allocation, then the
// backend's fused kernels.
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

// ---- layer and RMS normalization over the last dim ------------------------------------------

namespace {

// A parameter (weight or bias) of a row normalization: undefined or (D) of x's dtype and device.
void check_row_param(const Tensor& x, const Tensor& p, const char* what, const char* op) {
  if (!p.defined()) return;
  DTRAIN_CHECK(p.shape() == Shape{x.size(-1)} && p.dtype() == x.dtype() && p.device() == x.device(),
               "{}: {} must be ({}) {} on {} for input {}, got {} {} on {}", op, what, x.size(-1),
               dtype_name(x.dtype()), x.device().str(), shape_str(x.shape()), shape_str(p.shape()),
               dtype_name(p.dtype()), p.device().str());
}

// x f32/f64 with a last dim; weight undefined or (D) of x's dtype and device.
void check_rms_input(const Tensor& x, const Tensor& weight, const char* op) {
  check_defined(x, op);
  DTRAIN_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::f64, "{}: input must be f32 or f64, got {}{}", op,
               dtype_name(x.dtype()), is_half(x.dtype()) ? " (convert 16-bit activations with .to(DType::f32))" : "");
  DTRAIN_CHECK(x.dim() >= 1 && x.size(-1) > 0, "{}: expected input (..., D) with D > 0, got {}", op,
               shape_str(x.shape()));
  check_row_param(x, weight, "weight", op);
}

// grad_y like x; one stat value per row of x in x's dtype and device.
void check_row_grad(const Tensor& grad_y, const Tensor& x, const char* op) {
  DTRAIN_CHECK(
      grad_y.defined() && grad_y.shape() == x.shape() && grad_y.dtype() == x.dtype() && grad_y.device() == x.device(),
      "{}: gradient {} {} must match input {} {} on {}", op, shape_str(grad_y.shape()), dtype_name(grad_y.dtype()),
      shape_str(x.shape()), dtype_name(x.dtype()), x.device().str());
}
void check_row_stat(const Tensor& stat, const Tensor& x, const char* what, const char* op) {
  DTRAIN_CHECK(stat.defined() && stat.numel() == x.numel() / x.size(-1) && stat.dtype() == x.dtype() &&
                   stat.device() == x.device(),
               "{}: {} {} {} must hold one {} value per row of input {} on {}", op, what, shape_str(stat.shape()),
               dtype_name(stat.dtype()), dtype_name(x.dtype()), shape_str(x.shape()), x.device().str());
}

// x's shape with the last dim 1: one value per row.
Shape row_shape(const Tensor& x) {
  Shape s = x.shape();
  s.back() = 1;
  return s;
}

}  // namespace

LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_rms_input(x, weight, "layer_norm");
  check_row_param(x, bias, "bias", "layer_norm");
  DTRAIN_CHECK(eps >= 0, "layer_norm: eps must not be negative, got {}", eps);
  LayerNormResult r{Tensor::empty(x.shape(), x.options()), Tensor::empty(row_shape(x), x.options()),
                    Tensor::empty(row_shape(x), x.options())};
  if (x.numel() == 0) return r;
  detail::backend(x.device())
      .layer_norm(x.contiguous(), contiguous_or_undefined(weight), contiguous_or_undefined(bias), eps, r.y, r.mean,
                  r.rstd);
  return r;
}

LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool bias_grad) {
  check_rms_input(x, weight, "layer_norm_backward");
  check_row_grad(grad_y, x, "layer_norm_backward");
  check_row_stat(mean, x, "mean", "layer_norm_backward");
  check_row_stat(rstd, x, "rstd", "layer_norm_backward");
  const Shape d{x.size(-1)};
  LayerNormGrads g{Tensor::empty(x.shape(), x.options()),
                   weight.defined() ? Tensor::empty(d, x.options()) : Tensor(),
                   bias_grad ? Tensor::empty(d, x.options()) : Tensor()};
  if (x.numel() == 0) {
    if (g.weight.defined()) g.weight.fill_(0);
    if (g.bias.defined()) g.bias.fill_(0);
    return g;
  }
  detail::backend(x.device())
      .layer_norm_backward(grad_y.contiguous(), x.contiguous(), mean.contiguous(), rstd.contiguous(),
                           contiguous_or_undefined(weight), g.x, g.weight, g.bias);
  return g;
}

RmsNormResult rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) {
  check_rms_input(x, weight, "rms_norm");
  DTRAIN_CHECK(eps >= 0, "rms_norm: eps must not be negative, got {}", eps);
  RmsNormResult r{Tensor::empty(x.shape(), x.options()), Tensor::empty(row_shape(x), x.options())};
  if (x.numel() == 0) return r;
  detail::backend(x.device()).rms_norm(x.contiguous(), contiguous_or_undefined(weight), eps, r.y, r.rstd);
  return r;
}

RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight) {
  check_rms_input(x, weight, "rms_norm_backward");
  check_row_grad(grad_y, x, "rms_norm_backward");
  check_row_stat(rstd, x, "rstd", "rms_norm_backward");
  RmsNormGrads g{Tensor::empty(x.shape(), x.options()),
                 weight.defined() ? Tensor::empty(weight.shape(), x.options()) : Tensor()};
  if (x.numel() == 0) {
    if (g.weight.defined()) g.weight.fill_(0);
    return g;
  }
  detail::backend(x.device())
      .rms_norm_backward(grad_y.contiguous(), x.contiguous(), rstd.contiguous(), contiguous_or_undefined(weight), g.x,
                         g.weight);
  return g;
}

}  // namespace dtrain
