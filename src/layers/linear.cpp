#include "dtrain/layers/linear.h"

#include "dtrain/layers/init.h"

#include <cmath>

namespace dtrain::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool with_bias)
    : in_(in_features), out_(out_features) {
  DTRAIN_CHECK(in_features > 0 && out_features > 0, "Linear({}, {}): feature counts must be positive", in_features,
               out_features);
  Tensor w = Tensor::empty({out_features, in_features});
  init::kaiming_uniform_(w, std::sqrt(5.0));
  weight = register_parameter("weight", w);
  if (with_bias) {
    double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    Tensor b = Tensor::empty({out_features});
    uniform_(b, -bound, bound);
    bias = register_parameter("bias", b);
  }
}

Variable Linear::forward(const Variable& x) { return linear(x, weight, bias); }

Variable Linear::forward_relu(const Variable& x) {
  if (!bias.defined()) return relu(linear(x, weight, Variable()));
  return add_relu(linear(x, weight, Variable()), bias);
}

std::string Linear::describe() const {
  return fmt::format("Linear({}, {}{})", in_, out_, bias.defined() ? "" : ", bias=false");
}

}  // namespace dtrain::nn
