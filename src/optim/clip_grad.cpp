#include "dtrain/optim/clip_grad.h"

#include "dtrain/core/error.h"
#include "dtrain/tensor/ops.h"

#include <algorithm>
#include <cmath>

namespace dtrain::optim {

double grad_squared_norm(const std::vector<Variable>& params) {
  // One f64 accumulator per device, read once at the end: a single host sync per device
  // rather than one per parameter.
  std::vector<Tensor> sums;
  for (const Variable& p : params) {
    if (!p.has_grad()) continue;
    const Tensor& g = p.grad();
    Tensor g_sq = squared_norm(g);
    auto acc = std::find_if(sums.begin(), sums.end(), [&](const Tensor& s) { return s.device() == g.device(); });
    if (acc == sums.end()) {
      sums.push_back(g_sq);
    } else {
      add_(*acc, g_sq);
    }
  }
  double total = 0;
  for (const Tensor& s : sums) total += s.item();
  return total;
}

void clip_grads_to_norm(const std::vector<Variable>& params, double norm, double max_norm) {
  DTRAIN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  if (!std::isfinite(norm) || norm <= max_norm) return;
  const double scale = max_norm / (norm + 1e-6);
  for (const Variable& p : params) {
    if (!p.has_grad()) continue;
    Tensor g = p.grad();
    // Leaves own contiguous gradients; one set by hand may be a strided view that shares
    // its storage, which must not be written through.
    if (g.is_contiguous()) {
      mul_(g, scale);
    } else {
      Variable handle = p;
      handle.set_grad(mul(g, scale));
    }
  }
}

double clip_grad_norm(const std::vector<Variable>& params, double max_norm) {
  DTRAIN_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  const double norm = std::sqrt(grad_squared_norm(params));
  clip_grads_to_norm(params, norm, max_norm);
  return norm;
}

}  // namespace dtrain::optim
