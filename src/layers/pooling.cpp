#include "dtrain/layers/pooling.h"

namespace dtrain::nn {
namespace {
Pool2dParams make_params(std::int64_t kernel, std::int64_t stride, std::int64_t padding, bool include_pad) {
  if (stride == 0) stride = kernel;
  DTRAIN_CHECK(kernel > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel,
               "pooling: kernel {} and stride {} must be positive, padding {} at most half the kernel", kernel,
               stride, padding);
  return {kernel, kernel, stride, stride, padding, padding, include_pad};
}
}  // namespace

MaxPool2d::MaxPool2d(std::int64_t kernel_size, std::int64_t stride, std::int64_t padding)
    : params_(make_params(kernel_size, stride, padding, true)) {}
Variable MaxPool2d::forward(const Variable& x) { return max_pool2d(x, params_); }
std::string MaxPool2d::describe() const {
  return fmt::format("MaxPool2d(kernel={}, stride={}, padding={})", params_.kernel_h, params_.stride_h, params_.pad_h);
}

AvgPool2d::AvgPool2d(std::int64_t kernel_size, std::int64_t stride, std::int64_t padding, bool count_include_pad)
    : params_(make_params(kernel_size, stride, padding, count_include_pad)) {}
Variable AvgPool2d::forward(const Variable& x) { return avg_pool2d(x, params_); }
std::string AvgPool2d::describe() const {
  return fmt::format("AvgPool2d(kernel={}, stride={}, padding={})", params_.kernel_h, params_.stride_h, params_.pad_h);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::int64_t out_h, std::int64_t out_w) : out_h_(out_h), out_w_(out_w) {
  DTRAIN_CHECK(out_h > 0 && out_w > 0, "AdaptiveAvgPool2d({}, {}): output size must be positive", out_h, out_w);
}
Variable AdaptiveAvgPool2d::forward(const Variable& x) { return adaptive_avg_pool2d(x, out_h_, out_w_); }
std::string AdaptiveAvgPool2d::describe() const { return fmt::format("AdaptiveAvgPool2d({}, {})", out_h_, out_w_); }

}  // namespace dtrain::nn
