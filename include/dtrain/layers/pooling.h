// Pooling layers over NCHW input.
#pragma once

#include "dtrain/layers/module.h"

namespace dtrain::nn {

class MaxPool2d : public Module {
 public:
  // stride 0 means stride = kernel_size, as in PyTorch.
  explicit MaxPool2d(std::int64_t kernel_size, std::int64_t stride = 0, std::int64_t padding = 0);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

 private:
  Pool2dParams params_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::int64_t kernel_size, std::int64_t stride = 0, std::int64_t padding = 0,
                     bool count_include_pad = true);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

 private:
  Pool2dParams params_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(std::int64_t out_h, std::int64_t out_w);
  Variable forward(const Variable& x) override;
  std::string describe() const override;

 private:
  std::int64_t out_h_, out_w_;
};

}  // namespace dtrain::nn
