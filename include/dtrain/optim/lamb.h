// LAMB, layer-wise adaptive moments for batch training (You et al. 2019, "Large Batch
// Optimization for Deep Learning: Training BERT in 76 minutes", Algorithm 2): an Adam step
// with decoupled weight decay, rescaled per parameter tensor by a trust ratio of its
// weight and update norms.
#pragma once

#include "dtrain/optim/optimizer.h"

#include <optional>

namespace dtrain::optim {

struct LambOptions {
  double lr = 1e-3;            // >= 0
  double beta1 = 0.9;          // [0, 1)
  double beta2 = 0.999;        // [0, 1)
  double eps = 1e-6;           // > 0
  double weight_decay = 0.01;  // >= 0; decoupled (added to the update, not the moments)
  // Parameters with fewer than 2 dimensions (biases, batch- and layer-norm scales and
  // shifts) get neither weight decay nor a trust ratio: the paper's BERT exclusion of
  // bias and LayerNorm parameters, told apart here by shape.
  bool exclude_1d = true;
};

// Per parameter tensor p at its t-th update, with gradient g (norms are L2 over the whole
// tensor, accumulated in f64):
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2       (m, v start at 0)
//   r = m_hat / (sqrt(v_hat) + eps),  m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t)
//   excluded (exclude_1d and p.dim() < 2):  u = r,              trust = 1
//   otherwise:                               u = r + wd * p,     trust = ||p|| / ||u||
//                                            (trust = 1 when ||p|| or ||u|| is 0)
//   p -= lr * trust * u
// Bias correction is always applied, as in Algorithm 2; the scaling function phi is the
// identity (no clamp). An excluded parameter therefore moves exactly as under Adam without
// weight decay. Each non-excluded update reads its two norms to the host (a device sync
// per tensor on CUDA).
class LAMB final : public Optimizer {
 public:
  LAMB(std::vector<Variable> params, LambOptions options = {});
  void step() override;
  // Throws: the trust ratio is a per-tensor quantity, and a parameter server's shards are
  // slices of a flat parameter vector, so LAMB cannot be sharded that way.
  std::unique_ptr<Optimizer> rebind(std::vector<Variable> params) const override;
  // Over slices (sharded data parallelism): each step first computes every slice's update
  // direction and sums the squared norms of the weights and directions into their whole
  // tensors' over the ranks, then applies the updates with the whole tensors' trust ratios.
  std::unique_ptr<Optimizer> rebind_slices(std::vector<Variable> params, SliceNorms norms) const override;

 private:
  // One parameter's direction u (moments updated, weight decay added) and whether its
  // trust ratio applies.
  Tensor direction(std::size_t i, const Tensor& p, const Tensor& grad, std::int64_t update);
  void sliced_step();
  std::optional<SliceNorms> slices_;
  double beta1_;
  double beta2_;
  double eps_;
  double weight_decay_;
  bool exclude_1d_;
  std::size_t exp_avg_;     // buffer ids: first moment m
  std::size_t exp_avg_sq_;  // second moment v
};

}  // namespace dtrain::optim
