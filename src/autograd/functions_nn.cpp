// Matrix products, convolution, pooling, normalization and rotary position embedding.
#include "dtrain/autograd/functions.h"

#include "dtrain/autograd/autocast.h"
#include "dtrain/autograd/fusion.h"

namespace dtrain {

namespace {
// An operand as a product takes it: an f32 tensor rounded to the autocast dtype while a
// guard is live (autocast.h), anything else as it is. Backward keeps these operands, so
// without autocast it holds no more than before (the same tensors).
Tensor for_product(const Tensor& t, std::optional<DType> low) {
  return low && t.dtype() == DType::f32 ? t.to(*low) : t;
}

// Adds op(a) @ op(b) into a weight's gradient: into the gradient itself where it already
// holds one of the product's dtype (the GEMM adds with beta 1, no product-sized
// temporary; 16-bit operands under autocast give an f32 product), else as its first.
void add_product_grad(Variable& weight, const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  if (weight.is_leaf() && weight.has_grad() && a.dim() == 2 && b.dim() == 2) {
    Tensor grad = weight.grad();
    const DType product = is_half(a.dtype()) ? DType::f32 : a.dtype();
    if (grad.is_contiguous() && grad.dtype() == product && is_floating(product)) {
      matmul_add_(grad, a, b, transpose_a, transpose_b);
      return;
    }
  }
  weight.add_grad(matmul(a, b, transpose_a, transpose_b));
}

}  // namespace

Variable matmul(const Variable& a, const Variable& b) {
  DTRAIN_CHECK((a.dim() >= 2 && a.dim() <= 3 && b.dim() == 2) || (a.dim() == 3 && b.dim() == 3),
               "matmul: expected 2-D x 2-D, 3-D x 3-D or 3-D x 2-D, got {} x {}", shape_str(a.shape()),
               shape_str(b.shape()));
  const std::optional<DType> low = autocast_dtype();
  Tensor A = for_product(a.data(), low), B = for_product(b.data(), low);
  return Variable(matmul(A, B), {a, b}, [A, B, low](std::vector<Variable>& in, const Tensor& g_in) {
    const Tensor g = for_product(g_in, low);
    if (in[0].requires_grad()) in[0].add_grad(matmul(g, B, false, true));  // dA = g B^T
    if (in[1].requires_grad()) {
      if (A.dim() == 3 && B.dim() == 2) {
        // B was shared by every batch entry: dB = sum_b A_b^T g_b, one GEMM over (B*m).
        Tensor a2 = A.reshape({-1, A.size(-1)});
        Tensor g2 = g.reshape({-1, g.size(-1)});
        add_product_grad(in[1], a2, g2, true, false);
      } else {
        add_product_grad(in[1], A, g, true, false);  // dB = A^T g
      }
    }
  });
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  DTRAIN_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
               "linear: input {} does not match weight {} (expected (..., in) and (out, in))", shape_str(x.shape()),
               shape_str(weight.shape()));
  DTRAIN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
               "linear: bias {} does not match weight {} (expected (out))", shape_str(bias.shape()),
               shape_str(weight.shape()));
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  const std::optional<DType> low = autocast_dtype();
  Tensor x2 = for_product(x.data().reshape({-1, x.size(-1)}), low);
  Tensor w = for_product(weight.data(), low);
  Tensor y = matmul(x2, w, false, true);
  if (bias.defined()) binary_out(BinaryOp::Add, y, bias.data(), y);
  y = y.reshape(out_shape);
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return Variable(y, inputs, [x2, w, low](std::vector<Variable>& in, const Tensor& g) {
    Tensor g2 = g.reshape({-1, g.size(-1)});
    Tensor g2p = for_product(g2, low);
    if (in[0].requires_grad()) in[0].add_grad(matmul(g2p, w).reshape(in[0].shape()));
    if (in[1].requires_grad()) add_product_grad(in[1], g2p, x2, true, false);
    if (in.size() > 2 && in[2].requires_grad()) in[2].add_grad(sum(g2, {0}));
  });
}

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, const Conv2dParams& p) {
  const std::optional<DType> low = autocast_dtype();
  Tensor xp = for_product(x.data(), low), wp = for_product(weight.data(), low);
  Tensor y = conv2d(xp, wp, bias.defined() ? bias.data() : Tensor(), p);
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return Variable(y, inputs, [xp, wp, low, p](std::vector<Variable>& in, const Tensor& g) {
    const Tensor gp = for_product(g, low);
    if (in[0].requires_grad()) in[0].add_grad(conv2d_backward_input(gp, wp, xp.shape(), p));
    if (in[1].requires_grad()) in[1].add_grad(conv2d_backward_weight(gp, xp, wp.shape(), p));
    if (in.size() > 2 && in[2].requires_grad()) in[2].add_grad(sum(g, {0, 2, 3}));
  });
}

Variable max_pool2d(const Variable& x, const Pool2dParams& p) {
  MaxPoolResult r = max_pool2d(x.data(), p);
  Tensor indices = r.indices;
  return Variable(r.output, {x}, [indices](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(max_pool2d_backward(g, indices, in[0].shape()));
  });
}

Variable avg_pool2d(const Variable& x, const Pool2dParams& p) {
  return Variable(avg_pool2d(x.data(), p), {x}, [p](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(avg_pool2d_backward(g, in[0].shape(), p));
  });
}

Variable adaptive_avg_pool2d(const Variable& x, std::int64_t out_h, std::int64_t out_w) {
  return Variable(adaptive_avg_pool2d(x.data(), out_h, out_w), {x}, [](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(adaptive_avg_pool2d_backward(g, in[0].shape()));
  });
}

// ---- normalization ---------------------------------------------------------------------

namespace {
struct Normalized {
  Variable xhat;
  Tensor mean;  // keepdim shape
  Tensor var;   // biased, keepdim shape
};

// xhat = (x - mean) / sqrt(var + eps) with statistics over `dims`, as one differentiable
// step: dx = invstd * (g - mean(g) - xhat * mean(g * xhat)). The affine part is applied
// by the callers with ordinary broadcasting ops.
Normalized normalize(const Variable& x, const std::vector<std::int64_t>& dims, double eps) {
  Tensor mu = mean(x.data(), dims, true);
  Tensor centered = sub(x.data(), mu);
  Tensor var = mean(square(centered), dims, true);
  Tensor invstd = rsqrt(add(var, eps));
  Tensor xhat = mul(centered, invstd);
  Variable out(xhat, {x}, [dims, xhat, invstd](std::vector<Variable>& in, const Tensor& g) {
    Tensor gm = mean(g, dims, true);
    Tensor gxm = mean(mul(g, xhat), dims, true);
    in[0].add_grad(mul(sub(sub(g, gm), mul(xhat, gxm)), invstd));
  });
  return {out, mu, var};
}

// (C) -> (1, C, 1, ...) so that it broadcasts against x along dim 1.
Shape channel_shape(const Variable& x) {
  Shape s(static_cast<std::size_t>(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

Variable affine(const Variable& xhat, const Variable& gamma, const Variable& beta, const Shape& param_shape) {
  Variable y = xhat;
  if (gamma.defined()) y = mul(y, reshape(gamma, param_shape));
  if (beta.defined()) y = add(y, reshape(beta, param_shape));
  return y;
}

void check_batch_norm_input(const Variable& x, const Variable& gamma, const char* op) {
  DTRAIN_CHECK(x.dim() >= 2, "{}: expected input (N, C, ...), got {}", op, shape_str(x.shape()));
  DTRAIN_CHECK(!gamma.defined() || gamma.shape() == Shape{x.size(1)},
               "{}: weight {} does not match {} channels of input {}", op, shape_str(gamma.shape()), x.size(1),
               shape_str(x.shape()));
}

// One fused kernel each way (batch_norm_forward / batch_norm_backward), not the composed
// normalize + affine of layer_norm: batch norm runs on every activation of a CNN. With
// relu, the ReLU is fused into both, and the backward keeps the output for its mask.
Variable batch_norm_train_impl(const Variable& x, const Variable& gamma, const Variable& beta, double eps,
                               Tensor* batch_mean, Tensor* batch_var, bool relu) {
  // batch_norm_forward checks the input, weight and bias.
  BatchNormResult r = batch_norm_forward(x.data(), gamma.defined() ? gamma.data() : Tensor(),
                                         beta.defined() ? beta.data() : Tensor(), eps, relu);
  if (batch_mean) *batch_mean = r.mean;
  if (batch_var) *batch_var = r.var;
  std::vector<Variable> inputs{x};
  if (gamma.defined()) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  const int gamma_at = gamma.defined() ? 1 : 0, beta_at = beta.defined() ? gamma_at + 1 : 0;  // 0: absent
  const Tensor relu_y = relu ? r.y : Tensor();
  return Variable(
      r.y, inputs,
      [mean = r.mean, var = r.var, relu_y, eps, gamma_at, beta_at](std::vector<Variable>& in, const Tensor& g) {
        const Tensor gamma_t = gamma_at ? in[gamma_at].data() : Tensor();
        BatchNormGrads d = batch_norm_backward(g, in[0].data(), mean, var, gamma_t, eps, relu_y);
        if (in[0].requires_grad()) in[0].add_grad(d.x);
        if (gamma_at && in[gamma_at].requires_grad()) in[gamma_at].add_grad(d.gamma);
        if (beta_at && in[beta_at].requires_grad()) in[beta_at].add_grad(d.beta);
      });
}
}  // namespace

Variable batch_norm_train(const Variable& x, const Variable& gamma, const Variable& beta, double eps,
                          Tensor* batch_mean, Tensor* batch_var) {
  return batch_norm_train_impl(x, gamma, beta, eps, batch_mean, batch_var, false);
}

Variable batch_norm_relu_train(const Variable& x, const Variable& gamma, const Variable& beta, double eps,
                               Tensor* batch_mean, Tensor* batch_var) {
  return batch_norm_train_impl(x, gamma, beta, eps, batch_mean, batch_var, true);
}

Variable batch_norm_eval(const Variable& x, const Variable& gamma, const Variable& beta, const Tensor& mean,
                         const Tensor& var, double eps) {
  check_batch_norm_input(x, gamma, "batch_norm");
  Shape cs = channel_shape(x);
  Tensor invstd = rsqrt(add(var, eps)).reshape(cs);
  Variable xhat = mul(sub(x, Variable(mean.reshape(cs))), Variable(invstd));
  return affine(xhat, gamma, beta, cs);
}

namespace {

// The one-kernel LayerNorm (layer_norm_forward in ops.h) takes f32/f64 with parameters of the
// input's dtype and device, and rows of at least one element (its row count divides by the row
// length); mixed dtypes (autocast's half activations) and empty rows take the composed path.
bool fused_layer_norm_applies(const Variable& x, const Shape& trailing, const Variable& gamma, const Variable& beta) {
  const auto same = [&](const Variable& p) {
    return !p.defined() || (p.dtype() == x.dtype() && p.device() == x.device());
  };
  return (x.dtype() == DType::f32 || x.dtype() == DType::f64) && same(gamma) && same(beta) &&
         shape_numel(trailing) > 0;
}

// x's trailing dims flattened into one row of D; keeps x (an input), mean and rstd per row.
Variable fused_layer_norm(const Variable& x, const Shape& trailing, const Variable& gamma, const Variable& beta,
                          double eps) {
  const std::int64_t d = shape_numel(trailing);
  const Shape rows_d{x.numel() / d, d};
  const auto flat = [&](const Variable& p) { return p.defined() ? p.data().reshape({d}) : Tensor(); };
  LayerNormResult r = layer_norm_forward(x.data().reshape(rows_d), flat(gamma), flat(beta), eps);
  std::vector<Variable> inputs{x};
  if (gamma.defined()) inputs.push_back(gamma);
  if (beta.defined()) inputs.push_back(beta);
  const int gamma_at = gamma.defined() ? 1 : 0, beta_at = beta.defined() ? gamma_at + 1 : 0;  // 0: absent
  return Variable(r.y.reshape(x.shape()), inputs,
                  [mean = r.mean, rstd = r.rstd, rows_d, gamma_at, beta_at](std::vector<Variable>& in, const Tensor& g) {
                    const std::int64_t d = rows_d[1];
                    const Tensor w = gamma_at ? in[gamma_at].data().reshape({d}) : Tensor();
                    LayerNormGrads grads = layer_norm_backward(g.reshape(rows_d), in[0].data().reshape(rows_d), mean,
                                                               rstd, w, beta_at != 0);
                    if (in[0].requires_grad()) in[0].add_grad(grads.x.reshape(in[0].shape()));
                    if (gamma_at && in[gamma_at].requires_grad())
                      in[gamma_at].add_grad(grads.weight.reshape(in[gamma_at].shape()));
                    if (beta_at && in[beta_at].requires_grad())
                      in[beta_at].add_grad(grads.bias.reshape(in[beta_at].shape()));
                  });
}

}  // namespace

Variable layer_norm(const Variable& x, int normalized_dims, const Variable& gamma, const Variable& beta, double eps) {
  DTRAIN_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(),
               "layer_norm: cannot normalize the last {} dims of input {}", normalized_dims, shape_str(x.shape()));
  Shape trailing(x.shape().end() - normalized_dims, x.shape().end());
  DTRAIN_CHECK(!gamma.defined() || gamma.shape() == trailing,
               "layer_norm: weight {} does not match the normalized shape {}", shape_str(gamma.shape()),
               shape_str(trailing));
  DTRAIN_CHECK(!beta.defined() || beta.shape() == trailing,
               "layer_norm: bias {} does not match the normalized shape {}", shape_str(beta.shape()),
               shape_str(trailing));
  if (fused_kernels() && fused_layer_norm_applies(x, trailing, gamma, beta))
    return fused_layer_norm(x, trailing, gamma, beta, eps);
  std::vector<std::int64_t> dims;
  for (std::int64_t d = x.dim() - normalized_dims; d < x.dim(); ++d) dims.push_back(d);
  Normalized n = normalize(x, dims, eps);
  return affine(n.xhat, gamma, beta, trailing);
}

// Keeps x (an input) and rstd, one value per row.
Variable rms_norm(const Variable& x, const Variable& weight, double eps) {
  // rms_norm_forward checks the input and the weight.
  RmsNormResult r = rms_norm_forward(x.data(), weight.defined() ? weight.data() : Tensor(), eps);
  std::vector<Variable> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  return Variable(r.y, inputs, [rstd = r.rstd](std::vector<Variable>& in, const Tensor& g) {
    const bool has_weight = in.size() > 1;
    RmsNormGrads d = rms_norm_backward(g, in[0].data(), rstd, has_weight ? in[1].data() : Tensor());
    if (in[0].requires_grad()) in[0].add_grad(d.x);
    if (has_weight && in[1].requires_grad()) in[1].add_grad(d.weight);
  });
}

// ---- position embeddings ---------------------------------------------------------------

Variable rotary_embedding(const Variable& x, const Tensor& cos, const Tensor& sin) {
  return Variable(rope_forward(x.data(), cos, sin), {x}, [cos, sin](std::vector<Variable>& in, const Tensor& g) {
    in[0].add_grad(rope_backward(g, cos, sin));
  });
}

}  // namespace dtrain
