// Tensor operations. Each op is declared once here; tensor/ops*.cpp checks its arguments
// (devices, dtypes, shapes, with errors naming the op and both shapes) and forwards to
// the backend of the tensors' device. None of these records gradients: autograd/ wraps
// the differentiable ones.
#pragma once

#include "dtrain/tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace dtrain {

// ============================================================================
// Element-wise
// ============================================================================
enum class UnaryOp : std::uint8_t {
  Neg,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Abs,
  Square,
  Reciprocal,
  Sign,
  Relu,
  Sigmoid,
  Tanh,
  Gelu,      // gelu: the exact erf form
  GeluTanh,  // gelu's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  Silu,      // x * sigmoid(x)
  kCount
};
// Binary ops broadcast (numpy rules). The *Grad ops compute the backward of an activation:
// ReluGrad(g, x) = g * (x > 0); GeluGrad(g, x) = g * gelu'(x);
// SigmoidGrad(g, y) = g * y * (1 - y); TanhGrad(g, y) = g * (1 - y^2) with y the forward output.
// AddRelu(a, b) = relu(a + b) in one pass: a residual block's addition and ReLU.
// GeluTanhGrad(g, x) = g * gelu_tanh'(x); SiluGrad(g, x) = g * silu'(x), both of the input x.
enum class BinaryOp : std::uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Max,
  Min,
  Pow,
  ReluGrad,
  GeluGrad,
  SigmoidGrad,
  TanhGrad,
  AddRelu,
  GeluTanhGrad,
  SiluGrad,
  kCount
};
enum class CompareOp : std::uint8_t { Eq, Ne, Lt, Le, Gt, Ge, kCount };

Tensor unary(UnaryOp op, const Tensor& x);
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
// Writes into `out` (shape must equal the broadcast shape; out may alias a or b exactly).
void binary_out(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
Tensor compare(CompareOp op, const Tensor& a, const Tensor& b);  // -> u8 0/1

inline Tensor neg(const Tensor& x) { return unary(UnaryOp::Neg, x); }
inline Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, x); }
inline Tensor log(const Tensor& x) { return unary(UnaryOp::Log, x); }
inline Tensor sqrt(const Tensor& x) { return unary(UnaryOp::Sqrt, x); }
inline Tensor rsqrt(const Tensor& x) { return unary(UnaryOp::Rsqrt, x); }
inline Tensor abs(const Tensor& x) { return unary(UnaryOp::Abs, x); }
inline Tensor square(const Tensor& x) { return unary(UnaryOp::Square, x); }
inline Tensor relu(const Tensor& x) { return unary(UnaryOp::Relu, x); }
inline Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::Sigmoid, x); }
inline Tensor tanh(const Tensor& x) { return unary(UnaryOp::Tanh, x); }
inline Tensor gelu(const Tensor& x) { return unary(UnaryOp::Gelu, x); }
inline Tensor gelu_tanh(const Tensor& x) { return unary(UnaryOp::GeluTanh, x); }
inline Tensor silu(const Tensor& x) { return unary(UnaryOp::Silu, x); }

inline Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Mul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Div, a, b); }
inline Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Max, a, b); }
inline Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Min, a, b); }
inline Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::Pow, a, b); }
inline Tensor add_relu(const Tensor& a, const Tensor& b) { return binary(BinaryOp::AddRelu, a, b); }
// Scalar variants: the scalar takes the tensor's dtype.
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor pow(const Tensor& a, double s);
inline Tensor sub(const Tensor& a, double s) { return add(a, -s); }
inline Tensor div(const Tensor& a, double s) { return mul(a, 1.0 / s); }

inline Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::Eq, a, b); }
inline Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ne, a, b); }
inline Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Lt, a, b); }
inline Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::Le, a, b); }
inline Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Gt, a, b); }
inline Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ge, a, b); }
// cond (u8, nonzero = true) ? a : b, all three broadcast.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// In-place updates used by optimizers (self must be contiguous and floating):
Tensor& add_(Tensor& self, const Tensor& other, double alpha = 1);               // self += alpha * other
Tensor& mul_(Tensor& self, double s);                                            // self *= s
Tensor& mul_(Tensor& self, const Tensor& other);                                 // self *= other
Tensor& addcmul_(Tensor& self, const Tensor& a, const Tensor& b, double value);  // self += value*a*b
Tensor& addcdiv_(Tensor& self, const Tensor& a, const Tensor& b, double value);  // self += value*a/b
// One step of SGD with momentum, in place on param and its momentum buffer buf (both
// contiguous, floating, of one dtype, shape and device; grad broadcasts to them), as
// PyTorch's SGD computes it:
//   d = grad + weight_decay * param;  buf = momentum * buf + (1 - dampening) * d;
//   param -= lr * (nesterov ? d + momentum * buf : buf).
// Rounded as those add_/mul_ calls are, step by step; the CPU runs it as one pass over the
// three tensors instead of three to five. A grad sharing memory with param or buf is read
// as it was before the step.
struct SgdMomentumStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
void sgd_momentum_step_(Tensor& param, Tensor& buf, const Tensor& grad, const SgdMomentumStep& step);
// One step of Adam or AdamW on param and its moments (all contiguous, floating, of one
// dtype, shape and device; grad broadcasts to them), as the separate passes compute it:
//   param *= decay_factor;                                  (AdamW: 1 - lr * weight_decay)
//   d = grad + l2 * param;                                  (Adam's L2 penalty; 0: none)
//   exp_avg = beta1 * exp_avg + (1 - beta1) * d;  exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * d * d;
//   param -= step_size * exp_avg / (sqrt(exp_avg_sq) + eps).
// step_size and eps carry the bias corrections (optim/adam_moments.h). Rounded as those
// passes are, step by step; the CPU runs it as one pass over the four tensors instead of
// eight with a temporary. A grad sharing memory with what the step writes is read as it was.
struct AdamStep {
  double decay_factor = 1, l2 = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, step_size = 0;
};
void adam_step_(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad, const AdamStep& step);

// ============================================================================
// Reductions (dims empty = all dims)
// ============================================================================
enum class ReduceOp : std::uint8_t { Sum, Mean, Max, Min, kCount };
Tensor reduce(ReduceOp op, const Tensor& x, std::vector<std::int64_t> dims, bool keepdim);
inline Tensor sum(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::Sum, x, std::move(dims), keepdim);
}
inline Tensor mean(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::Mean, x, std::move(dims), keepdim);
}
inline Tensor max(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::Max, x, std::move(dims), keepdim);
}
inline Tensor min(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false) {
  return reduce(ReduceOp::Min, x, std::move(dims), keepdim);
}
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);  // -> i64
// The sum of x's squared elements as an f64 scalar on x's device, accumulated in f64 (the
// gradient clipping norm): one pass, without an f64 copy of x.
Tensor squared_norm(const Tensor& x);
// Sums `x` down to `shape` (the inverse of broadcasting `shape` up to x.shape()).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ============================================================================
// Linear algebra
// ============================================================================
// a @ b for 2-D (m,k)x(k,n) and batched 3-D (B,m,k)x(B,k,n) or (B,m,k)x(k,n); the
// transposes are applied first, as views, without copies. f16 or bf16 operands (both the
// same) give an f32 result, summed in f32: the mixed-precision GEMM (tensor cores on CUDA).
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// out += a @ b for 2-D operands (transposes as in matmul), out contiguous of the product's
// shape and dtype: the GEMM adds into out itself (beta = 1) where the backend can, with no
// product-sized temporary (autograd accumulates weight gradients this way). The sum may
// round differently from out + matmul(a, b) where the GEMM adds partial sums into out.
void matmul_add_(Tensor& out, const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// ============================================================================
// Convolution and pooling (NCHW)
// ============================================================================
struct Conv2dParams {
  std::int64_t stride_h = 1, stride_w = 1;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t dilation_h = 1, dilation_w = 1;
  std::int64_t groups = 1;
};
// x (N,C,H,W), weight (O, C/groups, KH, KW), bias (O) or undefined -> (N,O,OH,OW). As for
// matmul, f16 or bf16 operands give f32 results (and take an f32 bias), but the sums are
// rounded to the operands' type before they are widened (and the bias added): cuDNN writes
// them so, and the CPU does the same to give the same numbers.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);
Tensor conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Shape& x_shape, const Conv2dParams& p);
Tensor conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Shape& weight_shape,
                              const Conv2dParams& p);

struct Pool2dParams {
  std::int64_t kernel_h = 2, kernel_w = 2;
  std::int64_t stride_h = 2, stride_w = 2;
  std::int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // avg pooling only
};
struct MaxPoolResult {
  Tensor output;
  Tensor indices;  // i64, flat index into each (n, c) input plane
};
MaxPoolResult max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Shape& x_shape);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape, const Pool2dParams& p);
// Output size (OH, OW); adaptive pooling averages the PyTorch-defined variable windows.
Tensor adaptive_avg_pool2d(const Tensor& x, std::int64_t out_h, std::int64_t out_w);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_out, const Shape& x_shape);

// ============================================================================
// Batch normalization, training mode: statistics over every dim of x (N, C, ...) but 1
// ============================================================================
// One fused pass for the statistics and one for y = (x - mean) / sqrt(var + eps) * gamma
// + beta; gamma and beta may be undefined (1 and 0). var is the biased batch variance.
// With relu, y = max(0, that) in the same pass (batch norm + ReLU, as in every ResNet
// block), and the backward then takes that y as relu_y: the gradient passes where
// relu_y > 0, masked inside the backward's own passes.
struct BatchNormResult {
  Tensor y, mean, var;  // mean and var: (C)
};
BatchNormResult batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                                   bool relu = false);
struct BatchNormGrads {
  Tensor x, gamma, beta;  // gamma, beta: (C), whether or not the forward had them
};
BatchNormGrads batch_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& var,
                                   const Tensor& gamma, double eps, const Tensor& relu_y = Tensor());

// ============================================================================
// Layer normalization over the last dim, one kernel each way
// ============================================================================
// y = (x - mean) * rstd * weight + bias with mean and the biased variance over the last dim
// per row and rstd = 1 / sqrt(variance + eps), as torch's layer_norm; weight and bias (D) or
// undefined (1 and 0). f32 and f64, summed in the input's dtype; the 16-bit floats are
// refused. mean and rstd have x's shape with the last dim 1 and x's dtype: what the backward
// needs besides x. (LayerNorm over several trailing dims is this over their flattened size.)
struct LayerNormResult {
  Tensor y, mean, rstd;
};
LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// With xhat = (x - mean) * rstd and h = grad_y * weight: dx = rstd * (h - mean(h) - xhat *
// mean(h * xhat)) per row; dweight = the sum over rows of grad_y * xhat (undefined when weight
// is), dbias = the sum over rows of grad_y (only when bias_grad).
struct LayerNormGrads {
  Tensor x, weight, bias;
};
LayerNormGrads layer_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                   const Tensor& weight, bool bias_grad);

// ============================================================================
// RMS normalization over the last dim (Llama's RMSNorm)
// ============================================================================
// y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2 over the last dim) + eps) per row, as
// torch computes x * rsqrt(mean(x^2, -1) + eps) * weight; weight (D) or undefined (1). f32
// and f64, summed in the input's dtype; the 16-bit floats are refused (convert first). rstd
// has x's shape with the last dim 1 and x's dtype: what the backward needs besides x.
struct RmsNormResult {
  Tensor y, rstd;
};
RmsNormResult rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);
// With xhat = x * rstd and h = grad_y * weight: dx = rstd * (h - xhat * mean(h * xhat)) per
// row and dweight = the sum over rows of grad_y * xhat (undefined when weight is).
struct RmsNormGrads {
  Tensor x, weight;
};
RmsNormGrads rms_norm_backward(const Tensor& grad_y, const Tensor& x, const Tensor& rstd, const Tensor& weight);

// ============================================================================
// Rotary position embedding (RoPE), in Hugging Face Llama's "rotate_half" convention
// ============================================================================
// The tables for positions first_position .. first_position + positions - 1 of a head of
// head_dim (even) values: cos[t, i] = cos(p * inv_freq[i]), sin likewise, with p the position
// and inv_freq[i] = theta^(-2i / head_dim), i < head_dim / 2. Computed in f64, then cast to
// dtype; both (positions, head_dim / 2) on `device`.
struct RopeTables {
  Tensor cos, sin;
};
RopeTables rope_tables(std::int64_t positions, std::int64_t head_dim, double theta, DType dtype, Device device,
                       std::int64_t first_position = 0);
// x (B, T, H, D), D even, any strides; cos and sin (T, D / 2) of x's dtype (f32, f64) and
// device. With h = D / 2 and i < h, at every (b, t, head):
//   out[i]     = x[i] * cos[t, i] - x[i + h] * sin[t, i]
//   out[i + h] = x[i + h] * cos[t, i] + x[i] * sin[t, i]
// Returns a new contiguous tensor.
Tensor rope_forward(const Tensor& x, const Tensor& cos, const Tensor& sin);
// The gradient of rope_forward: the same rotation by -sin (its transpose).
Tensor rope_backward(const Tensor& grad_out, const Tensor& cos, const Tensor& sin);

// ============================================================================
// Softmax family (along `dim`)
// ============================================================================
Tensor softmax(const Tensor& x, std::int64_t dim);
Tensor log_softmax(const Tensor& x, std::int64_t dim);
// Given y = softmax(x): dx = y * (g - sum(g * y, dim)).
Tensor softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim);
// Given y = log_softmax(x): dx = g - exp(y) * sum(g, dim).
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& y, std::int64_t dim);

// Softmax cross-entropy of rows of logits, in place: the core of the fused output projection and
// loss (linear_cross_entropy.h), one pass over the logits where the composed ops take seven.
// logits (N, V) contiguous f32 or f64; targets (N) of i64 or i32 in [0, V). With m the row
// maxima, E = exp(logits - m), s the row sums of E and Y the targets one-hot, logits becomes
// E - diag(s) Y (the loss's gradient times s: P - Y = that / s); returns s and each row's
// log-probability of its target, (logits[target] - m) - log s, both (N, 1).
struct SoftmaxCrossEntropyRows {
  Tensor sums, log_prob;
};
SoftmaxCrossEntropyRows softmax_cross_entropy_rows_(Tensor& logits, const Tensor& targets);

// ============================================================================
// Indexing, joining
// ============================================================================
// Rows of x along `dim` picked by index (i64 or i32, 1-D).
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index);
// out = zeros(shape); out.index_select(dim, index) += src, accumulating repeated indices.
Tensor index_add(const Shape& shape, std::int64_t dim, const Tensor& index, const Tensor& src);
// out[i][j] = x[i][index[i][j]] along dim (index has x's rank; i64 or i32).
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index);
// out = zeros(shape); out[i][index[i][j]] += src[i][j] along dim.
Tensor scatter_add(const Shape& shape, std::int64_t dim, const Tensor& index, const Tensor& src);
Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim);
Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim);

// ============================================================================
// Random numbers: counter-based (Philox 4x32-10), so a (seed, offset) pair fixes the
// stream whatever the thread count, and each rank can be given its own seed.
// ============================================================================
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  std::uint64_t seed() const { return seed_; }
  std::uint64_t offset() const { return offset_; }
  void set_state(std::uint64_t seed, std::uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n counters and returns the first.
  std::uint64_t advance(std::uint64_t n) {
    std::uint64_t o = offset_;
    offset_ += n;
    return o;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};
// The process-wide generator used when none is passed; manual_seed resets it.
Generator& default_generator();
void manual_seed(std::uint64_t seed);

Tensor& uniform_(Tensor& t, double low = 0, double high = 1, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0, double stddev = 1, Generator* gen = nullptr);
// Each element 1 with probability p, else 0 (the tensor's dtype).
Tensor& bernoulli_(Tensor& t, double p, Generator* gen = nullptr);
// A random permutation of 0..n-1 (i64), from the generator.
Tensor randperm(std::int64_t n, Generator* gen = nullptr);

// Elementwise |a - b| <= atol + rtol * |b|, same shapes.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// max |a - b| as double (same shapes).
double max_abs_diff(const Tensor& a, const Tensor& b);

// Operators for readability in tests and layers.
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }

}  // namespace dtrain
