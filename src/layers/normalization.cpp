#include "dtrain/layers/normalization.h"

#include <algorithm>
#include <fmt/ranges.h>

namespace dtrain::nn {

BatchNorm::BatchNorm(std::int64_t channels, std::vector<std::int64_t> expected_dims, BatchNormOptions o)
    : channels_(channels), expected_dims_(std::move(expected_dims)), options_(o) {
  DTRAIN_CHECK(channels > 0, "BatchNorm({}): channel count must be positive", channels);
  DTRAIN_CHECK(o.eps > 0 && o.momentum >= 0 && o.momentum <= 1,
               "BatchNorm: eps {} must be positive and momentum {} in [0, 1]", o.eps, o.momentum);
  if (o.affine) {
    weight = register_parameter("weight", Tensor::ones({channels}));
    bias = register_parameter("bias", Tensor::zeros({channels}));
  }
  running_mean = Tensor::zeros({channels});
  running_var = Tensor::ones({channels});
  num_batches_tracked = Tensor::zeros({}, {DType::i64});
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
  register_buffer("num_batches_tracked", &num_batches_tracked);
}

Variable BatchNorm::normalize_batch(const Variable& x, Tensor& batch_mean, Tensor& unbiased_var, bool relu) {
  Tensor biased;
  Variable y = relu ? batch_norm_relu_train(x, weight, bias, options_.eps, &batch_mean, &biased)
                    : batch_norm_train(x, weight, bias, options_.eps, &batch_mean, &biased);
  double n = static_cast<double>(x.numel() / channels_);
  unbiased_var = mul(biased, n / (n - 1));  // batch_norm_train ensures n > 1
  return y;
}

Variable BatchNorm::forward(const Variable& x) { return run(x, false); }

Variable BatchNorm::forward_relu(const Variable& x) { return run(x, true); }

Variable BatchNorm::run(const Variable& x, bool relu) {
  DTRAIN_CHECK(std::find(expected_dims_.begin(), expected_dims_.end(), x.dim()) != expected_dims_.end(),
               "{}: expected a {}-d input, got {}", describe(), fmt::join(expected_dims_, " or "),
               shape_str(x.shape()));
  DTRAIN_CHECK(x.size(1) == channels_, "{}: input {} has {} channels", describe(), shape_str(x.shape()), x.size(1));
  if (!is_training()) {
    Variable y = batch_norm_eval(x, weight, bias, running_mean, running_var, options_.eps);
    return relu ? dtrain::relu(y) : y;
  }

  Tensor batch_mean, unbiased_var;
  Variable y = normalize_batch(x, batch_mean, unbiased_var, relu);
  // Running statistics use the unbiased variance, as PyTorch does.
  NoGradGuard no_grad;
  double m = options_.momentum;
  mul_(running_mean, 1 - m);
  add_(running_mean, batch_mean, m);
  mul_(running_var, 1 - m);
  add_(running_var, unbiased_var, m);
  num_batches_tracked.copy_(add(num_batches_tracked, 1.0));  // on the device: no host read
  return y;
}

std::string BatchNorm::describe() const {
  return fmt::format("BatchNorm{}d({}{})", expected_dims_.back() == 4 ? 2 : 1, channels_,
                     options_.affine ? "" : ", affine=false");
}

BatchNorm1d::BatchNorm1d(std::int64_t channels, BatchNormOptions options) : BatchNorm(channels, {2, 3}, options) {}
BatchNorm2d::BatchNorm2d(std::int64_t channels, BatchNormOptions options) : BatchNorm(channels, {4}, options) {}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine, bool with_bias)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  DTRAIN_CHECK(!shape_.empty() && shape_numel(shape_) > 0, "LayerNorm: normalized shape {} must be non-empty",
               shape_str(shape_));
  if (affine) {
    weight = register_parameter("weight", Tensor::ones(shape_));
    if (with_bias) bias = register_parameter("bias", Tensor::zeros(shape_));
  }
}

Variable LayerNorm::forward(const Variable& x) {
  return layer_norm(x, static_cast<int>(shape_.size()), weight, bias, eps_);
}

std::string LayerNorm::describe() const {
  return fmt::format("LayerNorm({}{})", shape_str(shape_),
                     !weight.defined() ? ", affine=false" : (bias.defined() ? "" : ", bias=false"));
}

RMSNorm::RMSNorm(std::int64_t dim, double eps) : dim_(dim), eps_(eps) {
  DTRAIN_CHECK(dim > 0, "RMSNorm({}): dim must be positive", dim);
  DTRAIN_CHECK(eps >= 0, "RMSNorm({}): eps must not be negative, got {}", dim, eps);
  weight = register_parameter("weight", Tensor::ones({dim}));
}

Variable RMSNorm::forward(const Variable& x) {
  DTRAIN_CHECK(x.dim() >= 1 && x.size(-1) == dim_, "{}: expected input (..., {}), got {}", describe(), dim_,
               shape_str(x.shape()));
  return rms_norm(x, weight, eps_);
}

std::string RMSNorm::describe() const { return fmt::format("RMSNorm({})", dim_); }

}  // namespace dtrain::nn
