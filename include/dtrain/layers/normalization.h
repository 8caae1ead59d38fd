// Batch normalization (running statistics for evaluation), layer normalization and RMSNorm.
// A synchronized BatchNorm needs a communicator and lives in dist.
#pragma once

#include "dtrain/layers/module.h"

namespace dtrain::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch
  bool affine = true;
};

// Normalizes each channel (dim 1) over the batch and spatial dims. `expected_dims` is 2
// or 3 for BatchNorm1d ((N, C) or (N, C, L)) and 4 for BatchNorm2d; the check gives a
// clear error for the wrong rank.
class BatchNorm : public Module {
 public:
  BatchNorm(std::int64_t channels, std::vector<std::int64_t> expected_dims, BatchNormOptions options);
  // Final: a variant changes the batch statistics step (normalize_batch), so that
  // forward_relu, which Sequential may call instead, stays the same computation.
  Variable forward(const Variable& x) final;
  // relu(forward(x)); in training the ReLU is fused into batch norm's passes forward and
  // backward (batch_norm_relu_train). Sequential calls it for a BatchNorm followed by a ReLU.
  Variable forward_relu(const Variable& x);
  std::string describe() const override;

  std::int64_t channels() const { return channels_; }
  const std::vector<std::int64_t>& expected_dims() const { return expected_dims_; }
  const BatchNormOptions& options() const { return options_; }

  Variable weight, bias;  // (C) or undefined when !affine
  Tensor running_mean, running_var;
  Tensor num_batches_tracked;  // i64 scalar

 protected:
  // The batch statistics step, overridable by a synchronized variant: returns the
  // output (with ReLU applied when `relu`) and sets the per-channel batch mean and
  // *unbiased* variance (n / (n - 1) with n the values per channel it normalized over),
  // which the running statistics track.
  virtual Variable normalize_batch(const Variable& x, Tensor& batch_mean, Tensor& unbiased_var, bool relu);

 private:
  Variable run(const Variable& x, bool relu);

  std::int64_t channels_;
  std::vector<std::int64_t> expected_dims_;
  BatchNormOptions options_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(std::int64_t channels, BatchNormOptions options = {});
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(std::int64_t channels, BatchNormOptions options = {});
};

class LayerNorm : public Module {
 public:
  // Normalizes over the trailing dims given by `normalized_shape`. With affine, a weight
  // (ones) and, unless !bias, a bias (zeros): GPT-2 without biases is bias = false, as
  // nanoGPT's LayerNorm(ndim, bias).
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true, bool bias = true);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

  Variable weight, bias;  // each undefined when absent

 private:
  Shape shape_;
  double eps_;
};

// Llama's RMSNorm over the last dim: x * rsqrt(mean(x^2, -1) + eps) * weight, the weight (dim)
// starting at ones (rms_norm in autograd/functions.h).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(std::int64_t dim, double eps = 1e-6);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

  Variable weight;

 private:
  std::int64_t dim_;
  double eps_;
};

}  // namespace dtrain::nn
