// Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay,
// with exactly the semantics of torch.optim.SGD.
#pragma once

#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;      // [0, 1)
  double dampening = 0;     // [0, 1]
  double weight_decay = 0;  // >= 0; added to the gradient (L2)
  bool nesterov = false;    // needs momentum > 0 and dampening 0
  // Parameters with fewer than 2 dimensions (biases, batch-norm scales and shifts) get no
  // weight decay, the large-batch ImageNet recipe's exclusion; false is torch's behaviour.
  bool exclude_1d_from_weight_decay = false;
};

// Per parameter, with g its gradient:
//   g += weight_decay * p                          (unless excluded: 1-D with the option)
//   buf = g on the first update, else buf = momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf        (only when momentum > 0)
//   p -= lr * g
class SGD final : public Optimizer {
 public:
  SGD(std::vector<Variable> params, SgdOptions options);
  void step() override;
  std::unique_ptr<Optimizer> rebind(std::vector<Variable> params) const override;

 private:
  double momentum_;
  double dampening_;
  double weight_decay_;
  bool nesterov_;
  bool exclude_1d_from_weight_decay_;
  std::size_t momentum_buffer_;  // buffer id
};

}  // namespace dtrain::optim
