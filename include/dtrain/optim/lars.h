// LARS, layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017, "Large Batch
// Training of Convolutional Networks"): momentum SGD whose step for each parameter tensor
// is scaled by a trust ratio of its weight and gradient norms, as in Algorithm 1 of the
// paper and the MLPerf ResNet-50 recipes (MXNet's and NVIDIA's LARS).
#pragma once

#include "dtrain/optim/optimizer.h"

#include <optional>
#include <utility>

namespace dtrain::optim {

struct LarsOptions {
  double lr = 1e-3;         // >= 0; the global rate gamma
  double momentum = 0.9;    // [0, 1)
  double weight_decay = 0;  // >= 0; beta, added to the gradient (L2)
  double eta = 1e-3;        // > 0; the trust coefficient
  double eps = 1e-9;        // >= 0; keeps the trust ratio finite
  bool nesterov = false;    // needs momentum > 0
  // Parameters with fewer than 2 dimensions (biases, batch-norm scales and shifts) get
  // neither weight decay nor a trust ratio, as in the MLPerf recipes: scaling them by
  // their own tiny norms stalls them.
  bool exclude_1d = true;
};

// Per parameter tensor p with gradient g (norms are L2 over the whole tensor, accumulated
// in f64):
//   excluded (exclude_1d and p.dim() < 2):  d = g,              trust = 1
//   otherwise:                               d = g + wd * p,     trust = eta * ||p|| / (||g|| + wd * ||p|| + eps)
//                                            (trust = 1 when ||p|| or ||g|| is 0)
//   v = momentum * v + lr * trust * d        (Algorithm 1: the rate is inside the buffer;
//                                             v starts at 0)
//   p -= nesterov ? momentum * v + lr * trust * d : v
// The paper's form puts lr in the buffer, so a schedule's change of lr acts on new
// gradients only; with a constant lr it equals buf = m * buf + trust * d, p -= lr * buf.
// An excluded parameter therefore moves exactly as under SGD with this momentum and no
// weight decay. Each non-excluded update reads its two norms to the host (a device sync
// per tensor on CUDA).
class LARS final : public Optimizer {
 public:
  LARS(std::vector<Variable> params, LarsOptions options = {});
  void step() override;
  // Throws: the trust ratio is a per-tensor quantity, and a parameter server's shards are
  // slices of a flat parameter vector, so LARS cannot be sharded that way.
  std::unique_ptr<Optimizer> rebind(std::vector<Variable> params) const override;
  // Over slices (sharded data parallelism): each step first sums every slice's squared
  // weight and gradient norms into its whole tensor's over the ranks, then updates.
  std::unique_ptr<Optimizer> rebind_slices(std::vector<Variable> params, SliceNorms norms) const override;

 private:
  LarsOptions options() const;
  // The whole tensors' squared norms (weight, gradient) per parameter, from this rank's
  // slices and the others' (slices_ set).
  std::vector<std::pair<double, double>> slice_norms();
  std::optional<SliceNorms> slices_;
  double momentum_;
  double weight_decay_;
  double eta_;
  double eps_;
  bool nesterov_;
  bool exclude_1d_;
  std::size_t momentum_buffer_;  // buffer id
};

}  // namespace dtrain::optim
