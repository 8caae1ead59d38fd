// Gradient clipping by global norm (Pascanu et al.), as torch.nn.utils.clip_grad_norm_.
#pragma once

#include "dtrain/autograd/variable.h"

#include <vector>

namespace dtrain::optim {

// The L2 norm of all the parameters' gradients taken together (parameters without a
// gradient are skipped), accumulated in double. When it exceeds max_norm (> 0), scales
// every gradient in place by max_norm / (norm + 1e-6). Returns the norm before clipping;
// a non-finite norm (inf or NaN gradients) leaves the gradients as they are, so that the
// caller can skip the step.
double clip_grad_norm(const std::vector<Variable>& params, double max_norm);

}  // namespace dtrain::optim
