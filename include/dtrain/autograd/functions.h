// Differentiable operations on Variables. Each computes its result with the tensor ops
// and records a backward function that captures only what backward needs (relu keeps
// its input, tanh and sigmoid their output). Each has a finite-difference gradient test.
#pragma once

#include "dtrain/autograd/variable.h"
#include "dtrain/tensor/ops.h"

#include <optional>
#include <vector>

namespace dtrain {

// ---- arithmetic (broadcasting) ------------------------------------------------
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable add(const Variable& a, double s);
Variable mul(const Variable& a, double s);
Variable neg(const Variable& a);
Variable pow(const Variable& a, double exponent);
Variable exp(const Variable& a);
Variable log(const Variable& a);
Variable sqrt(const Variable& a);
Variable abs(const Variable& a);  // gradient sign(a): 0 at 0, as PyTorch
// Limits x to [min, max]; either bound may be absent, not both, and min <= max. The gradient
// passes where min <= x <= max (the bounds included, as PyTorch) and is 0 outside and at NaN.
Variable clamp(const Variable& x, std::optional<double> min, std::optional<double> max);

// ---- activations ------------------------------------------------------------------
Variable relu(const Variable& x);
// relu(add(a, b)) (broadcasting) in one pass each way, without keeping the sum for the
// backward: the gradient passes where the output is positive. A residual block's join.
Variable add_relu(const Variable& a, const Variable& b);
// gelu(x) is the exact form, x * Phi(x) with erf; the tanh approximation is GPT-2's
// gelu_new, PyTorch's F.gelu(x, approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class GeluApproximation { None, Tanh };
Variable gelu(const Variable& x);
Variable gelu(const Variable& x, GeluApproximation approx);
// x * sigmoid(x) (swish), keeping its input for the backward. A SwiGLU MLP is
// mul(silu(linear(x, w1, {})), linear(x, w3, {})).
Variable silu(const Variable& x);
Variable sigmoid(const Variable& x);
Variable tanh(const Variable& x);

// ---- reductions ---------------------------------------------------------------------
Variable sum(const Variable& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Variable mean(const Variable& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
// The largest (smallest) element over dims, as torch.amax/amin: the gradient is shared evenly
// among the elements equal to it, where max_pool2d and argmax pick one of the tied elements.
Variable amax(const Variable& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Variable amin(const Variable& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);

// ---- shape ------------------------------------------------------------------------------
Variable reshape(const Variable& x, Shape shape);
Variable flatten(const Variable& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
Variable transpose(const Variable& x, std::int64_t d0, std::int64_t d1);
Variable permute(const Variable& x, const std::vector<std::int64_t>& dims);
Variable narrow(const Variable& x, std::int64_t dim, std::int64_t start, std::int64_t length);
Variable cat(const std::vector<Variable>& xs, std::int64_t dim);
Variable index_select(const Variable& x, std::int64_t dim, const Tensor& index);

// ---- linear algebra, convolution, pooling ----------------------------------------------
Variable matmul(const Variable& a, const Variable& b);
// x (..., in) @ weight(out, in)^T + bias(out); bias may be undefined.
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, const Conv2dParams& p);
Variable max_pool2d(const Variable& x, const Pool2dParams& p);
Variable avg_pool2d(const Variable& x, const Pool2dParams& p);
Variable adaptive_avg_pool2d(const Variable& x, std::int64_t out_h, std::int64_t out_w);

// ---- normalization ---------------------------------------------------------------------------
// Normalizes over every dim except `channel_dim` (1) with batch statistics: returns the
// output; writes the batch mean and biased variance (per channel) to *batch_mean/*batch_var
// when given, for running statistics. gamma/beta (C) may be undefined.
Variable batch_norm_train(const Variable& x, const Variable& gamma, const Variable& beta, double eps,
                          Tensor* batch_mean = nullptr, Tensor* batch_var = nullptr);
// relu(batch_norm_train(...)) with the ReLU fused into batch norm's passes both ways, as
// nn::Sequential runs a BatchNorm followed by a ReLU in training.
Variable batch_norm_relu_train(const Variable& x, const Variable& gamma, const Variable& beta, double eps,
                               Tensor* batch_mean = nullptr, Tensor* batch_var = nullptr);
// Normalizes with fixed statistics (evaluation).
Variable batch_norm_eval(const Variable& x, const Variable& gamma, const Variable& beta, const Tensor& mean,
                         const Tensor& var, double eps);
// Normalizes over the trailing `normalized_dims` dims; gamma/beta have those dims' shape,
// and either may be undefined (GPT-2 without biases: a weight and no beta).
Variable layer_norm(const Variable& x, int normalized_dims, const Variable& gamma, const Variable& beta,
                    double eps);
// Llama's RMSNorm over the last dim, x * rsqrt(mean(x^2, -1) + eps) * weight as torch
// computes it; weight (D) or undefined. One fused kernel each way (rms_norm_forward and
// rms_norm_backward in ops.h); f32 and f64.
Variable rms_norm(const Variable& x, const Variable& weight, double eps);

// ---- position embeddings ------------------------------------------------------------------
// Rotary position embedding of x (B, T, H, D) with the tables of rope_tables (ops.h),
// (T, D/2) each, in Hugging Face Llama's rotate_half convention (rope_forward). The
// gradient flows to x only; the tables are constants.
Variable rotary_embedding(const Variable& x, const Tensor& cos, const Tensor& sin);

// ---- softmax, losses, regularization -------------------------------------------------------
Variable softmax(const Variable& x, std::int64_t dim);
Variable log_softmax(const Variable& x, std::int64_t dim);
// Mean over the batch of -log softmax(logits)[label], logits (N, C), labels (N) i64, with
// label smoothing eps: target = (1 - eps) * onehot + eps / C. Fused log-softmax + NLL.
// Labels outside [0, C) are an error on the CPU; on a GPU they are not read back (that
// would make the host wait for every step) and make the loss NaN.
Variable cross_entropy(const Variable& logits, const Tensor& labels, double label_smoothing = 0);
Variable mse_loss(const Variable& prediction, const Variable& target);  // mean squared error
// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p).
Variable dropout(const Variable& x, double p, Generator* gen = nullptr);

inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
inline Variable operator-(const Variable& a) { return neg(a); }
inline Variable operator*(const Variable& a, double s) { return mul(a, s); }
inline Variable operator+(const Variable& a, double s) { return add(a, s); }

}  // namespace dtrain
