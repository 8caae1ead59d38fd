// Linear: y = x W^T + b over the last dim, x (..., in) -> (..., out).
#pragma once

#include "dtrain/layers/module.h"

namespace dtrain::nn {

class Linear : public Module {
 public:
  // PyTorch's default init: W, b ~ U(-1/sqrt(in), 1/sqrt(in)).
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);
  Variable forward(const Variable& x) override;
  // relu(forward(x)), which Sequential calls for a Linear followed by a ReLU: with a bias,
  // the bias is added and the ReLU taken in one pass (add_relu), one pass over the
  // activations fewer. The same values and gradients (the bias's summed over the rows in
  // another order, so to rounding).
  Variable forward_relu(const Variable& x);
  std::string describe() const override;

  Variable weight, bias;  // (out, in), (out) or undefined

 private:
  std::int64_t in_, out_;
};

}  // namespace dtrain::nn
