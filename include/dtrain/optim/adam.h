// Adam and AdamW, with exactly the update (bias correction included) of torch.optim.Adam
// and torch.optim.AdamW (amsgrad off).
#pragma once

#include "dtrain/optim/optimizer.h"

#include <optional>

namespace dtrain::optim {

struct AdamOptions {
  double lr = 1e-3;      // >= 0
  double beta1 = 0.9;    // [0, 1)
  double beta2 = 0.999;  // [0, 1)
  double eps = 1e-8;     // > 0
  // >= 0; unset means PyTorch's default for the optimizer: 0 for Adam, 1e-2 for AdamW.
  std::optional<double> weight_decay = std::nullopt;
  // Parameters with fewer than 2 dimensions (biases, batch- and layer-norm scales and
  // shifts) get no weight decay, as in BERT's recipe; false is torch's behaviour.
  bool exclude_1d_from_weight_decay = false;
};

// Per parameter, at its t-th update, with g its gradient:
//   Adam:  g += weight_decay * p                   (L2, through the moments)
//   AdamW: p *= 1 - lr * weight_decay              (decoupled, before the Adam step)
//   (neither for a 1-D parameter with exclude_1d_from_weight_decay)
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
class Adam : public Optimizer {
 public:
  Adam(std::vector<Variable> params, AdamOptions options = {});
  void step() override;
  std::unique_ptr<Optimizer> rebind(std::vector<Variable> params) const override;

 protected:
  Adam(std::vector<Variable> params, const AdamOptions& options, bool decoupled_weight_decay);

 private:
  double beta1_;
  double beta2_;
  double eps_;
  double weight_decay_;
  bool decoupled_;
  bool exclude_1d_from_weight_decay_;
  std::size_t exp_avg_;     // buffer ids: first moment m
  std::size_t exp_avg_sq_;  // second moment v
};

class AdamW final : public Adam {
 public:
  AdamW(std::vector<Variable> params, AdamOptions options = {});
};

}  // namespace dtrain::optim
