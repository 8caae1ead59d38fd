// Conv2d over NCHW input with stride, padding, dilation and groups.
#pragma once

#include "dtrain/layers/module.h"

namespace dtrain::nn {

struct Conv2dOptions {
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t dilation = 1;
  std::int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  // PyTorch's default init (kaiming_uniform with a = sqrt(5); bias U(-1/sqrt(fan_in), ...)).
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Conv2dOptions options = {});
  Variable forward(const Variable& x) override;
  std::string describe() const override;

  Variable weight, bias;  // (out, in/groups, k, k), (out) or undefined
  const Conv2dParams& params() const { return params_; }

 private:
  std::int64_t in_, out_, kernel_;
  Conv2dParams params_;
};

}  // namespace dtrain::nn
