// Convolution and pooling ops: argument checks, PyTorch's output-size formulas, output
// allocation, then the backend. The backward ops allocate their gradients uninitialized, and
// the backends write every element of them. Convolutions of 16-bit operands (f16, bf16) sum in f32 and
// return f32 (product_dtype) rounded through the operands' type: the mixed-precision path.
#include "dtrain/tensor/ops.h"

#include "tensor/backend.h"

namespace dtrain {
namespace {

void check_same(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  DTRAIN_CHECK(a.device() == b.device(), "{}: {} on {} but input on {}", op, what, b.device().str(), a.device().str());
  DTRAIN_CHECK(a.dtype() == b.dtype(), "{}: {} has dtype {} but input has {}", op, what, dtype_name(b.dtype()),
               dtype_name(a.dtype()));
}

void check_input(const Tensor& t, const char* op, const char* what) {
  check_defined(t, op);
  DTRAIN_CHECK(is_floating(t.dtype()), "{}: {} must be floating (f32, f64, f16, bf16), got {}", op, what,
               dtype_name(t.dtype()));
}

void check_nchw(const Shape& s, const char* op, const char* what) {
  DTRAIN_CHECK(s.size() == 4, "{}: {} must be 4-D (N, C, H, W), got shape {}", op, what, shape_str(s));
}

// Output size along one spatial dim (PyTorch's formula, floor mode).
std::int64_t conv_out_size(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                           std::int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// Validates x and weight shapes against p; returns the output shape (N, O, OH, OW).
Shape conv_output_shape(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  check_nchw(x, op, "input");
  DTRAIN_CHECK(w.size() == 4, "{}: weight must be 4-D (O, C/groups, KH, KW), got shape {}", op, shape_str(w));
  DTRAIN_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 && p.pad_h >= 0 &&
                   p.pad_w >= 0 && p.groups >= 1,
               "{}: expected stride >= 1, dilation >= 1, padding >= 0 and groups >= 1, got stride ({}, {}), "
               "padding ({}, {}), dilation ({}, {}), groups {}",
               op, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups);
  DTRAIN_CHECK(x[1] % p.groups == 0 && w[0] % p.groups == 0,
               "{}: {} input channels and {} output channels must both be divisible by groups={}", op, x[1], w[0],
               p.groups);
  DTRAIN_CHECK(w[1] == x[1] / p.groups,
               "{}: weight {} expects {} input channels per group, input {} has {} ({} groups)", op, shape_str(w), w[1],
               shape_str(x), x[1] / p.groups, p.groups);
  const std::int64_t kh = p.dilation_h * (w[2] - 1) + 1, kw = p.dilation_w * (w[3] - 1) + 1;
  DTRAIN_CHECK(w[2] >= 1 && w[3] >= 1 && kh <= x[2] + 2 * p.pad_h && kw <= x[3] + 2 * p.pad_w,
               "{}: dilated kernel ({}, {}) of weight {} does not fit the padded input ({}, {}) of input {}", op, kh,
               kw, shape_str(w), x[2] + 2 * p.pad_h, x[3] + 2 * p.pad_w, shape_str(x));
  return {x[0], w[0], conv_out_size(x[2], w[2], p.stride_h, p.pad_h, p.dilation_h),
          conv_out_size(x[3], w[3], p.stride_w, p.pad_w, p.dilation_w)};
}

void check_grad_out(const char* op, const Tensor& grad_out, const Shape& expected) {
  DTRAIN_CHECK(grad_out.shape() == expected, "{}: grad_out has shape {}, expected {}", op, shape_str(grad_out.shape()),
               shape_str(expected));
}

// Validates a pooling window against x's shape; returns the output shape (N, C, OH, OW).
Shape pool_output_shape(const char* op, const Shape& x, const Pool2dParams& p) {
  check_nchw(x, op, "input");
  DTRAIN_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1,
               "{}: expected kernel >= 1 and stride >= 1, got kernel ({}, {}), stride ({}, {})", op, p.kernel_h,
               p.kernel_w, p.stride_h, p.stride_w);
  // As in PyTorch: with padding above half the kernel a window could hold padding only.
  DTRAIN_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
               "{}: padding ({}, {}) must be >= 0 and at most half the kernel ({}, {})", op, p.pad_h, p.pad_w,
               p.kernel_h, p.kernel_w);
  DTRAIN_CHECK(p.kernel_h <= x[2] + 2 * p.pad_h && p.kernel_w <= x[3] + 2 * p.pad_w,
               "{}: kernel ({}, {}) does not fit the padded input ({}, {}) of input {}", op, p.kernel_h, p.kernel_w,
               x[2] + 2 * p.pad_h, x[3] + 2 * p.pad_w, shape_str(x));
  return {x[0], x[1], conv_out_size(x[2], p.kernel_h, p.stride_h, p.pad_h, 1),
          conv_out_size(x[3], p.kernel_w, p.stride_w, p.pad_w, 1)};
}

}  // namespace

// ---- convolution ---------------------------------------------------------------

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  check_input(x, "conv2d", "input");
  check_input(weight, "conv2d", "weight");
  check_same(x, weight, "conv2d", "weight");
  Shape out_shape = conv_output_shape("conv2d", x.shape(), weight.shape(), p);
  if (bias.defined()) {
    DTRAIN_CHECK(bias.device() == x.device() && bias.dtype() == product_dtype(x.dtype()),
                 "conv2d: bias is {} on {}, expected {} on {} for input {}", dtype_name(bias.dtype()),
                 bias.device().str(), dtype_name(product_dtype(x.dtype())), x.device().str(), dtype_name(x.dtype()));
    DTRAIN_CHECK(bias.shape() == Shape{weight.size(0)}, "conv2d: bias has shape {}, expected [{}] for weight {}",
                 shape_str(bias.shape()), weight.size(0), shape_str(weight.shape()));
  }
  Tensor out = Tensor::empty(out_shape, {product_dtype(x.dtype()), x.device()});
  detail::backend(x.device()).conv2d(x, weight, bias, p, out);
  return out;
}

Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p) {
  check_input(grad_out, "conv2d_backward_input", "grad_out");
  check_input(weight, "conv2d_backward_input", "weight");
  check_same(grad_out, weight, "conv2d_backward_input", "weight");
  check_grad_out("conv2d_backward_input", grad_out,
                 conv_output_shape("conv2d_backward_input", x_shape, weight.shape(), p));
  // Uninitialized: the backend writes every element (zero-filling first cost a pass over
  // every input gradient that the convolution then overwrote).
  Tensor grad_x = Tensor::empty(x_shape, {product_dtype(grad_out.dtype()), grad_out.device()});
  detail::backend(grad_out.device()).conv2d_backward_input(grad_out, weight, p, grad_x);
  return grad_x;
}

Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dParams& p) {
  check_input(grad_out, "conv2d_backward_weight", "grad_out");
  check_input(x, "conv2d_backward_weight", "input");
  check_same(grad_out, x, "conv2d_backward_weight", "input");
  check_grad_out("conv2d_backward_weight", grad_out,
                 conv_output_shape("conv2d_backward_weight", x.shape(), weight_shape, p));
  Tensor grad_w = Tensor::empty(weight_shape, {product_dtype(grad_out.dtype()), grad_out.device()});
  detail::backend(grad_out.device()).conv2d_backward_weight(grad_out, x, p, grad_w);
  return grad_w;
}

// ---- pooling ----------------------------------------------------------------------

MaxPoolResult max_pool2d(const Tensor& x, const Pool2dParams& p) {
  check_input(x, "max_pool2d", "input");
  Shape out_shape = pool_output_shape("max_pool2d", x.shape(), p);
  MaxPoolResult r{Tensor::empty(out_shape, x.options()), Tensor::empty(out_shape, {DType::i64, x.device()})};
  detail::backend(x.device()).max_pool2d(x, p, r.output, r.indices);
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape) {
  check_input(grad_out, "max_pool2d_backward", "grad_out");
  check_defined(indices, "max_pool2d_backward");
  check_nchw(x_shape, "max_pool2d_backward", "input");
  DTRAIN_CHECK(indices.dtype() == DType::i64 && indices.device() == grad_out.device(),
               "max_pool2d_backward: indices must be i64 on {}, got {} on {}", grad_out.device().str(),
               dtype_name(indices.dtype()), indices.device().str());
  DTRAIN_CHECK(grad_out.dim() == 4 && indices.shape() == grad_out.shape() && grad_out.size(0) == x_shape[0] &&
                   grad_out.size(1) == x_shape[1],
               "max_pool2d_backward: grad_out {} and indices {} do not match input {}", shape_str(grad_out.shape()),
               shape_str(indices.shape()), shape_str(x_shape));
  // Uninitialized: each backend zeroes the planes it scatters into, in the same pass.
  Tensor grad_x = Tensor::empty(x_shape, grad_out.options());
  detail::backend(grad_out.device()).max_pool2d_backward(grad_out, indices, grad_x);
  return grad_x;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  check_input(x, "avg_pool2d", "input");
  Tensor out = Tensor::empty(pool_output_shape("avg_pool2d", x.shape(), p), x.options());
  detail::backend(x.device()).avg_pool2d(x, p, out);
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p) {
  check_input(grad_out, "avg_pool2d_backward", "grad_out");
  check_grad_out("avg_pool2d_backward", grad_out, pool_output_shape("avg_pool2d_backward", x_shape, p));
  Tensor grad_x = Tensor::zeros(x_shape, grad_out.options());
  detail::backend(grad_out.device()).avg_pool2d_backward(grad_out, p, grad_x);
  return grad_x;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::int64_t out_h, std::int64_t out_w) {
  check_input(x, "adaptive_avg_pool2d", "input");
  check_nchw(x.shape(), "adaptive_avg_pool2d", "input");
  DTRAIN_CHECK(out_h >= 1 && out_w >= 1 && x.size(2) >= 1 && x.size(3) >= 1,
               "adaptive_avg_pool2d: output size ({}, {}) must be positive and input {} non-empty", out_h, out_w,
               shape_str(x.shape()));
  Tensor out = Tensor::empty({x.size(0), x.size(1), out_h, out_w}, x.options());
  detail::backend(x.device()).adaptive_avg_pool2d(x, out);
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape) {
  check_input(grad_out, "adaptive_avg_pool2d_backward", "grad_out");
  check_nchw(x_shape, "adaptive_avg_pool2d_backward", "input");
  DTRAIN_CHECK(grad_out.dim() == 4 && grad_out.size(0) == x_shape[0] && grad_out.size(1) == x_shape[1] &&
                   grad_out.size(2) >= 1 && grad_out.size(3) >= 1 && x_shape[2] >= 1 && x_shape[3] >= 1,
               "adaptive_avg_pool2d_backward: grad_out {} does not match input {}", shape_str(grad_out.shape()),
               shape_str(x_shape));
  Tensor grad_x = Tensor::zeros(x_shape, grad_out.options());
  detail::backend(grad_out.device()).adaptive_avg_pool2d_backward(grad_out, grad_x);
  return grad_x;
}

}  // namespace dtrain
