#include "dtrain/layers/conv.h"

#include "dtrain/layers/init.h"

#include <cmath>

namespace dtrain::nn {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Conv2dOptions o)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  DTRAIN_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0,
               "Conv2d({}, {}, {}): channels and kernel size must be positive", in_channels, out_channels,
               kernel_size);
  DTRAIN_CHECK(o.groups > 0 && in_channels % o.groups == 0 && out_channels % o.groups == 0,
               "Conv2d({}, {}): groups={} must divide both channel counts", in_channels, out_channels, o.groups);
  DTRAIN_CHECK(o.stride > 0 && o.dilation > 0 && o.padding >= 0,
               "Conv2d: stride {} and dilation {} must be positive, padding {} non-negative", o.stride, o.dilation,
               o.padding);
  params_ = {o.stride, o.stride, o.padding, o.padding, o.dilation, o.dilation, o.groups};
  Tensor w = Tensor::empty({out_channels, in_channels / o.groups, kernel_size, kernel_size});
  init::kaiming_uniform_(w, std::sqrt(5.0));
  weight = register_parameter("weight", w);
  if (o.bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(w)));
    Tensor b = Tensor::empty({out_channels});
    uniform_(b, -bound, bound);
    bias = register_parameter("bias", b);
  }
}

Variable Conv2d::forward(const Variable& x) { return conv2d(x, weight, bias, params_); }

std::string Conv2d::describe() const {
  std::string s = fmt::format("Conv2d({}, {}, kernel={}", in_, out_, kernel_);
  if (params_.stride_h != 1) s += fmt::format(", stride={}", params_.stride_h);
  if (params_.pad_h != 0) s += fmt::format(", padding={}", params_.pad_h);
  if (params_.dilation_h != 1) s += fmt::format(", dilation={}", params_.dilation_h);
  if (params_.groups != 1) s += fmt::format(", groups={}", params_.groups);
  if (!bias.defined()) s += ", bias=false";
  return s + ")";
}

}  // namespace dtrain::nn
