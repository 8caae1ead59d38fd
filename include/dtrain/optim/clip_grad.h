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

// The two halves of clip_grad_norm, for gradients spread over processes (the stages of a
// pipeline), whose squared norms are summed across them in between:
// the sum of the squares of the gradients, in double (inf or NaN when one of them is),
double grad_squared_norm(const std::vector<Variable>& params);
// and the scaling of every gradient by max_norm / (norm + 1e-6) when the finite `norm`
// exceeds max_norm.
void clip_grads_to_norm(const std::vector<Variable>& params, double norm, double max_norm);

}  // namespace dtrain::optim
